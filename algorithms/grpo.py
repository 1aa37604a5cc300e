"""GRPO group-normalised advantages.

All four seeds (HiRS-Agent VG-HRL, RS-Claw-Evolution §IV, Earth-Agent-Pro executor
training, SimCRAFT) use GRPO: for the G trajectories sampled for one task,

    Â_i = (R_i − mean(R_group)) / (max(std(R_group), std_floor) + δ)

A group whose rewards are all equal carries no preference and gets 0. The std floor
keeps a near-zero standard deviation (float residue of an almost-uniform group)
from blowing an advantage up into the thousands.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch


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
            (the G samples of one task; HiRS uses (task, step) keys for specialists).
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
    advantages = torch.zeros_like(rewards)
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(group_ids):
        members.setdefault(key, []).append(i)
    for idx in members.values():
        if len(idx) < 2:
            continue
        r = rewards[idx]
        centred = r - r.mean()
        if torch.all(r == r[0]):
            continue
        if norm_by_std:
            centred = centred / (torch.clamp(r.std(unbiased=True), min=std_floor) + eps)
        advantages[idx] = centred
    return advantages
