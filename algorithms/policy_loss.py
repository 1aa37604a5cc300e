"""PPO-clip policy loss with a KL penalty to the reference policy.

The per-token pieces reuse verl's ``core_algos``: ``kl_penalty`` (k1/k2/k3 estimators,
Schulman 2020) and ``agg_loss`` (token-mean, seq-mean-token-sum, … with a global
token count so that micro-batching does not change the loss). EarthRL adds only the
clipped surrogate and the combination.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import torch
from verl.trainer.ppo.core_algos import agg_loss, kl_penalty

from earthrl.algorithms.registry import POLICY_LOSSES
from earthrl.algorithms.settings import FromMapping


@dataclass(frozen=True, kw_only=True)
class PolicyLossConfig(FromMapping):
    """Hyper-parameters of the PPO-clip + KL loss.

    Every field is required: the defaults live once, in the config schema
    (``earthrl.launch.config_schema.defaults("algorithm.policy_loss", **changes)`` gives them).

    Attributes:
        clip_ratio_low: ε_low of the clipped surrogate (ratio ≥ 1 − ε_low).
        clip_ratio_high: ε_high (ratio ≤ 1 + ε_high; DAPO's clip-higher when > ε_low).
        kl_coef: β, weight of the KL-to-reference term (0 disables it).
        kl_estimator: verl name of the estimator: "k1", "k2", "k3" (= "low_var_kl").
        loss_agg_mode: verl aggregation: "token-mean", "seq-mean-token-sum",
            "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum".
        name: the :data:`~earthrl.algorithms.registry.POLICY_LOSSES` entry the recipe calls
            ("ppo_clip_kl", "mixed_role").
        manager_weight: λ of the mixed loss λ·L_manager + (1−λ)·L_specialist (HiRS-Agent VG-HRL: 0.5);
            unused by "ppo_clip_kl".
    """

    CONFIG_KEY: ClassVar[str] = "algorithm.policy_loss"

    clip_ratio_low: float
    clip_ratio_high: float
    kl_coef: float
    kl_estimator: str
    loss_agg_mode: str
    name: str
    manager_weight: float


def ppo_clip_kl_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    cfg: PolicyLossConfig,
    *,
    batch_num_tokens: int | float | None = None,
    global_batch_size: int | None = None,
    dp_size: int = 1,
    is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate −w·min(ρÂ, clip(ρ, 1−ε_l, 1+ε_h)Â) + β·KL(π‖π_ref), aggregated by verl.

    Args:
        logprobs: (B, T) float, log π_θ of the taken tokens (requires grad).
        old_logprobs: (B, T) float, log π_old of the same tokens (no grad).
        advantages: (B, T) float, per-token advantages (0 where masked).
        response_mask: (B, T) {0,1}, 1 on model-generated tokens only.
        ref_logprobs: (B, T) float log π_ref, or None when ``cfg.kl_coef == 0``.
        cfg: see :class:`PolicyLossConfig`.
        batch_num_tokens: masked tokens in the whole (global) batch, for micro-batching
            under "token-mean"; defaults to this micro-batch's count.
        global_batch_size: sequences in the whole batch for the seq-mean modes.
        dp_size: data-parallel ranks (verl's ``agg_loss`` scales by it so that FSDP's gradient
            averaging gives the global mean); 1 on one process.
        is_weights: (B, T) float, detached rollout-correction weights w ≥ 0 that multiply the per-token
            policy-gradient term only, never the KL term (verl ``compute_policy_loss_vanilla``'s
            ``rollout_is_weights``; :func:`earthrl.algorithms.rollout_correction.rollout_correction`);
            None: w = 1 (the loss is unchanged).

    Returns:
        (loss scalar, metrics dict with pg_loss, kl, clip_frac, ratio_mean). A response
        mask of all zeros gives a loss of exactly 0 (not NaN).

    Raises:
        ValueError: if shapes differ, or ``kl_coef > 0`` without ``ref_logprobs``.
    """
    shape = logprobs.shape
    for name, t in (("old_logprobs", old_logprobs), ("advantages", advantages), ("response_mask", response_mask),
                    ("is_weights", is_weights)):
        if t is not None and t.shape != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)} like logprobs")
    mask = response_mask.to(logprobs.dtype)
    n_tokens = float(mask.sum())
    if n_tokens == 0 and batch_num_tokens is None:
        zero = (logprobs * 0.0).sum()
        return zero, {"pg_loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "ratio_mean": 1.0}
    log_ratio = torch.clamp(logprobs - old_logprobs, -20.0, 20.0)
    ratio = torch.exp(log_ratio)
    surr1 = ratio * advantages
    surr2 = torch.clamp(ratio, 1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high) * advantages
    pg_mat = -torch.minimum(surr1, surr2)
    if is_weights is not None:
        pg_mat = pg_mat * is_weights
    agg = dict(loss_agg_mode=cfg.loss_agg_mode, batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size,
               dp_size=dp_size)
    pg_loss = agg_loss(pg_mat, mask, **agg)
    loss = pg_loss
    kl_value = 0.0
    if cfg.kl_coef > 0:
        if ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs ref_logprobs: compute them with the adapter-free base, or set kl_coef=0")
        kl_mat = kl_penalty(logprobs, ref_logprobs, cfg.kl_estimator)
        kl_loss = agg_loss(kl_mat, mask, **agg)
        loss = loss + cfg.kl_coef * kl_loss
        kl_value = float(kl_loss.detach())
    denom = max(n_tokens, 1.0)
    clipped = ((surr2 < surr1).to(mask.dtype) * mask).sum() / denom
    metrics = {
        "pg_loss": float(pg_loss.detach()),
        "kl": kl_value,
        "clip_frac": float(clipped),
        "ratio_mean": float((ratio.detach() * mask).sum() / denom),
    }
    return loss, metrics


@functools.cache
def kl_gradient_vanishes_at_reference(estimator: str) -> bool:
    """Whether verl's KL estimator ``estimator`` has an exactly zero gradient where π = π_ref (k2/"mse",
    k3/"low_var_kl", "abs" and their straight-through "+" forms: yes; k1/"kl": no, its gradient is 1 per
    token). Probed on verl's own :func:`kl_penalty`, so that a new estimator is judged by what it computes;
    one that cannot run on per-token log-probabilities counts as not vanishing."""
    logprob = torch.tensor([-0.3, -1.7, -4.0], requires_grad=True)
    try:
        kl_penalty(logprob, logprob.detach().clone(), estimator).sum().backward()
    except Exception:  # noqa: BLE001 - e.g. "full" needs the whole distribution
        return False
    return logprob.grad is not None and not bool(logprob.grad.any())


@POLICY_LOSSES.register("ppo_clip_kl")
def ppo_clip_kl(*, logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                response_mask: torch.Tensor, cfg: PolicyLossConfig, ref_logprobs: torch.Tensor | None = None,
                batch_num_tokens: int | float | None = None, global_batch_size: int | None = None,
                dp_size: int = 1, is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Registry form of :func:`ppo_clip_kl_loss` (named arguments only; all seeds' policy loss; no extra
    inputs in :data:`earthrl.algorithms.spec.LOSS_INPUTS`). Shapes (B, T) as in :func:`ppo_clip_kl_loss`;
    returns (loss scalar, metrics).
    """
    return ppo_clip_kl_loss(logprobs, old_logprobs, advantages, response_mask, ref_logprobs, cfg,
                            batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size, dp_size=dp_size,
                            is_weights=is_weights)
