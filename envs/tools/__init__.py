"""The RS tools: ``registry`` (Tool, register_tool, TOOLS, schemas), ``mini_toolset`` (the eleven tools of
``earthrl-mini``), the family modules (``preprocess``, ``physics``, ``timeseries``, ``interpret``,
``stats``, ``vector``, ``viz``), their helpers (``common``, ``band_math``, ``arg_checks``, ``tvdi_core``)
and ``toolsets``. Imports nothing itself."""
