"""EarthRL envs: the RS tool environment, by capability (the lowest layer; imports nothing heavy).

- ``registry`` (the one :class:`Registry` of every name → thing table), ``paths`` (EARTHRL_HOME,
  data/model folders), ``errors`` (ConfigError), ``kill_points`` (the kill-anywhere test hook);
- ``core``: RSEnv and its step (``env``), artifacts, the data catalogue, parsers, prompts, mock
  execution, verification, the skill tree and its env actions, task files, EnvPool, the MCP server,
  and the step/load/fuzz benchmarks;
- ``tools``: the tool registry and the RS tools, toolsets; ``formats``: action formats (json,
  codeact, hierarchical); ``sandbox``: the CodeAct sandbox;
- ``suites``: the ``earthrl-mini`` suites and templates; ``benchmarks``: Earth-Bench, ThinkGeo.
"""
