"""The evaluation report's error kinds (rewards/metrics/error_kinds.py via report.build_report) from a hand-made
trajectories file whose counts are known: per kind, per episode, per tool, and the faults beside them."""

from __future__ import annotations

import json

import pytest

from earthrl.rewards.metrics.error_kinds import NO_CALL
from earthrl.rewards.metrics.report import build_report, write_report


def turn(error_kind=None, call=None, calls=(), candidate=0):
    return {"response_ids": [1, 2], "response_logprobs": [0.0, 0.0], "error": error_kind is not None or
            any(c.get("error") for c in calls), "error_kind": error_kind, "tool_call": call,
            "tool_calls": list(calls), "candidate": candidate}


def fail(name, kind):
    return {"name": name, "arguments": {}, "error": True, "error_kind": kind}


def episode(task_id, turns, failure=None):
    traj = {"task_id": task_id, "group": "g", "prompt_ids": [0], "turns": turns}
    if failure:
        traj |= {"faulted": True, "failure": failure}
    return {"task_id": task_id, "mode": "IF", "action_format": "json", "trajectory": traj}


ENTRIES = [
    # a parse error (no call), a schema error of ndvi, then a good turn
    episode("t1", [turn("parse_error"), turn("schema_error", {"name": "ndvi", "arguments": {}}), turn()]),
    # a CodeAct turn with two failed calls of three, then an unknown tool
    episode("t1", [turn("hallucinated_path", None, [fail("ndvi", "hallucinated_path"),
                                                   {"name": "mean", "arguments": {}, "error": False},
                                                   fail("mean", "hallucinated_path")]),
                   turn("unknown_tool", {"name": "nope", "arguments": {}})]),
    # no error played; a node-level candidate call (never run) with an error does not count
    episode("t2", [turn(), turn("schema_error", {"name": "ndvi", "arguments": {}}, candidate=1)]),
    # ended by a step timeout: out of every metric, listed as a fault
    episode("t2", [turn("schema_error", {"name": "ndvi", "arguments": {}})], failure="env_timeout"),
]
TASKS = {t: {"id": t, "skill": "water", "reference": [], "answer": None} for t in ("t1", "t2")}


@pytest.fixture
def report(tmp_path):
    path = tmp_path / "trajectories.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in ENTRIES))
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    return build_report(entries, TASKS, n_resamples=0)


def test_counts_rates_and_tools_are_the_files(report):
    ek = report["error_kinds"]
    assert ek["episodes"] == 3  # the faulted episode is out
    assert ek["by_kind"] == {
        "hallucinated_path": {"count": 2, "per_episode": pytest.approx(2 / 3), "episodes": 1},
        "parse_error": {"count": 1, "per_episode": pytest.approx(1 / 3), "episodes": 1},
        "schema_error": {"count": 1, "per_episode": pytest.approx(1 / 3), "episodes": 1},
        "unknown_tool": {"count": 1, "per_episode": pytest.approx(1 / 3), "episodes": 1}}
    assert list(ek["by_kind"]) == ["hallucinated_path", "parse_error", "schema_error", "unknown_tool"]
    assert ek["by_tool"] == {NO_CALL: {"parse_error": 1}, "mean": {"hallucinated_path": 1},
                             "ndvi": {"hallucinated_path": 1, "schema_error": 1}, "nope": {"unknown_tool": 1}}
    assert ek["faults"] == {"env_timeout": 1}


def test_json_and_markdown_carry_them(report, tmp_path):
    paths = write_report(report, tmp_path, plots=False)
    assert json.loads(paths["json"].read_text())["error_kinds"]["by_kind"]["hallucinated_path"]["count"] == 2
    md = paths["markdown"].read_text()
    assert "## Error kinds (3 episodes)" in md
    assert "| hallucinated_path | 2 | 0.667 | 1 |" in md and "| unknown_tool | 1 | 0.333 | 1 |" in md
    # per tool, columns in the kinds' order: hallucinated_path, parse_error, schema_error, unknown_tool
    assert "| ndvi | 1 | 0 | 1 | 0 |" in md and f"| {NO_CALL} | 0 | 1 | 0 | 0 |" in md
    assert "env_timeout 1" in md


def test_no_error_no_section(tmp_path):
    clean = build_report([episode("t1", [turn()])], TASKS, n_resamples=0)
    assert clean["error_kinds"] == {"episodes": 1, "by_kind": {}, "by_tool": {}, "faults": {}}
    assert "Error kinds" not in write_report(clean, tmp_path, plots=False)["markdown"].read_text()
