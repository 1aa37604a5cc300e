"""The learner on synthetic trajectories: packing (what each loss gets) and updates of the tiny model (no Ray)."""

import pytest
import torch

from earthrl.algorithms.learner import Learner, pack
from earthrl.algorithms.registry import POLICY_LOSSES
from earthrl.models.policy import Policy
from earthrl.rollout.trajectory import Trajectory, Turn
from earthrl.tests.algorithms.builders import learner_config, loss_config


def _trajs():
    a = Trajectory("t", "g", prompt_ids=[1, 2, 3], turns=[Turn([4, 5, 6], [-1.0] * 3, [7, 8], role="manager"),
                                                          Turn([9, 10], [-1.0] * 2, role="specialist")])
    b = Trajectory("t", "g", prompt_ids=[1, 2, 3], turns=[Turn([11, 12, 13, 14], [-1.0] * 4, role="manager")])
    failed = Trajectory("t", "g", prompt_ids=[1, 2, 3], turns=[Turn([15], [-1.0])])
    failed.mark_failed("env_failure")
    return [a, b, failed]


def _advantages(trajs, values):
    """Trajectory advantages broadcast onto each trajectory's response tokens (what the estimators return)."""
    return [v * torch.tensor(t.response_mask(), dtype=torch.float32) for t, v in zip(trajs, values)]


def _learner(tiny_model, ppo_epochs: int, kl_coef: float = 0.0) -> Learner:
    torch.manual_seed(0)
    policy = Policy(str(tiny_model), {"rank": 4, "alpha": 8, "dropout": 0.0}, dtype="float32",
                    gradient_checkpointing=False)
    cfg = learner_config(loss=loss_config(kl_coef=kl_coef), ppo_epochs=ppo_epochs, micro_batch_size=1,
                        grad_clip=100.0, temperature=1.0)
    return Learner(policy, torch.optim.SGD(policy.trainable_parameters(), lr=5.0), POLICY_LOSSES.lookup("ppo_clip_kl"), cfg)


def _update(learner, values, **kw):
    trajs = _trajs()
    return learner.update(pack(trajs, _advantages(trajs, values), learner.cfg), **kw)


def test_pack_builds_only_the_inputs_the_loss_asks_for():
    trajs = _trajs()
    adv = _advantages(trajs, [1.0, -1.0, 5.0])
    plain = pack(trajs, adv, learner_config(micro_batch_size=2))
    assert (plain.num_tokens, plain.num_sequences, len(plain.micro)) == (9, 2, 1)  # the failed one is left out
    assert plain.micro[0].inputs == {} and plain.loss_kwargs == {}
    mb = plain.micro[0]
    assert mb.input_ids.shape == mb.advantages.shape == (2, 10)
    assert mb.advantages[1].tolist() == [0, 0, 0, -1, -1, -1, -1, 0, 0, 0]  # right-padded with 0
    mixed = pack(trajs, adv, learner_config(micro_batch_size=2, loss_inputs=("role_mask",)))
    # manager tokens: a's first turn (3) and b's turn (4) of the 9 response tokens
    assert mixed.loss_kwargs == {"role_num_tokens": (7.0, 2.0)}
    assert mixed.micro[0].inputs["role_mask"][0].tolist() == [0, 0, 0, 1, 1, 1, 0, 0, 0, 0]
    with pytest.raises(ValueError, match=r"loss inputs \['error_mask'\] cannot be built by the local learner"):
        pack(trajs, adv, learner_config(loss_inputs=("error_mask",)))


def test_single_epoch_is_unclipped_policy_gradient_and_skips_faulted_trajectories(tiny_model):
    calls = []
    m = _update(_learner(tiny_model, ppo_epochs=1), [1.0, -1.0, 5.0], before_step=lambda: calls.append(1))
    assert m["clip_frac"] == 0.0 and m["grad_norm"] > 0 and calls == [1]
    # token-mean over the 9 generated tokens of the two kept trajectories (ratio 1): -(5*1 + 4*-1)/9
    assert abs(m["pg_loss"] - (-(5 * 1.0 + 4 * -1.0) / 9)) < 1e-6


def test_second_epoch_is_clipped_against_the_policy_before_the_update(tiny_model):
    one = _update(_learner(tiny_model, ppo_epochs=1), [1.0, -1.0, 0.0])
    two = _update(_learner(tiny_model, ppo_epochs=2), [1.0, -1.0, 0.0])
    assert one["clip_frac"] == 0.0
    assert two["clip_frac"] > 0.0  # after a large step the ratio leaves [0.8, 1.2] on some tokens
    assert two["pg_loss"] < one["pg_loss"]  # the first step lowered the loss on its own batch


def test_kl_is_zero_before_any_update_and_positive_after(tiny_model):
    learner = _learner(tiny_model, ppo_epochs=2, kl_coef=0.1)
    with torch.no_grad():  # a non-identity adapter: the policy differs from the reference
        for name, p in learner.policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    m = _update(learner, [1.0, -1.0, 0.0])
    assert m["kl"] > 0
    fresh = _update(_learner(tiny_model, ppo_epochs=1, kl_coef=0.1), [1.0, -1.0, 0.0])
    assert fresh["kl"] == 0.0


def test_empty_batch_gives_zero_metrics_without_a_step(tiny_model):
    learner = _learner(tiny_model, ppo_epochs=1)
    failed = _trajs()[2:]
    m = learner.update(pack(failed, _advantages(failed, [1.0]), learner.cfg), before_step=lambda: pytest.fail("stepped"))
    assert m == {**dict.fromkeys(("pg_loss", "kl", "clip_frac", "loss", "grad_norm", "is_truncated_frac",
                                  "masked_seq_frac", "logprob_diff"), 0.0), "is_weight_mean": 1.0}
