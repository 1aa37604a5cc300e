"""compute_all and breakdown (rewards/metrics/compute.py) on hand-built records."""

from __future__ import annotations

import math

import pytest

from earthrl.rewards.episode import EpisodeRecord
from earthrl.rewards.metrics.compute import METRICS, breakdown, compute_all, references_of


def c(name, **args):
    return {"name": name, "arguments": args}


REFS = {"t1": [c("load", s=1), c("ndvi", s=1)], "t2": [c("load", s=2), c("lst", s=2), c("mean")],
        "t3": [c("load", s=3)]}


def turns(*errors, act=10, obs=4):
    return [{"error": e, "error_kind": "parse_error" if e else None, "action_tokens": act,
             "observation_tokens": obs, "role": "agent", "tool_calls": []} for e in errors]


def records():
    return [
        # t1: perfect plan, right answer, 3 turns (1 parse error)
        EpisodeRecord("t1", calls=[c("load", s=1), c("ndvi", s=1)], turns=turns(True, False, False),
                      answer={"value": 1}, correct=True, skill="spectral_index", mode="AP"),
        # t2: wrong order + extra call, wrong answer, 2 turns without errors
        EpisodeRecord("t2", calls=[c("lst", s=2), c("load", s=2), c("mean"), c("mean")], turns=turns(False, False),
                      answer={"value": 2}, correct=False, skill="lst_inversion", mode="IF"),
        # an environment failure: never scored
        EpisodeRecord("t3", calls=[], turns=turns(True), correct=False, faulted=True, skill="x"),
    ]


def test_default_mode_values_hand_computed():
    res = compute_all(records(), REFS, n_resamples=200)
    m = res["metrics"]
    assert set(m) == set(METRICS)
    assert res["skipped"]["faulted"] == ["t3"] and res["skipped"]["missing_prediction"] == []
    # t3 is in the universe but its only record is an env failure: neither scored nor "missing"
    assert m["accuracy"]["value"] == pytest.approx(0.5) and m["accuracy"]["n"] == 2
    # efficiency: t1 2/2 = 1, t2 4/3 -> mean (1 + 4/3)/2 = 7/6
    assert m["efficiency"]["value"] == pytest.approx(7 / 6)
    # any-order: t1 1, t2 {load,lst,mean} all used 1 -> 1
    assert m["tool_any_order"]["value"] == 1.0
    # in-order: t1 1; t2 ref load,lst,mean in pred lst,load,mean,mean: load@1, lst not after -> 1/3
    assert m["tool_in_order"]["value"] == pytest.approx((1 + 1 / 3) / 2)
    # exact: t1 1; t2 lst != load at 0 -> 0
    assert m["tool_exact_match"]["value"] == 0.5 and m["parameter"]["value"] == 0.5
    # EIR: 1 error turn of 3 + 2 = 5 turns; Fmt.Err the same (the error is a parse error)
    assert m["eir"]["value"] == pytest.approx(1 / 5) and m["fmt_err"]["value"] == pytest.approx(1 / 5)
    assert m["avg_turns"]["value"] == 2.5
    # tokens per episode: t1 3 turns x 10 = 30, t2 20 -> 25; observations 12 and 8 -> 10
    assert m["action_tokens"]["value"] == 25 and m["observation_tokens"]["value"] == 10
    # PSR, AEM: t1 only -> 1/2; TSA: both sets equal -> 1
    assert m["psr"]["value"] == 0.5 and m["aem"]["value"] == 0.5 and m["tsa"]["value"] == 1.0
    assert m["hal_rate"]["value"] == 0.0
    # ThinkGeo: ref steps t1 = load, ndvi, answer; t2 = load, lst, mean, answer.
    # t1 pred load, ndvi, answer -> inst 3, tool 2, arg 2; t2 pred lst, load, mean, mean, answer:
    # positions 1-3 are tool vs tool -> inst 3, names equal only at 3 (mean) -> tool 1, arg 1.
    # Inst. = (3 + 3) / (3 + 4); Tool. = (2 + 1) / (2 + 3); Arg. = (2 + 1) / 5
    assert m["inst"]["value"] == pytest.approx(6 / 7)
    assert m["tool"]["value"] == pytest.approx(3 / 5) and m["arg"]["value"] == pytest.approx(3 / 5)
    assert m["ans"]["value"] == 0.5 == m["ans_i"]["value"]
    # the plan metrics read a planning loop's plan: these records (no plan) are left out of them
    assert m["plan_psr"]["n"] == 0 == m["plan_tsa"]["n"] and m.pop("plan_psr")["value"] != m.pop("plan_tsa")["value"]
    for v in m.values():  # every other metric carries its interval
        assert v["ci95"][0] <= v["value"] + 1e-12 and v["value"] <= v["ci95"][1] + 1e-12


def test_missing_prediction_counts_zero_by_default_and_is_skipped_in_earthbench_mode():
    recs = records()[:1]  # only t1
    res = compute_all(recs, REFS, n_resamples=100)
    assert sorted(res["skipped"]["missing_prediction"]) == ["t2", "t3"]
    # accuracy: t1 right, t2 and t3 missing -> 1/3; any-order 1/3; efficiency over t1 only
    assert res["metrics"]["accuracy"]["value"] == pytest.approx(1 / 3)
    assert res["metrics"]["tool_any_order"]["value"] == pytest.approx(1 / 3)
    assert res["metrics"]["efficiency"]["n"] == 1 and res["metrics"]["avg_turns"]["n"] == 1
    eb = compute_all(recs, REFS, mode="earthbench", task_ids=["t1", "t2", "t3"], n_resamples=100)
    assert set(eb["metrics"]) == {"tool_any_order", "tool_in_order", "tool_exact_match", "parameter",
                                  "efficiency", "accuracy"}
    assert eb["metrics"]["accuracy"]["value"] == 1.0 and eb["metrics"]["accuracy"]["n"] == 1


def test_records_without_reference_or_outside_tasks_are_reported():
    extra = EpisodeRecord("t9", calls=[c("load")], correct=True)
    res = compute_all([*records(), extra], REFS, n_resamples=50)
    assert res["skipped"]["no_reference"] == ["t9"]
    res = compute_all(records(), REFS, task_ids=["t1"], n_resamples=50)
    assert res["skipped"]["outside_tasks"] == 2 and res["metrics"]["accuracy"]["n"] == 1


def test_metric_with_no_data_is_nan():
    rec = EpisodeRecord("t1", calls=[c("load", s=1)], correct=True)  # no turns logged
    res = compute_all([rec], {"t1": REFS["t1"]}, n_resamples=50)
    assert math.isnan(res["metrics"]["eir"]["value"]) and res["metrics"]["eir"]["n"] == 0
    assert res["skipped"]["no_turns"] == 1


def test_breakdown_by_skill_and_mode():
    by_skill = breakdown(records(), REFS, by="skill", n_resamples=50)
    assert sorted(by_skill) == ["lst_inversion", "spectral_index", "x"]
    assert by_skill["spectral_index"]["metrics"]["accuracy"]["value"] == 1.0
    assert by_skill["lst_inversion"]["metrics"]["accuracy"]["value"] == 0.0
    assert by_skill["x"]["skipped"]["faulted"] == ["t3"]
    by_mode = breakdown(records(), REFS, by=lambda r: r.mode, metrics=["psr"], n_resamples=50)
    assert by_mode["AP"]["metrics"]["psr"]["value"] == 1.0 and by_mode["IF"]["metrics"]["psr"]["value"] == 0.0


def test_references_of_taskspecs_and_errors():
    from earthrl.envs.core.tasks import AnswerSpec, TaskSpec, ToolCall

    t = TaskSpec(id="a", question={"AP": "q"}, data=[], reference=[ToolCall(name="x", arguments={"k": 1})],
                 answer=AnswerSpec(kind="choice", value="A", options={"A": "a", "B": "b"}), skill="land_cover")
    assert references_of([t]) == {"a": [{"name": "x", "arguments": {"k": 1}}]}
    with pytest.raises(ValueError, match="mode"):
        compute_all([], REFS, mode="nope")
    with pytest.raises(ValueError, match="unknown metrics"):
        compute_all([], REFS, metrics=["nope"])


def test_report_json_is_strict_json_a_missing_value_is_null(tmp_path):
    import json
    import math

    from earthrl.rewards.metrics.report import write_report

    report = {"n_trajectories": 2, "n_tasks": 1, "metrics_mode": "earthrl", "skipped": {}, "roles": {},
              "metrics": {"n": 2, "eir": {"value": math.nan, "ci95": [math.nan, math.inf], "n": 0},
                          "accuracy": {"value": 0.5, "ci95": (0.25, 0.75), "n": 2}},
              "by_skill": {}, "by_mode": {}, "turns_histogram": {}, "tokens_by_format": {}}
    write_report(report, tmp_path, plots=False)
    text = (tmp_path / "report.json").read_text()

    def refuse(constant):
        raise AssertionError(f"bare {constant} in report.json")

    back = json.loads(text, parse_constant=refuse)
    assert back["metrics"]["eir"] == {"value": None, "ci95": [None, None], "n": 0}
    assert back["metrics"]["accuracy"] == {"value": 0.5, "ci95": [0.25, 0.75], "n": 2}
    assert math.isnan(report["metrics"]["eir"]["value"])  # the report in memory is left as it was
