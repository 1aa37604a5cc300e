"""Zero-variance group filtering on the outcome (DAPO dynamic sampling).

A GRPO group whose G samples are all correct or all wrong carries no outcome signal: its
outcome advantages are all zero. DAPO (Yu et al. 2025, §3.2 "Dynamic Sampling") drops such
groups and samples fresh ones until the batch is full or a cap is reached. The decision is taken
on the **outcome** (``Scores.correct``), never on the shaped reward: a shaped reward such as MEFR
differs between all-wrong samples and would let all-fail groups through with "phantom"
gradients that teach format, not answers (verl-recipe PR #125).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GroupVerdicts:
    """Which groups of a rollout batch to keep.

    Attributes:
        keep: indices of the trajectories whose group has mixed outcomes, in batch order.
        kept_groups: group keys kept, in first-seen order.
        all_correct: group keys dropped because every sample was correct.
        all_wrong: group keys dropped because every sample was wrong (or faulted).
    """

    keep: list[int]
    kept_groups: list[str]
    all_correct: list[str]
    all_wrong: list[str]


def outcome_groups(groups: Sequence[str], correct: Sequence[bool]) -> GroupVerdicts:
    """Split a batch by the outcome variance of each GRPO group.

    Args:
        groups: N group keys (``Trajectory.group``: the G samples of one task in one step).
        correct: N outcome verdicts (``Scores.correct``; a faulted trajectory counts as wrong).

    Returns:
        :class:`GroupVerdicts`.

    Raises:
        ValueError: ``groups`` and ``correct`` differ in length.
    """
    if len(groups) != len(correct):
        raise ValueError(f"{len(groups)} group keys for {len(correct)} outcomes")
    by_group: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        by_group.setdefault(g, []).append(i)
    keep, kept, all_correct, all_wrong = [], [], [], []
    for g, idx in by_group.items():
        n_ok = sum(bool(correct[i]) for i in idx)
        if n_ok == len(idx):
            all_correct.append(g)
        elif n_ok == 0:
            all_wrong.append(g)
        else:
            kept.append(g)
            keep.extend(idx)
    return GroupVerdicts(sorted(keep), kept, all_correct, all_wrong)
