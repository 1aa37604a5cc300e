"""GRPO group-normalised advantages.

All four seeds (HiRS-Agent VG-HRL, RS-Claw-Evolution §IV, Earth-Agent-Pro executor
training, SimCRAFT) use GRPO: for the G trajectories sampled for one task,

    Â_i = (R_i − mean(R_group)) / (max(std(R_group), std_floor) + δ)

A group whose rewards are all equal carries no preference and gets 0. The std floor
keeps a near-zero standard deviation (float residue of an almost-uniform group)
from blowing an advantage up into the thousands. Vectorised over groups (scatter sums),
so a 1024-trajectory batch costs microseconds, not a Python loop per group.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch


def group_index(keys: Sequence[Hashable]) -> torch.Tensor:
    """Dense group index (N,) int64 of N hashable keys (first appearance order)."""
    ids: dict[Hashable, int] = {}
    return torch.tensor([ids.setdefault(k, len(ids)) for k in keys], dtype=torch.long)


def group_normalise(values: torch.Tensor, index: torch.Tensor, *, eps: float = 1e-6, std_floor: float = 1e-2,
                    norm_by_std: bool = True) -> torch.Tensor:
    """GRPO normalisation of ``values`` (N,) within the groups given by a dense ``index`` (N,) int64.

    Statistics are computed in float64 (unbiased std); singleton and all-equal groups give 0.

    Returns:
        float32 tensor of shape (N,).
    """
    n = values.numel()
    if n == 0:
        return torch.zeros(0, dtype=torch.float32)
    v = values.to(torch.float64)
    size = int(index.max()) + 1
    count = torch.zeros(size, dtype=torch.float64).index_add_(0, index, torch.ones_like(v))
    mean = torch.zeros(size, dtype=torch.float64).index_add_(0, index, v) / count
    centred = v - mean[index]
    lo = torch.full((size,), float("inf"), dtype=torch.float64).scatter_reduce(0, index, v, "amin")
    hi = torch.full((size,), float("-inf"), dtype=torch.float64).scatter_reduce(0, index, v, "amax")
    informative = (count > 1) & (hi > lo)
    if norm_by_std:
        var = torch.zeros(size, dtype=torch.float64).index_add_(0, index, centred * centred) / (count - 1).clamp(min=1)
        centred = centred / (var.sqrt().clamp(min=std_floor)[index] + eps)
    return torch.where(informative[index], centred, torch.zeros_like(centred)).to(torch.float32)


def grpo_advantages(
    rewards: torch.Tensor,
    group_ids: Sequence[Hashable],
    *,
    eps: float = 1e-6,
    std_floor: float = 1e-2,
    norm_by_std: bool = True,
) -> torch.Tensor:
    """Group-normalised outcome advantages, one scalar per trajectory.

    Args:
        rewards: float tensor of shape (N,), one scalar reward per trajectory.
        group_ids: N hashable keys; trajectories with equal keys form one group
            (the G samples of one task).
        eps: δ added to the denominator.
        std_floor: lower bound on the group's (unbiased) std before division.
        norm_by_std: False gives Dr. GRPO (mean-centred only, no std division).

    Returns:
        float32 tensor of shape (N,). Singleton groups and all-equal groups give 0.

    Raises:
        ValueError: if ``rewards`` is not 1-D, ``len(group_ids) != N`` or a reward is not finite.
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(rewards.shape)}")
    if len(group_ids) != rewards.numel():
        raise ValueError(f"group_ids has {len(group_ids)} keys for {rewards.numel()} rewards")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contain NaN or inf: fix the reward function before computing advantages")
    return group_normalise(rewards, group_index(group_ids), eps=eps, std_floor=std_floor, norm_by_std=norm_by_std)
