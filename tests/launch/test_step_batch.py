"""The training step's metrics per role and of the agent loop (``launch/step_batch.loop_metrics``), by hand."""

import pytest

from earthrl.launch.step_batch import loop_metrics
from earthrl.rollout.trajectory import Trajectory, Turn


def _turn(role, n):
    return Turn(response_ids=[1] * n, response_logprobs=[0.0] * n, role=role)


def test_tokens_per_role_and_the_loops_counts_are_means_per_trajectory():
    a = Trajectory(task_id="t", group="g", prompt_ids=[0], turns=[_turn("planner", 10), _turn("executor", 4),
                                                                  _turn("executor", 2)],
                   agent_stats={"repairs": 1, "retries_per_node": 0.5})
    b = Trajectory(task_id="t", group="g", prompt_ids=[0], turns=[_turn("planner", 6)], agent_stats={"repairs": 0})
    assert loop_metrics([a, b]) == {"rollout/tokens/executor": 3.0, "rollout/tokens/planner": 8.0,
                                    "rollout/loop/repairs": 0.5, "rollout/loop/retries_per_node": pytest.approx(0.25)}


def test_the_flat_loop_adds_nothing():
    flat = Trajectory(task_id="t", group="g", prompt_ids=[0], turns=[_turn("agent", 3)])
    assert loop_metrics([flat]) == {} and loop_metrics([]) == {}
