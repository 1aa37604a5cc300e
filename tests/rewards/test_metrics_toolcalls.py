"""Earth-Bench per-episode tool-call metrics (rewards/metrics/toolcalls.py)."""

from __future__ import annotations

import json

import pytest

from earthrl.rewards.metrics.earthbench import load_run
from earthrl.rewards.metrics.toolcalls import (
    efficiency,
    parameter_match,
    tool_any_order,
    tool_exact_match,
    tool_in_order,
)
from tests.paths import EARTHBENCH as EB
from tests.paths import EARTHBENCH_MISSING


def c(name, **args):
    return {"name": name, "arguments": args}


REF = [c("ls", d="x"), c("ndvi", f="a"), c("ndvi", f="b"), c("mean", f="o")]


def test_hand_computed_values():
    pred = [c("ls", d="x"), c("ndvi", f="a"), c("clip"), c("ndvi", f="b"), c("trend")]
    # any order: distinct ref names {ls, ndvi, mean}; pred has ls, ndvi -> 2/3
    assert tool_any_order(pred, REF) == pytest.approx(2 / 3)
    # in order: ls (pos 0), ndvi (pos 1), ndvi (skip clip, pos 3), mean not found -> 3/4
    assert tool_in_order(pred, REF) == pytest.approx(3 / 4)
    # exact: prefix ls, ndvi, then clip != ndvi -> 2/4
    assert tool_exact_match(pred, REF) == pytest.approx(2 / 4)
    # parameter: prefix with equal names and dicts: ls{d=x}, ndvi{f=a}, then clip -> 2/4
    assert parameter_match(pred, REF) == pytest.approx(2 / 4)
    # efficiency: 5 predicted / 4 reference calls
    assert efficiency(pred, REF) == pytest.approx(1.25)


def test_parameter_stops_at_first_argument_mismatch():
    pred = [c("ls", d="x"), c("ndvi", f="WRONG"), c("ndvi", f="b"), c("mean", f="o")]
    assert tool_exact_match(pred, REF) == 1.0      # all 4 names agree
    assert parameter_match(pred, REF) == 0.25      # step 2 args differ: 1/4


def test_in_order_stops_at_first_unfound_reference_tool():
    # ref order ls, ndvi, ndvi, mean; pred has mean before ls: greedy walk finds ls at
    # position 1, then ndvi nowhere after it -> stops with 1 match: 1/4, although mean exists.
    pred = [c("mean"), c("ls"), c("mean")]
    assert tool_in_order(pred, REF) == 0.25
    assert tool_any_order(pred, REF) == pytest.approx(2 / 3)


def test_empty_prediction_and_empty_reference():
    assert [f([], REF) for f in (tool_any_order, tool_in_order, tool_exact_match, parameter_match,
                                 efficiency)] == [0.0, 0.0, 0.0, 0.0, 0.0]
    # Earth-Agent's behaviour on an empty reference
    assert tool_any_order([], []) == 1.0 and tool_in_order([], []) == 1.0
    assert tool_exact_match([], []) == 0.0 and parameter_match([], []) == 1.0
    assert efficiency([], []) == 1.0 and efficiency([c("x")], []) == float("inf")


@pytest.mark.parametrize("run", ["gpt5_AP", "Kimik2_IF"])
def test_every_question_matches_earth_agents_own_scores(run):
    """Per-question values equal those in Earth-Agent's step_by_step / end_to_end files."""
    if not EB.is_dir():
        pytest.skip(reason=EARTHBENCH_MISSING)
    from earthrl.envs.benchmarks.earthbench import load_reference_file

    refs = load_reference_file(EB)
    records, _ = load_run(EB / "predictions" / run, truth={}, mode=run[-2:])
    by_id = {r.task_id: r for r in records}
    step = json.loads((EB / "predictions" / run / "step_by_step_evaluation_results.json").read_text())
    keys = {"contains_all_tool_calls_any_order": tool_any_order,
            "contains_all_tool_calls_in_order": tool_in_order,
            "trajectory_step_wise_score": tool_exact_match, "parameter_accuracy": parameter_match}
    assert len(step["individual_results"]) == 59
    for q, res in step["individual_results"].items():
        tid = "earthbench/" + q.removeprefix("question")
        for key, fn in keys.items():
            assert fn(by_id[tid].calls, refs[tid]["calls"]) == pytest.approx(res[key]["score"], abs=1e-12), (q, key)
    e2e = json.loads((EB / "predictions" / run / "end_to_end_evaluation_results.json").read_text())
    for row in e2e["efficiency"]["detailed_results"]:
        tid = "earthbench/" + row["question_index"].removeprefix("question")
        assert efficiency(by_id[tid].calls, refs[tid]["calls"]) == pytest.approx(row["efficiency"], abs=1e-12)
