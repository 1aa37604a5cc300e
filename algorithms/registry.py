"""The algorithm registries: advantage estimators and policy losses (name → pure function).

The :class:`~earthrl.envs.registry.Registry` class lives in the lowest layer (``earthrl.envs.registry``)
and is shared by every registry of EarthRL; built-in entries load on first read.
"""

from __future__ import annotations

from earthrl.envs.registry import Registry

__all__ = ["ESTIMATORS", "POLICY_LOSSES", "Registry"]

ESTIMATORS = Registry("advantage estimator", ["earthrl.algorithms.estimators", "earthrl.algorithms.hierarchical",
                                              "earthrl.algorithms.gigpo"])
"""Per-turn advantage estimators ``fn(batch: TurnBatch, cfg: AdvantageConfig) -> Tensor (M,)``."""

POLICY_LOSSES = Registry("policy loss", ["earthrl.algorithms.policy_loss", "earthrl.algorithms.mixed_loss"])
"""Policy losses ``fn(*, logprobs, old_logprobs, advantages, response_mask, ref_logprobs, cfg, batch_num_tokens,
global_batch_size, dp_size, is_weights, **extra) -> (loss, metrics)`` (named arguments only; ``is_weights``:
(B, T) rollout-correction weights on the policy-gradient term, None for none; ``extra``: the loss's inputs
in :data:`earthrl.algorithms.spec.LOSS_INPUTS`, e.g. ``role_mask`` and ``role_num_tokens`` for mixed_role)."""
