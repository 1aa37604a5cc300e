import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY, compute_policy_loss_vanilla

import earthrl.algorithms.verl_plugin as plugin
from earthrl.launch.config_schema import defaults

A = 0.5 / (math.sqrt(0.5) + 1e-6)
NAMES = {"earthrl_grpo", "earthrl_grpo_tap", "earthrl_hierarchical", "earthrl_executor_node", "earthrl_gigpo",
         "earthrl_ppo_clip_kl", "earthrl_mixed_role"}
UID = np.array(["q", "q"], dtype=object)
ALGORITHM = OmegaConf.create({plugin.ADVANTAGE_KEY: defaults("algorithm.advantage")})
"""verl's ``algorithm`` config as EarthRL's verl config writes it, with the schema's advantage settings."""


@pytest.fixture
def run_loss(monkeypatch):
    """The run's ``algorithm.policy_loss`` (the schema's) in the variable every verl worker reads."""
    monkeypatch.setenv(plugin.POLICY_LOSS_ENV, json.dumps(defaults("algorithm.policy_loss")))


def _close(t, expected):
    torch.testing.assert_close(t, torch.tensor(expected, dtype=torch.float32))


def test_all_names_registered_in_verl_and_idempotent():
    assert set(plugin.REGISTERED) == NAMES
    assert NAMES <= set(ADV_ESTIMATOR_REGISTRY) | set(POLICY_LOSS_REGISTRY)
    assert set(plugin.register_all()) == NAMES  # a second import/registration is a no-op


def test_verl_grpo_and_tap_from_padded_tensors():
    # row 0: turns [0,1] and [3,4] (obs at 2), reward 1 at the last token; row 1: one turn, reward 0
    rewards = torch.tensor([[0, 0, 0, 0, 1.0], [0, 0, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 0, 1, 1], [1, 1, 1, 0, 0]])
    adv, ret = ADV_ESTIMATOR_REGISTRY["earthrl_grpo"](token_level_rewards=rewards, response_mask=mask, index=UID,
                                                     config=ALGORITHM)
    _close(adv, [[A, A, 0, A, A], [-A, -A, -A, 0, 0]])
    assert torch.equal(adv, ret)
    err = torch.tensor([[1, 1, 0, 0, 0], [0, 0, 0, 0, 0]])  # the first turn of row 0 had E = 1
    adv, _ = ADV_ESTIMATOR_REGISTRY["earthrl_grpo_tap"](token_level_rewards=rewards, response_mask=mask, index=UID,
                                                        error_mask=err, config=ALGORITHM)
    _close(adv, [[0, 0, 0, A, A], [-A, -A, -A, 0, 0]])
    with pytest.raises(ValueError, match="error_mask"):
        ADV_ESTIMATOR_REGISTRY["earthrl_grpo_tap"](token_level_rewards=rewards, response_mask=mask, index=UID,
                                                   config=ALGORITHM)
    with pytest.raises(ValueError, match="algorithm.earthrl_advantage is not set"):  # never settings of its own
        ADV_ESTIMATOR_REGISTRY["earthrl_grpo"](token_level_rewards=rewards, response_mask=mask, index=UID)


def test_verl_hierarchical_and_executor_node_turn_rewards():
    # each row: manager turn (cols 0-1), specialist turn (col 3); per-turn rewards on the last token
    mask = torch.tensor([[1, 1, 0, 1], [1, 1, 0, 1]])
    role = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0]])
    rewards = torch.tensor([[0, 2.0, 0, 1.0], [0, 0.0, 0, 0.0]])
    adv, _ = ADV_ESTIMATOR_REGISTRY["earthrl_hierarchical"](token_level_rewards=rewards, response_mask=mask,
                                                            index=UID, role_mask=role, config=ALGORITHM)
    # manager rewards {2, 0}; specialist step 0 {1, 0}
    _close(adv, [[A, A, 0, A], [-A, -A, 0, -A]])
    rewards = torch.tensor([[0, 1.0, 0, -2.0], [0, 0.0, 0, -2.0]])
    adv, _ = ADV_ESTIMATOR_REGISTRY["earthrl_executor_node"](token_level_rewards=rewards, response_mask=mask, index=UID,
                                                             config=ALGORITHM)
    _close(adv, [[A, A, 0, 0], [-A, -A, 0, 0]])  # node 1 {-2, -2} → 0


def test_verl_gigpo_from_per_token_anchor_ids_equals_the_local_estimator():
    # row 0: turns [0,1] (anchor 0) and [3,4] (anchor 1), outcome 1 on the last token; row 1: one turn (anchor 0)
    rewards = torch.tensor([[0, 0, 0, 0, 1.0], [0, 0, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 0, 1, 1], [1, 1, 1, 0, 0]])
    anchors = torch.tensor([[0, 0, -1, 1, 1], [0, 0, 0, -1, -1]])
    est = ADV_ESTIMATOR_REGISTRY["earthrl_gigpo"]
    adv, _ = est(token_level_rewards=rewards, response_mask=mask, index=UID, anchor_ids=anchors,
                 config=OmegaConf.create({plugin.ADVANTAGE_KEY: {**defaults("algorithm.advantage"), "gamma": 0.5,
                                                                     "norm_by_std": False}}))
    # episode ±.5; step returns: row 0 (.5, 1), row 1 (0); group of anchor 0 {.5, 0} → ±.25, anchor 1 alone → 0
    # (the same trajectories as tests/algorithms/test_gigpo.py::test_token_advantages_with_the_gigpo_config)
    _close(adv, [[.75, .75, 0, .5, .5], [-.75, -.75, -.75, 0, 0]])
    with pytest.raises(ValueError, match="anchor_ids"):
        est(token_level_rewards=rewards, response_mask=mask, index=UID, config=ALGORITHM)


def test_verl_loss_matches_verl_vanilla_where_dual_clip_is_inactive(run_loss):
    torch.manual_seed(0)
    lp = torch.randn(3, 6)
    old = lp + 0.3 * torch.randn(3, 6)
    adv = torch.randn(3, 6)
    mask = (torch.rand(3, 6) > 0.3)
    cfg = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 100.0,
                            "global_batch_info": {}})
    weights = 2.0 * torch.rand(3, 6)  # verl's rollout_is_weights: they reach our loss as is_weights
    for mode in ("token-mean", "seq-mean-token-mean"):
        for w in (None, weights):
            ours, m = POLICY_LOSS_REGISTRY["earthrl_ppo_clip_kl"](old_log_prob=old, log_prob=lp, advantages=adv,
                                                                  response_mask=mask, loss_agg_mode=mode, config=cfg,
                                                                  rollout_is_weights=w)
            ref, rm = compute_policy_loss_vanilla(old, lp, adv, mask, loss_agg_mode=mode, config=cfg,
                                                  rollout_is_weights=w)
            assert ours.item() == pytest.approx(ref.item(), rel=1e-5)
            assert m["actor/pg_clipfrac"] == pytest.approx(rm["actor/pg_clipfrac"], rel=1e-5)
        assert ours.item() != pytest.approx(POLICY_LOSS_REGISTRY["earthrl_ppo_clip_kl"](
            old_log_prob=old, log_prob=lp, advantages=adv, response_mask=mask, loss_agg_mode=mode, config=cfg)[0].item())
    with pytest.raises(ValueError, match="role_mask"):
        POLICY_LOSS_REGISTRY["earthrl_mixed_role"](old_log_prob=old, log_prob=lp, advantages=adv, response_mask=mask,
                                                   loss_agg_mode="token-mean", config=cfg)


def test_verl_loss_without_the_runs_settings_is_refused(monkeypatch):
    monkeypatch.delenv(plugin.POLICY_LOSS_ENV, raising=False)
    one = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="EARTHRL_POLICY_LOSS is not set"):
        POLICY_LOSS_REGISTRY["earthrl_ppo_clip_kl"](old_log_prob=one, log_prob=one, advantages=one,
                                                    response_mask=torch.ones(1, 2), config=None)


@pytest.mark.slow  # a fresh interpreter importing verl: ~13 s on 2 shared cores
def test_verl_does_not_see_them_without_the_variable():
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
    code = ("from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as R; "
            "print(any(k.startswith('earthrl_') for k in R))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stderr[-2000:]


def test_registered_inside_a_ray_worker_through_verl_use_external_modules():
    import ray  # a base dependency: never skipped
    t0 = time.perf_counter()
    ray.init(num_cpus=1, include_dashboard=False, configure_logging=False, log_to_driver=False,
             runtime_env={"env_vars": {"VERL_USE_EXTERNAL_MODULES": "earthrl.algorithms.verl_plugin"}})
    try:
        @ray.remote
        def names():
            import verl  # noqa: F401  (verl/__init__ imports VERL_USE_EXTERNAL_MODULES)
            from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY

            return os.getpid(), sorted(k for k in [*ADV_ESTIMATOR_REGISTRY, *POLICY_LOSS_REGISTRY] if k.startswith("earthrl_"))

        pid, seen = ray.get(names.remote(), timeout=300)
    finally:
        ray.shutdown()
    assert pid != os.getpid()
    assert set(seen) == NAMES
    print(f"ray worker check: {time.perf_counter() - t0:.1f} s")
