"""EarthRL's rewards through verl's reward interface (``reward.custom_reward_function``).

verl's reward managers (``verl/experimental/reward_loop/reward_manager/naive.py``) call
``compute_score(data_source, solution_str, ground_truth, extra_info)`` once per trajectory, with the
agent loop's ``extra_fields`` merged into ``extra_info``. :mod:`earthrl.rollout.verl_loop` puts the
trajectory, the task and the ``algorithm`` config there, so this scores exactly as the local backend
(:func:`earthrl.rewards.scoring.score` with the recipe's :class:`~earthrl.algorithms.spec.AlgorithmSpec`).

The result is ``{"score": trajectory reward, "acc": 1.0/0.0 outcome check, "turn_rewards": JSON list}``:
verl writes ``score`` on the last token (``rm_scores``), keeps the rest as ``reward_extra_info``, from
which :func:`earthrl.algorithms.verl_plugin.batch_inputs` puts each turn's reward on the turn's last
token, and DAPO's ``algorithm.filter_groups.metric=acc`` filters on the outcome, never the shaped score.
"""

from __future__ import annotations

import json

from earthrl.algorithms.spec import AlgorithmSpec
from earthrl.rewards.scoring import score
from earthrl.rollout.trajectory import Trajectory

OUTCOME_METRIC = "acc"
"""The ``reward_extra_info`` key of the outcome check (``algorithm.filter_groups.metric``)."""


def compute_score(data_source=None, solution_str=None, ground_truth=None, extra_info=None, **_) -> dict:
    """Score one EarthRL trajectory for verl (see module doc).

    Raises:
        ValueError: ``extra_info`` lacks ``earthrl_trajectory`` / ``earthrl_task`` (the row did not come
            from EarthRL's agent loop).
    """
    info = dict(extra_info or {})
    if info.get("earthrl_trajectory") is None or info.get("earthrl_task") is None:
        raise ValueError("extra_info has no earthrl_trajectory/earthrl_task: set "
                         "actor_rollout_ref.rollout.agent.default_agent_loop=earthrl")
    traj = Trajectory.from_dict(info["earthrl_trajectory"])
    task = info["earthrl_task"]
    spec = AlgorithmSpec.from_config(info.get("earthrl_algorithm") or {})
    s = score([traj], {task["id"]: task}, spec)
    return {"score": float(s.reward[0]), OUTCOME_METRIC: float(s.correct[0]),
            "turn_rewards": json.dumps([float(r) for r in s.turn_rewards[0]])}
