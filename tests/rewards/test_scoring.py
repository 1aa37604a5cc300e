"""The scoring stage on hand-built trajectories: hand-computed numbers, and nothing written on them."""

import copy

import pytest

from earthrl.rewards.registry import TURN_REWARDS
from earthrl.rewards.scoring import Scores, score
from earthrl.rollout.trajectory import Trajectory
from earthrl.tests.algorithms.builders import TASK, traj, turn
from earthrl.tests.algorithms.builders import spec as make_spec

RIGHT, WRONG = {"value": 12.6, "unit": "%"}, {"value": 14.0, "unit": "%"}  # reference 12.5 % ± 0.5


def _score_untouched(trajs, spec) -> Scores:
    """score(), asserting that every trajectory is exactly as it was before."""
    before = copy.deepcopy([t.to_dict() for t in trajs])
    out = score(trajs, {"t": TASK}, spec)
    assert [t.to_dict() for t in trajs] == before
    return out


def test_outcome_rewards_and_correct_judged_by_the_outcome_check():
    failed = traj([turn()], answer=RIGHT)
    failed.mark_failed("env_failure")
    trajs = [traj([turn(), turn(error=True)], answer=RIGHT), traj([turn()], answer=WRONG), traj([turn()]), failed]
    spec = make_spec(reward_kwargs={"correct": 1.0, "incorrect": -0.5, "no_answer": -1.0, "error_turn": -0.1})
    s = _score_untouched(trajs, spec)
    # right with one error turn: 1 − 0.1; wrong: −0.5; no answer: −1; a fault: 0 and not correct
    assert s.reward == pytest.approx([0.9, -0.5, -1.0, 0.0])
    assert s.correct == [True, False, False, False]
    assert s.turn_rewards == [[], [], [], []]


def test_mefr_reward_with_progress_terms():
    rec = {"artifacts": [{"name": "ndvi_s2", "tool": "spectral_index", "parents": ["s2"]}],
           "docs_opened": ["spectral_index"], "skills_opened": []}
    trajs = [traj([turn(), turn(error=True), turn()], answer=RIGHT, record=rec), traj([turn()], answer=WRONG)]
    s = _score_untouched(trajs, make_spec(reward="mefr"))
    # 10 − 0.1·3 − 0.25·1 + 1.0·(1/2 data steps) + 0.25·(1/3 docs) + 0.2·0 skills; −1 − 0.1
    assert s.reward == pytest.approx([10 - 0.3 - 0.25 + 0.5 + 0.25 / 3, -1.1])
    assert s.correct == [True, False]


def test_hirs_manager_reward_and_tiered_specialist_turn_rewards():
    routed = traj([turn(role="manager", subgoal={"family": "PRA", "subgoal": ""}),
                   turn(role="specialist", call=("spectral_index", {"scene": "s2", "index": "NDWI"}), verdict="pass"),
                   turn(role="manager", subgoal={"family": "SPA", "subgoal": ""}),
                   turn(role="specialist", call=("invent_tool", {}), verdict="pass")], answer=RIGHT)
    failed = traj([turn(role="manager"), turn(role="specialist")])
    failed.mark_failed("engine_failure")
    spec = make_spec(reward="hirs_manager", turn_reward="hirs_specialist", estimator="hierarchical")
    s = _score_untouched([routed, failed], spec)
    # specialist k=0: tier 3, 0.5 + 0.2·1 + 0.3·(1/2 argument values); k=1: unknown tool, tier 1 (−1)
    assert s.turn_rewards == [pytest.approx([0.0, 0.85, 0.0, -1.0]), [0.0, 0.0]]
    # manager: 0.5·(2 of 3 routings right) + 1·correct − 0.1·4/25
    assert s.reward == pytest.approx([0.5 * 2 / 3 + 1.0 - 0.016, 0.0])
    assert s.correct == [True, False]


def _two_values(trajectory, task):
    return [1.0, 2.0]


def test_bad_batches_name_the_problem():
    TURN_REWARDS.register("test_scoring_two_values")(_two_values)
    with pytest.raises(ValueError, match="returned 2 values for 1 turns"):
        score([traj([turn()])], {"t": TASK}, make_spec(turn_reward="test_scoring_two_values"))
    with pytest.raises(KeyError, match="task_id 'other' is not among the step's tasks"):
        score([traj([turn()], task_id="other")], {"t": TASK}, make_spec())
    with pytest.raises(KeyError, match="unknown reward 'nope'"):
        score([], {}, make_spec(reward="nope"))


def test_records_written_with_scores_on_the_trajectory_still_read_back():
    t = traj([turn()], answer=RIGHT)
    legacy = {**t.to_dict(), "reward": 1.0, "correct": True, "turn_rewards": []}  # before the scoring stage
    assert Trajectory.from_dict(legacy) == t and "reward" not in t.to_dict()


def test_records_written_before_the_faulted_flag_read_back():
    t = traj([turn()], answer=RIGHT)
    t.mark_failed("env_timeout")
    old = {k if k != "faulted" else "env_failure": v for k, v in t.to_dict().items()}  # the flag's former name
    assert "env_failure" in old and Trajectory.from_dict(old) == t
