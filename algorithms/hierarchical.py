"""Step-grouped estimators: HiRS-Agent VG-HRL and Earth-Agent-Pro's node-level GRPO.

- ``hierarchical`` (HiRS-Agent §3, VG-HRL): manager turns (and any non-specialist turn) get the
  GRPO advantage of the manager reward (``Scores.reward``) grouped by task; the k-th specialist
  turn gets the GRPO advantage of its tiered reward (``Scores.turn_rewards``) grouped by
  (task, k) — steps are never mixed. The two levels meet only in the λ-mixed loss
  (:mod:`earthrl.algorithms.mixed_loss`), never in the reward.
- ``executor_node`` (Earth-Agent-Pro executor GRPO): the G candidate calls sampled from one node state
  (``agent=planner_executor`` with ``agent.options.node_candidates`` > 1: ``TurnBatch.turn_node_state``) have
  their per-turn rewards normalised among themselves; every other turn is a workflow node whose per-turn reward
  is normalised within (task, turn index k), the k-th turns of the task's G episodes.
"""

from __future__ import annotations

import torch

from earthrl.algorithms.estimators import (
    ROLES,
    AdvantageConfig,
    TurnBatch,
    keyed_turn_advantages,
    trajectory_advantages,
)
from earthrl.algorithms.registry import ESTIMATORS


@ESTIMATORS.register("hierarchical")
def hierarchical_estimator(batch: TurnBatch, cfg: AdvantageConfig) -> torch.Tensor:
    """VG-HRL advantages: manager by task, specialist by (task, specialist step index). Returns (M,) float32."""
    specialist = batch.turn_role == ROLES["specialist"]
    manager = trajectory_advantages(batch, cfg)[batch.turn_traj]
    steps = keyed_turn_advantages(batch, cfg, specialist, batch.turn_role_pos)
    return torch.where(specialist, steps, manager)


@ESTIMATORS.register("executor_node")
def executor_node_estimator(batch: TurnBatch, cfg: AdvantageConfig) -> torch.Tensor:
    """Earth-Agent-Pro node-level GRPO over per-turn rewards: grouped by node state where a turn has one, else by
    (task, turn index) (module doc). Returns (M,) float32."""
    key = batch.turn_pos
    if batch.turn_node_state is not None:  # a node state's id sits past every turn index: never mixed with them
        key = torch.where(batch.turn_node_state >= 0, batch.turn_pos.max() + 1 + batch.turn_node_state, key)
    return keyed_turn_advantages(batch, cfg, torch.ones_like(batch.turn_error), key)
