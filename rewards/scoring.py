"""The scoring stage of a training step: trajectories → :class:`Scores` (numbers only).

:func:`score` runs the recipe's trajectory reward and, when it has one, its turn reward
(registries :data:`~earthrl.rewards.registry.REWARDS` / :data:`~earthrl.rewards.registry.TURN_REWARDS`)
on every trajectory, and judges correctness once with the outcome check
(:func:`earthrl.rewards.outcome.answer_correct`). Nothing is written on the trajectories: the
advantage estimators, the step metrics, ``rollouts.jsonl`` and the held-out report read the
returned :class:`Scores`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from earthrl.rewards.outcome import answer_correct
from earthrl.rewards.registry import REWARDS, TURN_REWARDS


@dataclass(frozen=True)
class Scores:
    """What the scoring stage says about N trajectories (index i = the i-th trajectory).

    Attributes:
        reward: N Python floats, the trajectory reward; 0.0 for a trajectory hit by a fault
            (``Trajectory.faulted``: something other than the agent failed).
        turn_rewards: N lists of Python floats. With a turn reward in the recipe, the i-th list
            has one value per turn of trajectory i (0.0 for each turn of a faulted one); without
            one, every list is empty.
        correct: N bools, the outcome check of the answer against the task's reference answer
            (False for a faulted trajectory).
    """

    reward: list[float]
    turn_rewards: list[list[float]]
    correct: list[bool]


def score(trajectories: Sequence, tasks: Mapping[str, dict], spec) -> Scores:
    """Score a rollout batch; pure (the trajectories are read, never changed).

    Args:
        trajectories: N :class:`~earthrl.rollout.trajectory.Trajectory`.
        tasks: TaskSpec dicts of the batch by id.
        spec: the recipe's :class:`~earthrl.algorithms.spec.AlgorithmSpec` (any object with
            ``reward``, ``reward_kwargs``, ``turn_reward`` (None: none) and ``turn_reward_kwargs``).

    Returns:
        :class:`Scores` of the N trajectories, in order.

    Raises:
        KeyError: an unknown reward name, or a trajectory whose ``task_id`` is not in ``tasks``.
        ValueError: a turn reward returned a number of values other than the number of turns.
    """
    reward_fn = REWARDS.lookup(spec.reward)
    turn_fn = TURN_REWARDS.lookup(spec.turn_reward) if spec.turn_reward else None
    kw, turn_kw = dict(spec.reward_kwargs or {}), dict(spec.turn_reward_kwargs or {})
    rewards, turn_rewards, correct = [], [], []
    for t in trajectories:
        if t.faulted:
            rewards.append(0.0)
            turn_rewards.append([0.0] * len(t.turns) if turn_fn else [])
            correct.append(False)
            continue
        if t.task_id not in tasks:
            raise KeyError(f"trajectory task_id {t.task_id!r} is not among the step's tasks; pass the step's tasks")
        task = tasks[t.task_id]
        rewards.append(float(reward_fn(t, task, **kw)))
        values = [float(v) for v in turn_fn(t, task, **turn_kw)] if turn_fn else []
        if turn_fn and len(values) != len(t.turns):
            raise ValueError(f"turn reward {spec.turn_reward!r} returned {len(values)} values for {len(t.turns)} turns")
        turn_rewards.append(values)
        correct.append(answer_correct(t.answer, task["answer"]))
    return Scores(reward=rewards, turn_rewards=turn_rewards, correct=correct)
