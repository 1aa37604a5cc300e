import pytest

from earthrl.rewards.hirs import exec_score, manager_reward, routing_correctness, specialist_rewards
from earthrl.rewards.registry import REWARDS, TURN_REWARDS
from earthrl.tests.algorithms.builders import TASK, traj, turn


def _m(family):
    return turn(role="manager", subgoal={"family": family, "subgoal": "..."})


def _s(call=None, verdict=None, error=False):
    return turn(error=error, role="specialist", call=call, verdict=verdict)


def _episode():
    return traj([
        _m("PRA"),
        _s(("spectral_index", {"scene": "s2", "index": "NDWI"}), "pass"),   # k=0 tier 3, R_args 1/2
        _m("SPA"),
        _s(("water_mask", {"name": "ndvi_s2"}), "fail"),                    # k=1 in-domain, not threshold_mask
        _m("SAA"),
        _s(("pixel_share", {"name": "ndvi_s2_gt0.3"}), "uncertain"),         # k=2 tier 3, R_args 1
        _s(None, None, error=True),                                          # k=3 no parsable call
        _m("SAA"),
        _s(("spectral_index", {"scene": "s2", "index": "NDVI"}), "pass"),   # k=4 PRA tool routed to SAA
    ], answer={"value": 12.4, "unit": "%"})


def test_specialist_tiers_exact():
    t = _episode()
    r = TURN_REWARDS.lookup("hirs_specialist")(t, TASK)
    expected = [0.0, 0.5 + 0.2 * 1 + 0.3 * 0.5,
                0.0, -0.5 + 0.2 * -1,
                0.0, 0.5 + 0.2 * 0 + 0.3 * 1.0,
                -1.0,
                0.0, -1.0]
    assert r == pytest.approx(expected)


def test_hallucinated_tool_and_missing_verdict():
    t = traj([_m("SPA"), _s(("invent_tool", {}), "pass"), _s(("water_mask", {}), None, error=True)])
    # unknown tool: tier 1; in-domain wrong tool without verdict but E=1: R_exec = -1
    assert specialist_rewards(t, TASK) == pytest.approx([0.0, -1.0, -0.7])
    assert exec_score(turn()) == 0.0


def test_routing_and_manager_reward():
    t = _episode()
    # manager families PRA, SPA, SAA, SAA vs reference PRA, SPA, SAA: 3 hits / max(4, 3)
    assert routing_correctness(t, TASK) == 0.75
    # 0.5·0.75 + 1·correct − 0.1·9/25
    assert REWARDS.lookup("hirs_manager")(t, TASK) == pytest.approx(0.375 + 1.0 - 0.036)
    assert manager_reward(t, TASK, w_route=1.0, w_success=0.0, w_length=0.0) == 0.75
