"""``agent``: the agent loop — who speaks next and what context each role sees (conf/agent/<name>.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from earthrl.launch.config_schema.rules import setting


@dataclass
class AgentConfig:
    """Schema of conf/agent/*.yaml. The action format (how one action is written) stays ``env.action_format``;
    the loop (``name``, :data:`earthrl.rollout.agent_registry.AGENT_LOOPS`) decides the turns around it."""

    name: str = setting("react", "the agent loop: react (one flat loop, one growing context: json, codeact or "
                                 "hierarchical actions) | planner_executor (Earth-Agent-Pro: a planner's "
                                 "workflow, an executor per node, suffix repair; json actions)")
    adapters: dict[str, str] = setting({}, "role -> the name of the LoRA adapter its turns are generated and "
                                           "trained with (e.g. {planner: planner, executor: executor}); a role "
                                           "not named uses the one shared adapter")
    options: dict[str, Any] = setting({}, "the loop's own options (docs/agents.md lists each loop's)")
