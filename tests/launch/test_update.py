"""The learner update of the local recipe on synthetic trajectories (tiny model, no Ray)."""

import torch
from omegaconf import OmegaConf

from earthrl.launch.train import LocalGRPORecipe
from earthrl.models.policy import Policy
from earthrl.rollout.trajectory import Trajectory, Turn


def _recipe(tiny_model, ppo_epochs: int, kl_coef: float = 0.0) -> LocalGRPORecipe:
    cfg = OmegaConf.create({"algorithm": {
        "ppo_epochs": ppo_epochs, "micro_batch_size": 1, "grad_clip": 100.0, "sampling": {"temperature": 1.0},
        "policy_loss": {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "kl_coef": kl_coef,
                        "kl_estimator": "low_var_kl", "loss_agg_mode": "token-mean"}}})
    recipe = LocalGRPORecipe(cfg)
    torch.manual_seed(0)
    recipe.policy = Policy(str(tiny_model), {"rank": 4, "alpha": 8, "dropout": 0.0}, dtype="float32",
                           gradient_checkpointing=False)
    recipe.optimizer = torch.optim.SGD(recipe.policy.trainable_parameters(), lr=5.0)
    return recipe


def _advantages(trajs, values):
    """Trajectory advantages broadcast onto each trajectory's response tokens (what the estimators return)."""
    return [v * torch.tensor(t.response_mask(), dtype=torch.float32) for t, v in zip(trajs, values)]


def _update(recipe, values):
    trajs = _trajs()
    return recipe.update(trajs, _advantages(trajs, values))


def _trajs():
    a = Trajectory("t", "g", prompt_ids=[1, 2, 3], turns=[Turn([4, 5, 6], [-1.0] * 3, [7, 8]), Turn([9, 10], [-1.0] * 2)])
    b = Trajectory("t", "g", prompt_ids=[1, 2, 3], turns=[Turn([11, 12, 13, 14], [-1.0] * 4)])
    failed = Trajectory("t", "g", prompt_ids=[1, 2, 3], turns=[Turn([15], [-1.0])], env_failure=True)
    return [a, b, failed]


def test_single_epoch_is_unclipped_policy_gradient_and_skips_env_failures(tiny_model):
    recipe = _recipe(tiny_model, ppo_epochs=1)
    m = _update(recipe, [1.0, -1.0, 5.0])
    assert m["clip_frac"] == 0.0 and m["grad_norm"] > 0
    # token-mean over the 9 generated tokens of the two kept trajectories (ratio 1): -(5*1 + 4*-1)/9
    assert abs(m["pg_loss"] - (-(5 * 1.0 + 4 * -1.0) / 9)) < 1e-6


def test_second_epoch_is_clipped_against_the_policy_before_the_update(tiny_model):
    one = _update(_recipe(tiny_model, ppo_epochs=1), [1.0, -1.0, 0.0])
    two = _update(_recipe(tiny_model, ppo_epochs=2), [1.0, -1.0, 0.0])
    assert one["clip_frac"] == 0.0
    assert two["clip_frac"] > 0.0  # after a large step the ratio leaves [0.8, 1.2] on some tokens
    assert two["pg_loss"] < one["pg_loss"]  # the first step improved the surrogate


def test_kl_is_zero_before_any_update_and_positive_after(tiny_model):
    recipe = _recipe(tiny_model, ppo_epochs=2, kl_coef=0.1)
    with torch.no_grad():  # a non-identity adapter: the policy differs from the reference
        for name, p in recipe.policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    m = _update(recipe, [1.0, -1.0, 0.0])
    assert m["kl"] > 0
    fresh = _update(_recipe(tiny_model, ppo_epochs=1, kl_coef=0.1), [1.0, -1.0, 0.0])
    assert fresh["kl"] == 0.0
