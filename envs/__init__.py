"""EarthRL envs: the RS tool environment, by capability (the lowest layer; imports nothing heavy).

- ``registry`` (the one :class:`Registry` of every name → thing table), ``paths`` (EARTHRL_HOME,
  data/model folders), ``errors`` (ConfigError), ``kill_points`` (the kill-anywhere test hook);
- ``core``: RSEnv and its step (``env``), mock execution, verification, the skill tree and its env
  actions, task files, EnvPool, the MCP server, and the step/load/fuzz benchmarks;
- ``tools``: the tool registry and the RS tools, toolsets; ``formats``: action formats (json,
  codeact, hierarchical) and their parsers and prompts; ``sandbox``: the CodeAct sandbox; ``data``: the
  scene catalogue, calibration, artifacts and link-safe workspace I/O (imports no other sub-package);
- ``suites``: the ``earthrl-mini`` suites and templates; ``benchmarks``: Earth-Bench, ThinkGeo.
"""
