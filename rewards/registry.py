"""Reward functions by name (``algorithm.reward`` / ``algorithm.turn_reward`` in Hydra).

Two registries (the one :class:`~earthrl.envs.registry.Registry` class; built-ins load on first read):

- :data:`REWARDS`: trajectory rewards ``fn(trajectory, task: dict, **kwargs) -> float``
  (outcome, MEFR, HiRS manager).
- :data:`TURN_REWARDS`: per-turn rewards ``fn(trajectory, task: dict, **kwargs) -> list[float]``
  aligned with ``trajectory.turns`` (HiRS specialist tiered, Earth-Agent-Pro executor tiered).

Every reward is a pure function: it returns numbers and sets nothing on the trajectory;
:func:`earthrl.rewards.scoring.score` collects them. Both registries refuse a second, different
function under a taken name (ValueError); ``"package.module:function"`` names a user's reward.
"""

from __future__ import annotations

from earthrl.envs.registry import Registry

_BUILTINS = ("earthrl.rewards.outcome", "earthrl.rewards.mefr", "earthrl.rewards.hirs", "earthrl.rewards.executor")
REWARDS = Registry("reward", _BUILTINS)
"""Trajectory rewards ``fn(trajectory, task, **reward_kwargs) -> float``."""
TURN_REWARDS = Registry("turn reward", _BUILTINS)
"""Per-turn rewards ``fn(trajectory, task, **turn_reward_kwargs) -> list[float]`` (one per turn)."""
