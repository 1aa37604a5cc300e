"""The agent-loop registry: name -> ``async run_episode(task, group, *, system, codec, tokenizer, engine, pool,
cfg, index) -> Trajectory`` (the contract of :func:`earthrl.rollout.agent_loop.run_episode`; ``cfg`` is its
:class:`~earthrl.rollout.agent_loop.LoopConfig`, whose ``options`` and ``adapters`` carry the ``agent``
config group). Loops that give turns contexts of their own set :attr:`~earthrl.rollout.trajectory.Turn.context_ids`."""

from __future__ import annotations

from earthrl.envs.registry import Registry

AGENT_LOOPS = Registry("agent loop", ["earthrl.rollout.agent_loop", "earthrl.rollout.agents.hirs",
                                      "earthrl.rollout.agents.planner_executor"])
