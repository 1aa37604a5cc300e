"""A training run's plots (``launch/run_plots.py``) drawn from a known run folder: every plotted value is read
back from the figure and checked against the run's metrics.jsonl and rollouts.jsonl, computed by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from earthrl.launch.run_plots import figures, run_series, write_run_plots
from earthrl.rewards.metrics.error_kinds import NO_CALL
from earthrl.rollout.step_accounting import by_skill

METRICS = [
    {"step": 1, "rollout/error_turn_rate": 0.5, "rollout/mean_turns": 4.0,
     "rollout/by_skill/water/reward": 1.0, "rollout/by_skill/water/accuracy": 0.5,
     "rollout/by_skill/vegetation/reward": -0.5, "rollout/by_skill/vegetation/accuracy": 0.0},
    {"step": 2, "rollout/error_turn_rate": 0.25, "rollout/mean_turns": 3.0,
     "rollout/by_skill/water/reward": 2.5, "rollout/by_skill/water/accuracy": 1.0},
]


def _turn(advantage, error=False, kind=None, call=None, calls=()):
    return {"advantage": advantage, "error": error, "error_kind": kind, "tool_call": call, "tool_calls": list(calls)}


ROLLOUTS = [
    {"step": 1, "faulted": False, "turns": [_turn(1.0, True, "parse_error"), _turn(1.0)]},
    {"step": 1, "faulted": False, "turns": [_turn(-1.0, True, "schema_error", {"name": "ndvi", "arguments": {}}),
                                            _turn(None)]},
    {"step": 1, "faulted": True, "turns": [_turn(5.0, True, "env_failure")]},  # out of every plot
    {"step": 2, "faulted": False, "turns": [  # a CodeAct turn: two calls, one failed
        _turn(0.5, True, "tool_error", None, [{"name": "ndvi", "error": True, "error_kind": "tool_error"},
                                              {"name": "mean", "error": False}])]},
]


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in METRICS))
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROLLOUTS) + '{"step": 3, "tur')
    return tmp_path


def test_series_are_the_runs_values(run_dir):
    s = run_series(run_dir)
    assert s["steps"] == [1, 2]
    assert s["reward_by_skill"] == {"vegetation": ([1], [-0.5]), "water": ([1, 2], [1.0, 2.5])}
    assert s["accuracy_by_skill"] == {"vegetation": ([1], [0.0]), "water": ([1, 2], [0.5, 1.0])}
    assert s["eir"] == ([1, 2], [0.5, 0.25]) and s["turns"] == ([1, 2], [4.0, 3.0])
    assert s["advantages"] == {1: [1.0, 1.0, -1.0], 2: [0.5]}  # None and the faulted trajectory left out
    assert s["error_kinds"] == {NO_CALL: {"parse_error": 1}, "ndvi": {"schema_error": 1, "tool_error": 1}}


def test_every_figure_draws_those_values(run_dir):
    figs = figures(run_series(run_dir))
    assert sorted(figs) == ["accuracy_by_skill", "advantage_histogram", "eir_turns", "error_kinds_by_tool",
                            "reward_by_skill"]
    lines = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in figs["reward_by_skill"].axes[0].lines}
    assert lines == {"vegetation": ([1], [-0.5]), "water": ([1, 2], [1.0, 2.5])}
    for fig in (figs["reward_by_skill"], figs["eir_turns"]):  # whole steps on the x axis (1, 2, not 1.25)
        for ax in fig.axes:
            fig.canvas.draw()
            ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
            assert ticks and all(float(t).is_integer() for t in ticks), ticks
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in figs["accuracy_by_skill"].axes[0].lines}
    assert lines == {"vegetation": [0.0], "water": [0.5, 1.0]}
    eir, turns = figs["eir_turns"].axes
    assert list(eir.lines[0].get_ydata()) == [0.5, 0.25] and list(turns.lines[0].get_ydata()) == [4.0, 3.0]
    # the histogram of step 1 holds 3 turns: two at +1, one at -1 (20 bins from -1 to 1)
    hist = figs["advantage_histogram"].axes[0]
    assert [p.get_label() for p in hist.patches] == ["step 1", "step 2"]
    outline = hist.patches[0].get_xy()  # the step outline: x from -1 to 1, its tallest bin 2 turns (at +1)
    assert outline[:, 0].min() == -1.0 and outline[:, 0].max() == 1.0 and outline[:, 1].max() == 2.0
    assert outline[np.argmax(outline[:, 1]), 0] == pytest.approx(0.9)  # the top's left edge: the last bin [0.9, 1]
    assert hist.patches[1].get_xy()[:, 1].max() == 1.0  # step 2: one turn
    # error kinds: stacked bars per tool; widths are the counts of each kind
    bars = figs["error_kinds_by_tool"].axes[0]
    widths = {(c.get_label(), i): r.get_width() for c in bars.containers for i, r in enumerate(c)}
    tools = [t.get_text() for t in bars.get_yticklabels()]
    assert tools == [NO_CALL, "ndvi"]
    assert widths == {("parse_error", 0): 1, ("parse_error", 1): 0, ("schema_error", 0): 0, ("schema_error", 1): 1,
                      ("tool_error", 0): 0, ("tool_error", 1): 1}


def test_pngs_are_written_in_the_run_folder(run_dir):
    paths = write_run_plots(run_dir)
    assert sorted(p.name for p in paths) == ["accuracy_by_skill.png", "advantage_histogram.png", "eir_turns.png",
                                             "error_kinds_by_tool.png", "reward_by_skill.png"]
    assert all(p.parent == run_dir / "plots" and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_a_run_without_files_draws_nothing(tmp_path):
    assert write_run_plots(tmp_path) == []


def test_by_skill_means_by_hand():
    m = by_skill(["water", "veg", "water"], [1.0, -1.0, 2.0], [1.0, 0.0, 0.0])
    assert m == {"rollout/by_skill/veg/reward": -1.0, "rollout/by_skill/veg/accuracy": 0.0,
                 "rollout/by_skill/water/reward": 1.5, "rollout/by_skill/water/accuracy": 0.5}
    assert by_skill([], [], []) == {}
    with pytest.raises(ValueError, match="2 skills, 1 rewards"):
        by_skill(["a", "b"], [1.0], [1.0, 0.0])
