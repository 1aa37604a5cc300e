"""Trajectory reward functions by name (``algorithm.reward`` / ``algorithm.turn_reward`` in Hydra).

Two registries:

- :data:`REWARDS`: scalar rewards ``fn(trajectory, task: dict, **kwargs) -> float``
  (outcome, MEFR, HiRS manager).
- :data:`TURN_REWARDS`: per-turn rewards ``fn(trajectory, task: dict, **kwargs) -> list[float]``
  aligned with ``trajectory.turns`` (HiRS specialist tiered, Earth-Agent-Pro executor tiered).

Both refuse a second, different function under a taken name (ValueError).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from earthrl.algorithms.registry import Registry
from earthrl.rewards.outcome import answer_correct

RewardFn = Callable[..., float]
TurnRewardFn = Callable[..., list]
_BUILTINS = ("earthrl.rewards.mefr", "earthrl.rewards.hirs", "earthrl.rewards.executor")
REWARDS = Registry("reward", _BUILTINS)
TURN_REWARDS = Registry("turn reward", _BUILTINS)


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator registering a scalar reward under ``name``; a second, different function under the same name raises ValueError."""
    return REWARDS.register(name)


def register_turn_reward(name: str) -> Callable[[TurnRewardFn], TurnRewardFn]:
    """Decorator registering a per-turn reward under ``name``; a second, different function under the same name raises ValueError."""
    return TURN_REWARDS.register(name)


def get_reward(name: str) -> RewardFn:
    """Look a scalar reward up by registered name, or import a user's ``"package.module:function"``.

    A user reward has the signature ``fn(trajectory, task: dict, **reward_kwargs) -> float`` and
    should set ``trajectory.correct`` if it judges the answer.

    Raises:
        KeyError: unknown name (lists the registered ones) or an import path that does not resolve.
    """
    return REWARDS.lookup(name)


def get_turn_reward(name: str) -> TurnRewardFn:
    """Look a per-turn reward up by name (or ``"module:function"``); see :func:`get_reward`.

    Raises:
        KeyError: as :func:`get_reward`.
    """
    return TURN_REWARDS.lookup(name)


def score_trajectories(trajs: Sequence, tasks_by_id: Mapping[str, dict], *, reward: str,
                       reward_kwargs: Mapping | None = None, turn_reward: str | None = None,
                       turn_reward_kwargs: Mapping | None = None) -> None:
    """Set ``trajectory.reward`` (and ``trajectory.turn_rewards``) on every trajectory in place.

    ``env_failure`` trajectories get reward 0 and one 0.0 per turn: the environment failed,
    not the agent (DESIGN §4), and the estimators exclude them.

    Raises:
        KeyError: unknown reward name or a trajectory whose ``task_id`` is not in ``tasks_by_id``.
        ValueError: a turn reward returned a list whose length differs from the number of turns.
    """
    reward_fn = get_reward(reward)
    turn_fn = get_turn_reward(turn_reward) if turn_reward else None
    kw, tkw = dict(reward_kwargs or {}), dict(turn_reward_kwargs or {})
    for t in trajs:
        if t.env_failure:
            t.reward, t.turn_rewards = 0.0, [0.0] * len(t.turns)
            continue
        if t.task_id not in tasks_by_id:
            raise KeyError(f"trajectory task_id {t.task_id!r} is not in tasks_by_id; pass the step's tasks")
        task = tasks_by_id[t.task_id]
        t.reward = float(reward_fn(t, task, **kw))
        if turn_fn is not None:
            values = [float(v) for v in turn_fn(t, task, **tkw)]
            if len(values) != len(t.turns):
                raise ValueError(f"turn reward {turn_reward!r} returned {len(values)} values for {len(t.turns)} turns")
            t.turn_rewards = values


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
