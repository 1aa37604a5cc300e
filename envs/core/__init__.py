"""The environment core: RSEnv and its step, mock execution, verification, the skill tree and its env
actions, task files and suites' registry, the EnvPool Ray actors, the MCP server, and the
step/load/fuzz benchmarks of all of it, and the TVDI sensitivity table (``tvdi_sensitivity``)."""
