"""Trajectory reward functions by name (``algorithm.reward`` in the Hydra config)."""

from __future__ import annotations

from collections.abc import Callable

from earthrl.rewards.outcome import answer_correct

RewardFn = Callable[..., float]
REWARDS: dict[str, RewardFn] = {}


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator registering a reward under ``name``; a second, different function under the same name raises ValueError."""

    def deco(fn: RewardFn) -> RewardFn:
        if name in REWARDS and REWARDS[name] is not fn:
            raise ValueError(f"reward {name!r} is already registered by {REWARDS[name].__module__}")
        REWARDS[name] = fn
        return fn

    return deco


def get_reward(name: str) -> RewardFn:
    """Look a reward up by registered name, or import a user's ``"package.module:function"``.

    A user reward has the signature ``fn(trajectory, task: dict, **reward_kwargs) -> float`` and
    should set ``trajectory.correct`` if it judges the answer.

    Raises:
        KeyError: unknown name (lists the registered ones) or an import path that does not resolve.
    """
    if name in REWARDS:
        return REWARDS[name]
    if ":" in name:
        import importlib

        module, _, attr = name.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise KeyError(f"reward {name!r} cannot be imported ({exc}); check the module is on PYTHONPATH") from None
    raise KeyError(f"unknown reward {name!r}; choose one of: {', '.join(sorted(REWARDS))}, or give module:function")


@register_reward("outcome")
def outcome_reward(trajectory, task: dict, *, correct: float = 1.0, incorrect: float = 0.0,
                   no_answer: float = 0.0, error_turn: float = 0.0) -> float:
    """Outcome reward of all seeds' GRPO baselines: ``correct`` if the answer matches, else
    ``incorrect`` (``no_answer`` when the agent never answered), plus ``error_turn`` per turn
    with E = 1 (0 by default; RS-Claw-Evolution's μ is the MEFR variant of this term).

    Args:
        trajectory: :class:`earthrl.rollout.trajectory.Trajectory` (its ``correct`` field is set here).
        task: the TaskSpec as a dict.
    """
    trajectory.correct = answer_correct(trajectory.answer, task["answer"])
    base = correct if trajectory.correct else (incorrect if trajectory.answer else no_answer)
    return base + error_turn * trajectory.num_error_turns
