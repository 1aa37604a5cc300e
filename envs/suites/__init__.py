"""The ``earthrl-mini`` task suites: ``earthrl_mini`` (build, cache, report), ``templates`` (the template
registry and suite data), ``templates_core`` / ``templates_ext`` (the templates), ``variants`` (splits, multiple choice)."""
