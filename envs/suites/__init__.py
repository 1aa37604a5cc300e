"""The ``earthrl-mini`` task suites: ``mini`` (build, cache, report), ``templates`` (the template registry
and suite data), ``templates_core`` / ``templates_ext`` (the templates), ``variants`` (splits, multiple choice)."""
