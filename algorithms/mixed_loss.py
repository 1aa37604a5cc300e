"""HiRS-Agent VG-HRL mixed loss: L = λ·L_manager + (1−λ)·L_specialist (λ = 0.5, §3 "VG-HRL").

Manager and specialist turns share one backbone; each level's PPO-clip + KL loss is aggregated
over its own tokens (role masks), then the two are mixed. Both terms reuse
:func:`earthrl.algorithms.policy_loss.ppo_clip_kl_loss` (verl's ``agg_loss`` and ``kl_penalty``).
A level with no tokens in the batch contributes 0, never NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from earthrl.algorithms.broadcast import turn_values_to_tokens
from earthrl.algorithms.policy_loss import PolicyLossConfig, ppo_clip_kl_loss
from earthrl.algorithms.registry import POLICY_LOSSES


def role_token_masks(trajs: Sequence, role: str = "manager") -> list[torch.Tensor]:
    """Per trajectory, a float32 (len(token_ids()),) mask: 1 on response tokens of turns with ``role``."""
    values = torch.tensor([float(turn.role == role) for t in trajs for turn in t.turns], dtype=torch.float32)
    return turn_values_to_tokens(trajs, values)


@POLICY_LOSSES.register("mixed_role")
def mixed_role_loss(*, logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                    response_mask: torch.Tensor, cfg: PolicyLossConfig, role_mask: torch.Tensor | None = None,
                    ref_logprobs: torch.Tensor | None = None, batch_num_tokens: int | float | None = None,
                    global_batch_size: int | None = None,
                    role_num_tokens: tuple[float, float] | None = None,
                    dp_size: int = 1, is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """λ-mixed PPO-clip + KL loss over manager and specialist tokens (HiRS-Agent VG-HRL).

    Args:
        logprobs, old_logprobs, advantages, response_mask, ref_logprobs: (B, T) as in
            :func:`~earthrl.algorithms.policy_loss.ppo_clip_kl_loss`.
        cfg: :class:`PolicyLossConfig`; ``cfg.manager_weight`` is λ.
        role_mask: (B, T) {0,1}, 1 on manager tokens (:func:`role_token_masks`); the other
            response tokens are the specialist's.
        batch_num_tokens: unused (each level has its own count, see ``role_num_tokens``).
        global_batch_size: sequences in the whole batch, for the seq-mean modes.
        role_num_tokens: (manager, specialist) masked tokens in the whole batch, for
            micro-batching under "token-mean"; default: this micro-batch's counts.
        dp_size: data-parallel ranks, passed to verl's ``agg_loss``.
        is_weights: (B, T) rollout-correction weights on both levels' policy-gradient terms, or None
            (see :func:`~earthrl.algorithms.policy_loss.ppo_clip_kl_loss`).

    Returns:
        (loss, metrics): metrics are ``manager/*`` and ``specialist/*`` of each level and the
        λ-mixed ``pg_loss``, ``kl``, ``clip_frac``.

    Raises:
        ValueError: ``role_mask`` is missing or not shaped like ``response_mask``.
    """
    if role_mask is None or role_mask.shape != response_mask.shape:
        got = None if role_mask is None else tuple(role_mask.shape)
        raise ValueError(f"mixed_role loss needs role_mask of shape {tuple(response_mask.shape)} (1 on manager "
                         f"tokens, from role_token_masks), got {got}")
    lam = float(cfg.manager_weight)
    resp = response_mask.to(logprobs.dtype)
    manager = resp * role_mask.to(logprobs.dtype)
    counts = role_num_tokens or (None, None)
    loss = (logprobs * 0.0).sum()
    metrics: dict[str, float] = {"pg_loss": 0.0, "kl": 0.0, "clip_frac": 0.0}
    for name, mask, weight, n in (("manager", manager, lam, counts[0]), ("specialist", resp - manager, 1.0 - lam, counts[1])):
        part, m = ppo_clip_kl_loss(logprobs, old_logprobs, advantages, mask, ref_logprobs, cfg,
                                   batch_num_tokens=n or None, global_batch_size=global_batch_size,
                                   dp_size=dp_size, is_weights=is_weights)
        loss = loss + weight * part
        for k in ("pg_loss", "kl", "clip_frac"):
            metrics[f"{name}/{k}"] = m[k]
            metrics[k] += weight * m[k]
    return loss, metrics
