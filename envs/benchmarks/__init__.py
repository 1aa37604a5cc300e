"""External benchmarks as EarthRL tasks: ``earthbench`` (Earth-Bench loader), ``earthbench_map``
(Earth-Bench tool calls → EarthRL calls, mock replay) and ``thinkgeo`` (ThinkGeo loader)."""
