import math

import pytest
import torch
from omegaconf import OmegaConf

from earthrl.algorithms.estimators import AdvantageConfig, TurnBatch, token_advantages
from earthrl.algorithms.registry import ESTIMATORS
from earthrl.tests.algorithms.builders import TASK, traj, turn

A = 0.5 / (math.sqrt(0.5) + 1e-6)  # GRPO of rewards {1, 0}: ±0.5 / (std 0.7071 + δ)


def _run(name, trajs, **cfg):
    return ESTIMATORS.lookup(name)(TurnBatch.from_trajectories(trajs), AdvantageConfig(**cfg)).tolist()


def _tap_batch():
    win = traj([turn(), turn(error=True), turn()], reward=1.0)
    lose = traj([turn(error=True), turn()], reward=0.0)
    broken = traj([turn()], reward=50.0, env_failure=True)  # excluded: must not shift the group
    return [win, lose, broken]


def test_error_turn_in_positive_trajectory_is_zero_under_tap_only():
    assert _run("grpo", _tap_batch()) == pytest.approx([A, A, A, -A, -A, 0.0])
    assert _run("grpo_tap", _tap_batch()) == pytest.approx([A, 0.0, A, -A, -A, 0.0])


def test_tap_recovery_protection_is_optional():
    # the E=0 turn right after an error never gets a negative advantage when protected
    assert _run("grpo_tap", _tap_batch(), protect_recovery=True) == pytest.approx([A, 0.0, A, -A, 0.0, 0.0])


def test_all_equal_and_singleton_groups_give_zero():
    trajs = [traj([turn()], reward=0.7), traj([turn()], reward=0.7), traj([turn()], group="solo", reward=3.0)]
    assert _run("grpo", trajs) == [0.0, 0.0, 0.0]


def test_specialist_groups_never_mix_steps():
    def h(manager_r, spec_r, group="g"):
        turns = [turn(role="manager"), turn(role="specialist"), turn(role="manager"), turn(role="specialist")]
        return traj(turns, reward=manager_r, turn_rewards=[0.0, spec_r[0], 0.0, spec_r[1]], group=group)

    trajs = [h(2.0, [1.0, 5.0]), h(0.0, [0.0, 5.0]), h(9.0, [3.0, -4.0], group="other")]
    # manager turns: GRPO of {2, 0} by task; specialist step 0: {1, 0}; step 1: {5, 5} → 0.
    # Mixing steps would give step 1 a non-zero advantage; the singleton task "other" gets 0.
    assert _run("hierarchical", trajs) == pytest.approx([A, A, A, 0.0, -A, -A, -A, 0.0] + [0.0] * 4)


def test_executor_nodes_grouped_by_task_and_turn():
    trajs = [traj([turn(), turn()], turn_rewards=[1.0, -2.0]), traj([turn(), turn()], turn_rewards=[0.0, -2.0]),
             traj([turn()], turn_rewards=[0.5])]
    # node 0: {1, 0, 0.5}: mean .5, std .5 → ±0.5/(0.5+δ), 0; node 1: {-2, -2} → 0
    b = 0.5 / (0.5 + 1e-6)
    assert _run("executor_node", trajs) == pytest.approx([b, 0.0, -b, 0.0, 0.0])


def test_token_advantages_end_to_end_mefr_tap():
    rec = {"artifacts": [], "docs_opened": [], "skills_opened": []}
    good = traj([turn(), turn(error=True), turn(n_obs=0)], answer={"value": 12.5, "unit": "%"}, record=rec)
    bad = traj([turn(), turn(n_obs=0)], answer={"value": 99, "unit": "%"}, record=rec)
    gone = traj([turn(n_obs=0)], env_failure=True)
    cfg = {"estimator": "grpo_tap", "reward": "mefr", "advantage": {"eps": 0.0, "std_floor": 0.01}}
    out = token_advantages([good, bad, gone], {"t": TASK}, cfg)
    # MEFR: 10 − 0.3 − 0.25 = 9.45 and −1 − 0.2 = −1.2; GRPO of two: ±1/√2
    assert good.reward == pytest.approx(9.45) and bad.reward == pytest.approx(-1.2)
    a = 1 / math.sqrt(2)
    # tokens: prompt 2 | resp 2, obs 1 | resp 2 (error), obs 1 | resp 2
    assert out[0].tolist() == pytest.approx([0, 0, a, a, 0, 0, 0, 0, a, a])
    assert out[1].tolist() == pytest.approx([0, 0, -a, -a, 0, -a, -a])
    assert out[2].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert [len(o) for o in out] == [len(t.token_ids()) for t in (good, bad, gone)]
    assert all(o.dtype == torch.float32 for o in out)
    mask = torch.tensor(good.response_mask(), dtype=torch.bool)
    assert torch.all(out[0][~mask] == 0)
    # the Hydra form of the same config gives the same tensors
    again = token_advantages([good, bad, gone], {"t": TASK}, OmegaConf.create(cfg))
    assert all(torch.equal(x, y) for x, y in zip(out, again))


def test_token_advantages_hierarchical_sets_turn_rewards():
    turns = [turn(role="manager", subgoal={"family": "PRA", "subgoal": ""}),
             turn(role="specialist", call=("spectral_index", {"scene": "s2", "index": "NDVI"}), verdict="pass")]
    t1 = traj(turns, answer={"value": 12.5, "unit": "%"})
    t2 = traj([turn(role="manager", subgoal={"family": "SAA", "subgoal": ""}),
               turn(role="specialist", call=("pixel_share", {}), verdict="pass")])
    cfg = {"estimator": "hierarchical", "reward": "hirs_manager", "turn_reward": "hirs_specialist"}
    out = token_advantages([t1, t2], {"t": TASK}, cfg)
    # t2's SAA tool is in the routed family but not the reference's spectral_index: −0.5 + 0.2
    assert t1.turn_rewards == pytest.approx([0.0, 1.0]) and t2.turn_rewards == pytest.approx([0.0, -0.3])
    # manager rewards 0.5 + 1 − 0.1·2/25 and 0 − 0.008 → ±A' on manager tokens; specialist step 0 {1, −0.3} → ±A'
    assert out[0][2:4].tolist() == pytest.approx([A, A]) and out[1][5:7].tolist() == pytest.approx([-A, -A], rel=1e-5)


def test_bad_config_names_the_field():
    with pytest.raises(KeyError, match="unknown advantage estimator 'nope'"):
        token_advantages([], {}, {"estimator": "nope", "reward": "outcome"})
    with pytest.raises(ValueError, match="algorithm.advantage has unknown key"):
        token_advantages([], {}, {"reward": "outcome", "advantage": {"tap": True}})
    t = traj([turn(), turn()], turn_rewards=[1.0])
    with pytest.raises(ValueError, match="turn_rewards"):
        TurnBatch.from_trajectories([t])
