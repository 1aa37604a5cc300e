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
    """Look a reward up; unknown names raise KeyError listing the registered ones."""
    if name not in REWARDS:
        raise KeyError(f"unknown reward {name!r}; choose one of: {', '.join(sorted(REWARDS))}")
    return REWARDS[name]


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
