import math

import pytest
import torch

from earthrl.algorithms.estimators import AdvantageConfig, TurnBatch, token_advantages
from earthrl.algorithms.registry import ESTIMATORS
from earthrl.algorithms.spec import AlgorithmSpec
from earthrl.launch.config_schema import defaults
from earthrl.rewards.scoring import score
from earthrl.tests.algorithms.builders import TASK, advantage_config, scores, traj, turn
from earthrl.tests.algorithms.builders import spec as make_spec

A = 0.5 / (math.sqrt(0.5) + 1e-6)  # GRPO of rewards {1, 0}: ±0.5 / (std 0.7071 + δ)


def _run(name, trajs, s, **cfg):
    return ESTIMATORS.lookup(name)(TurnBatch.from_trajectories(trajs, s), advantage_config(**cfg)).tolist()


def _tap_batch():
    win = traj([turn(), turn(error=True), turn()])
    lose = traj([turn(error=True), turn()])
    broken = traj([turn()], faulted=True)  # excluded: its reward must not shift the group
    return [win, lose, broken], scores([1.0, 0.0, 50.0])


def test_error_turn_in_positive_trajectory_is_zero_under_tap_only():
    assert _run("grpo", *_tap_batch()) == pytest.approx([A, A, A, -A, -A, 0.0])
    assert _run("grpo_tap", *_tap_batch()) == pytest.approx([A, 0.0, A, -A, -A, 0.0])


def test_tap_recovery_protection_is_optional():
    # the E=0 turn right after an error never gets a negative advantage when protected
    assert _run("grpo_tap", *_tap_batch(), protect_recovery=True) == pytest.approx([A, 0.0, A, -A, 0.0, 0.0])


def test_all_equal_and_singleton_groups_give_zero():
    trajs = [traj([turn()]), traj([turn()]), traj([turn()], group="solo")]
    assert _run("grpo", trajs, scores([0.7, 0.7, 3.0])) == [0.0, 0.0, 0.0]


def test_specialist_groups_never_mix_steps():
    turns = lambda: [turn(role="manager"), turn(role="specialist"), turn(role="manager"), turn(role="specialist")]  # noqa: E731
    trajs = [traj(turns()), traj(turns()), traj(turns(), group="other")]
    s = scores([2.0, 0.0, 9.0], [[0.0, 1.0, 0.0, 5.0], [0.0, 0.0, 0.0, 5.0], [0.0, 3.0, 0.0, -4.0]])
    # manager turns: GRPO of {2, 0} by task; specialist step 0: {1, 0}; step 1: {5, 5} → 0.
    # Mixing steps would give step 1 a non-zero advantage; the singleton task "other" gets 0.
    assert _run("hierarchical", trajs, s) == pytest.approx([A, A, A, 0.0, -A, -A, -A, 0.0] + [0.0] * 4)


def test_executor_nodes_grouped_by_task_and_turn():
    trajs = [traj([turn(), turn()]), traj([turn(), turn()]), traj([turn()])]
    s = scores([0.0, 0.0, 0.0], [[1.0, -2.0], [0.0, -2.0], [0.5]])
    # node 0: {1, 0, 0.5}: mean .5, std .5 → ±0.5/(0.5+δ), 0; node 1: {-2, -2} → 0
    b = 0.5 / (0.5 + 1e-6)
    assert _run("executor_node", trajs, s) == pytest.approx([b, 0.0, -b, 0.0, 0.0])


def test_token_advantages_end_to_end_mefr_tap():
    rec = {"artifacts": [], "docs_opened": [], "skills_opened": []}
    good = traj([turn(), turn(error=True), turn(n_obs=0)], answer={"value": 12.5, "unit": "%"}, record=rec)
    bad = traj([turn(), turn(n_obs=0)], answer={"value": 99, "unit": "%"}, record=rec)
    gone = traj([turn(n_obs=0)], faulted=True)
    spec = make_spec(estimator="grpo_tap", reward="mefr")
    trajs = [good, bad, gone]
    s = score(trajs, {"t": TASK}, spec)
    out = token_advantages(trajs, s, spec)
    # MEFR: 10 − 0.3 − 0.25 = 9.45 and −1 − 0.2 = −1.2; GRPO of two: ±5.325 / (std 10.65/√2 + δ 1e-6)
    assert s.reward == pytest.approx([9.45, -1.2, 0.0]) and s.correct == [True, False, False]
    a = 5.325 / (10.65 / math.sqrt(2) + 1e-6)
    # tokens: prompt 2 | resp 2, obs 1 | resp 2 (error), obs 1 | resp 2
    assert out[0].tolist() == pytest.approx([0, 0, a, a, 0, 0, 0, 0, a, a])
    assert out[1].tolist() == pytest.approx([0, 0, -a, -a, 0, -a, -a])
    assert out[2].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert [len(o) for o in out] == [len(t.token_ids()) for t in trajs]
    assert all(o.dtype == torch.float32 for o in out)
    mask = torch.tensor(good.response_mask(), dtype=torch.bool)
    assert torch.all(out[0][~mask] == 0)


def test_token_advantages_hierarchical_from_scored_turns():
    turns = [turn(role="manager", subgoal={"family": "PRA", "subgoal": ""}),
             turn(role="specialist", call=("spectral_index", {"scene": "s2", "index": "NDVI"}), verdict="pass")]
    t1 = traj(turns, answer={"value": 12.5, "unit": "%"})
    t2 = traj([turn(role="manager", subgoal={"family": "SAA", "subgoal": ""}),
               turn(role="specialist", call=("pixel_share", {}), verdict="pass")])
    spec = make_spec(estimator="hierarchical", reward="hirs_manager", turn_reward="hirs_specialist")
    s = score([t1, t2], {"t": TASK}, spec)
    out = token_advantages([t1, t2], s, spec)
    # t2's SAA tool is in the routed family but not the reference's spectral_index: −0.5 + 0.2
    assert s.turn_rewards[0] == pytest.approx([0.0, 1.0]) and s.turn_rewards[1] == pytest.approx([0.0, -0.3])
    # manager rewards 0.5 + 1 − 0.1·2/25 and 0 − 0.008 → ±A' on manager tokens; specialist step 0 {1, −0.3} → ±A'
    assert out[0][2:4].tolist() == pytest.approx([A, A]) and out[1][5:7].tolist() == pytest.approx([-A, -A], rel=1e-5)


def test_bad_input_names_the_problem():
    with pytest.raises(KeyError, match="unknown advantage estimator 'nope'"):
        token_advantages([], scores([]), make_spec(estimator="nope"))
    with pytest.raises(ValueError, match=r"algorithm.advantage has unknown key\(s\) \['tap'\]"):
        AlgorithmSpec.from_config({**defaults("algorithm", name="t"), "advantage": {"tap": True}})
    with pytest.raises(ValueError, match=r"algorithm.advantage is missing \['gamma', 'norm_by_std', 'protect_recovery', 'step_weight'\]"):
        AdvantageConfig.from_mapping({"eps": 1e-6, "std_floor": 0.01})  # no defaults of its own: the schema's
    t = traj([turn(), turn()])
    with pytest.raises(ValueError, match="1 turn_rewards for 2 turns"):
        TurnBatch.from_trajectories([t], scores([0.0], [[1.0]]))
    with pytest.raises(ValueError, match="scores are for 2 trajectories, the batch has 1"):
        TurnBatch.from_trajectories([t], scores([0.0, 1.0]))
    with pytest.raises(ValueError, match="NaN or inf"):
        token_advantages([t, t], scores([float("nan"), 0.0]), make_spec())
