"""``earthrl audit`` (envs/core/audit.py, envs/suites/audit.py, envs/benchmarks/earthbench_audit.py,
launch/audit_cmd.py): reference workflows re-run through RSEnv, answers judged by the rewards'
checker, alternative conventions, the reports and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin

from earthrl.envs.benchmarks.earthbench import load_earthbench
from earthrl.envs.benchmarks.earthbench_audit import audit_earthbench, register_inputs
from earthrl.envs.core.audit import (
    CONVENTIONS,
    Convention,
    audit_task,
    convention_problem,
    markdown_report,
    nearest_choice,
    with_overrides,
)
from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import save_tasks_file
from earthrl.envs.suites import earthrl_mini as suite_mini
from earthrl.envs.suites.audit import MiniAuditor, audit_mini
from earthrl.launch.audit_cmd import main as audit_main
from earthrl.rewards.outcome import answer_correct
from tests.paths import EARTHBENCH as EB
from tests.paths import EARTHBENCH_MISSING

TEMPLATES = ["ls_mean_ndvi", "l1_lst_stat"]
LST_ALT = Convention("lst_mixture", "land_surface_temperature", {"emissivity": "mixture_no_cavity"},
                     "mixture emissivity instead of Sobrino 2004 NDVI^THM")


@pytest.fixture(scope="module")
def built(data_root):
    """A few earthrl-mini tasks (Landsat 5/7 NDVI means with choice twins, Landsat 8 LST stats)."""
    tasks = suite_mini.build(data_root, templates=TEMPLATES).tasks
    picked = [t for t in tasks if t.template == "ls_mean_ndvi"][:2]
    picked += [t for t in tasks if t.template == "ls_mean_ndvi_mc"][:1]
    picked += [t for t in tasks if t.template == "l1_lst_stat"][:1]
    assert {t.template for t in picked} == {"ls_mean_ndvi", "ls_mean_ndvi_mc", "l1_lst_stat"}
    return picked


@pytest.fixture(scope="module")
def audited(built, data_root):
    return {a.id: a for a in audit_mini(built, data_root, answer_correct, conventions=(LST_ALT,))}


def _corrupt(task):
    """A copy whose answer is wrong: a numeric value 10 tolerances off, or another letter."""
    a = task.answer
    if a.kind == "numeric":
        bad = a.model_copy(update={"value": a.value + 10 * max(a.tolerance, 1e-3)})
    else:
        bad = a.model_copy(update={"value": next(k for k in a.options if k != a.value)})
    return task.model_copy(update={"answer": bad})


def test_reference_answers_reproduce_with_the_task_values(built, audited):
    for t in built:
        a = audited[t.id]
        assert a.status == "reproduced", a.as_dict()
        if t.answer.kind == "numeric":
            assert a.result.computed == t.answer.value and a.result.nearest_choice is None
        else:  # a choice twin: the number is the option the letter names, the nearest option that letter
            assert a.result.nearest_choice == t.answer.value
            assert float(t.answer.options[t.answer.value].split()[0]) == a.result.computed


def test_corrupted_answer_is_flagged_with_the_computed_value_and_nearest_choice(built, data_root, tmp_path):
    auditor = MiniAuditor(data_root, tmp_path, answer_correct)
    try:
        for t in built[1:3]:  # one numeric task, one choice twin
            good, bad = audit_task(t, auditor, ()), audit_task(_corrupt(t), auditor, ())
            assert good.status == "reproduced" and bad.status == "not_reproduced"
            assert bad.result.computed == good.result.computed
            assert bad.result.nearest_choice == good.result.nearest_choice
            if t.answer.kind == "choice":
                assert bad.result.nearest_choice == t.answer.value != bad.expected["value"]
    finally:
        auditor.close()


def test_an_alternative_convention_changes_the_computed_value(built, audited):
    lst = next(t for t in built if t.template == "l1_lst_stat")
    alt = audited[lst.id].alternatives["lst_mixture"]
    assert alt["computed"] is not None and abs(alt["computed"] - lst.answer.value) > 1e-3
    assert alt["verdict_changes"] == (not alt["reproduced"])
    ndvi = next(t for t in built if t.template == "ls_mean_ndvi")  # no LST call: not applicable
    assert audited[ndvi.id].alternatives == {}


def test_overrides_nearest_choice_and_unavailable_conventions():
    calls = [{"name": "tvdi", "arguments": {"ndvi": "a", "lst": "b"}}, {"name": "share_above", "arguments": {"name": "x"}}]
    conv = Convention("c", "tvdi", {"bins": 20}, "")
    assert with_overrides(calls, conv)[0]["arguments"] == {"ndvi": "a", "lst": "b", "bins": 20}
    assert with_overrides(calls, conv)[1] is calls[1] and calls[0]["arguments"] == {"ndvi": "a", "lst": "b"}
    assert with_overrides(calls, Convention("d", "mask_area", {}, "")) is None
    assert nearest_choice(28.2, {"A": "12.87%", "B": "22.40%", "C": "28.07%"}) == "C"
    assert nearest_choice(-0.05, {"A": "about -0.0472", "B": "-0.0502 rise"}) == "B"
    assert nearest_choice("b", {"A": "x", "B": "y"}) == "B" and nearest_choice(1.0, {"A": "none"}) is None
    assert convention_problem(Convention("e", "mask_area", {"no_such_arg": 1}, "")) == \
        "tool mask_area has no argument no_such_arg"
    assert convention_problem(Convention("f", "no_tool", {}, "")) == "tool 'no_tool' is not registered"
    assert all(c.doc and c.overrides for c in CONVENTIONS)


def test_cli_writes_both_reports_and_exits_by_strict(built, tmp_path, capsys):
    path = tmp_path / "tasks.jsonl"
    save_tasks_file([built[0], _corrupt(built[1])], path)
    out = tmp_path / "out"
    assert audit_main([str(path), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["summary"] == {"tasks": 2, "reproduced": 1, "not_reproduced": 1, "could_not_run": 0,
                                 "verdict_changes": 0}
    bad = next(t for t in report["tasks"] if t["status"] == "not_reproduced")
    assert bad["id"] == built[1].id and bad["computed"] == built[1].answer.value
    md = (out / "report.md").read_text()
    assert f"| {built[1].id} | not_reproduced |" in md and "## Alternative conventions" in md
    assert "2 tasks: 1 reproduced, 1 not reproduced, 0 could not run" in capsys.readouterr().out
    assert audit_main([str(path), "--out", str(out), "--strict"]) == 1
    with pytest.raises(SystemExit) as e:
        audit_main(["earthbench", "--benchmark", str(tmp_path)])
    assert e.value.code == 2
    assert "--data DIR" in capsys.readouterr().err


def _tif(path: Path, arr: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with rasterio.open(path, "w", driver="GTiff", height=arr.shape[0], width=arr.shape[1], count=1,
                       dtype="float32", crs="EPSG:3857", transform=from_origin(11.5e6, 3.6e6, 500, 500),
                       nodata=-9999) as dst:
        dst.write(arr.astype(np.float32), 1)


def test_earthbench_runs_what_maps_on_synthesized_rasters(tmp_path, data_root):
    """Question 2 (compute_tvdi, then calculate_threshold_ratio > 0.75) on synthesized rasters with
    Earth-Bench's file names; question 4's files are absent; question 1 uses unmapped tools."""
    if not (EB / "question.json").is_file():
        pytest.skip(reason=EARTHBENCH_MISSING)
    rng = np.random.default_rng(0)
    ndvi = rng.uniform(0.05, 0.85, (40, 40))
    lst = 320 - 25 * ndvi + rng.uniform(-8, 8, ndvi.shape)
    ndvi[0, :3] = np.nan  # no-data pixels stay out
    _tif(tmp_path / "data" / "question2" / "Sichuan_2021-07-12_NDVI.tif", np.nan_to_num(ndvi, nan=-9999))
    _tif(tmp_path / "data" / "question2" / "Sichuan_2021-07-12_LST.tif", lst)
    tasks = {t.id: t for t in load_earthbench(EB)}
    q2, q4, q1 = tasks["earthbench/2"], tasks["earthbench/4"], tasks["earthbench/1"]
    audits = {a.id: a for a in audit_earthbench([q2, q4, q1], tmp_path, data_root, answer_correct)}

    # the same two EarthRL calls by hand, in an env, on the same files
    env = RSEnv(data_root, tmp_path / "ws", toolset="all")
    env.reset(q2.model_copy(update={"data": [], "reference": []}))
    register_inputs(env.registry, sorted((tmp_path / "data" / "question2").glob("*.tif")))
    t = env.step('<tool_call>{"name": "tvdi", "arguments": {"ndvi": "Sichuan_2021-07-12_NDVI", '
                 '"lst": "Sichuan_2021-07-12_LST"}}</tool_call>')
    assert not t.error, t.observation
    s = env.step(json.dumps({"name": "share_above", "arguments": {"name": t.result["artifact"], "value": 0.75}})
                 .join(["<tool_call>", "</tool_call>"]))
    env.close()
    a2 = audits["earthbench/2"]
    assert a2.result.computed == pytest.approx(s.result["share_pct"])
    options = {k: float(v.rstrip("%")) for k, v in q2.answer.options.items()}
    assert a2.result.nearest_choice == min(options, key=lambda k: abs(options[k] - a2.result.computed))
    assert a2.status == ("reproduced" if a2.result.nearest_choice == "C" else "not_reproduced")
    assert audits["earthbench/4"].status == "could_not_run"
    assert "question4/Chengdu_2022-08-13_LST.tif" in audits["earthbench/4"].result.reason
    assert audits["earthbench/1"].result.reason.startswith("no EarthRL counterpart for calc_batch_image_mean")


def test_threshold_answer_is_rederived_independently_of_the_tools(data_root, tmp_path, monkeypatch):
    """The NDBI > 0.1 built-up area: the audit re-derives it in float64 from the raw DN
    (envs/suites/audit_exact.py), so it flags an answer made wrong even when the tools, made wrong
    the same way, reproduce it (here ``>`` counting pixels on the threshold, as ``>=``)."""
    import operator

    from earthrl.envs.tools import mini_toolset as mini_tools

    task = next(t for t in suite_mini.build(data_root, templates=["s2_builtup_share"]).tasks
                if t.id.endswith("NDBI_gt0.1/km2"))
    good = audit_task(task, MiniAuditor(data_root, tmp_path / "a", answer_correct), ())
    assert good.status == "reproduced" and good.result.independent == pytest.approx(task.answer.value, rel=1e-3)
    bad = audit_task(_corrupt(task), MiniAuditor(data_root, tmp_path / "b", answer_correct), ())
    assert bad.status == "not_reproduced" and bad.result.independent_ok is False
    monkeypatch.setitem(mini_tools.OPS, ">", operator.ge)
    wrong_tools = MiniAuditor(data_root, tmp_path / "c", answer_correct)
    made = audit_task(task, wrong_tools, ()).result.computed  # the answer the wrong rule gives
    assert made > task.answer.value * 1.01
    wrong = task.model_copy(update={"answer": task.answer.model_copy(update={"value": made})})
    a = audit_task(wrong, MiniAuditor(data_root, tmp_path / "d", answer_correct), ())
    assert a.result.reproduced is True and a.result.independent_ok is False
    assert a.status == "not_reproduced" and a.result.independent == good.result.independent
    assert "DISAGREES" in markdown_report("earthrl-mini", [a])
