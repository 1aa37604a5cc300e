"""EarthRL envs: the RS tool environment, by capability (the lowest layer; imports nothing heavy).

- ``registry`` (the one :class:`Registry` of every name → thing table), ``paths`` (EARTHRL_HOME,
  data/model folders), ``errors`` (ConfigError), ``kill_points`` (the kill-anywhere test hook);
- ``core``: RSEnv and its step (``env``), mock execution, verification, the skill tree and its env
  actions, task files, EnvPool, the MCP server, and the step/load/fuzz benchmarks;
- ``tools``: the tool registry and the RS tools, toolsets; ``formats``: action formats (json,
  codeact, hierarchical) and their parsers and prompts; ``sandbox``: the CodeAct sandbox; ``data``: the
  scene catalogue, calibration, artifacts and link-safe workspace I/O (imports no other sub-package);
- ``suites``: the ``earthrl-mini`` suites and templates; ``benchmarks``: Earth-Bench, ThinkGeo;
- ``core.tool_api``: tools from Python (:func:`run_tool`, :func:`run_workflow`, :class:`ToolRunner`),
  importable from here (loaded on first use).
"""

_API = ("run_tool", "run_workflow", "ToolRunner", "ToolCallError")


def __getattr__(name: str):
    """``from earthrl.envs import run_tool`` (and the rest of :data:`_API`) loads :mod:`earthrl.envs.core.tool_api`."""
    if name in _API:
        from earthrl.envs.core import tool_api  # lazy: the env and its tools load only when the Python API is used

        return getattr(tool_api, name)
    raise AttributeError(f"module 'earthrl.envs' has no attribute {name!r}")
