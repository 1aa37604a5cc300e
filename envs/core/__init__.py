"""The environment core: RSEnv and its step, mock execution, verification, the skill tree and its env
actions, task files and suites' registry, the EnvPool Ray actors, the MCP server, a task's reference
workflow as action texts (``reference_actions``) and the TVDI sensitivity table (``tvdi_sensitivity``)."""
