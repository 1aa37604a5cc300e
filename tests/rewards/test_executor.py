import pytest

from earthrl.rewards.executor import executor_call_reward
from earthrl.rewards.registry import TURN_REWARDS
from earthrl.tests.algorithms.builders import TASK, traj, turn


def test_executor_tiers_exact():
    t = traj([
        turn(call=("spectral_index", {"scene": "s2", "index": "NDWI"})),            # keys 1, values 1/2
        turn(call=("threshold_mask", {"name": "ndvi_s2", "value": 0.3})),           # keys 2/3, values 2/3
        turn(error=True, error_kind="parse_error"),
        turn(error=True, error_kind="schema_error", call=("pixel_share", {"nme": "x"})),
        turn(error=True, error_kind="unknown_tool", call=("pixel_sharing", {})),
        turn(error=True, error_kind="tool_error", call=("raster_stats", {"name": "x"})),  # no reference step 5
    ])
    r = TURN_REWARDS.lookup("executor_tiered")(t, TASK)
    assert r == pytest.approx([0.5 * 1 + 0.5 * 0.5, 0.5 * (2 / 3) + 0.5 * (2 / 3), -2.0, -1.0, -1.0, 0.0])


def test_wrong_tool_and_exact_match():
    ref = {"name": "pixel_share", "arguments": {"name": "ndvi_s2_gt0.3"}}
    assert executor_call_reward(turn(call=("mask_area", {"name": "ndvi_s2_gt0.3"})), ref) == 0.0
    assert executor_call_reward(turn(call=("pixel_share", {"name": "NDVI_s2_gt0.3"})), ref) == 1.0
    assert executor_call_reward(turn(error_kind="parse_error"), ref, format_penalty=-3.0) == -3.0


def test_planner_executor_turns_are_graded_against_their_tools_reference_steps():
    t = traj([
        turn(role="planner", node="plan"),
        turn(role="executor", node="n1", call=("spectral_index", {"scene": "s2", "index": "NDVI"})),  # exact
        turn(role="executor", node="n2", error=True, error_kind="parse_error"),
        turn(role="executor", node="n2", call=("threshold_mask", {"name": "ndvi_s2", "value": 0.3})),  # keys 2/3, values 2/3
        turn(role="executor", node="n3", call=("mask_area", {"name": "x"})),  # no reference step of this tool
    ])
    r = TURN_REWARDS.lookup("executor_tiered")(t, TASK)
    assert r == pytest.approx([0.0, 1.0, -2.0, 0.5 * (2 / 3) + 0.5 * (2 / 3), 0.0])
