"""Evaluation metrics: ``compute`` (the METRICS registry, compute_all), per-family metrics (``toolcalls``,
``agent``, ``thinkgeo``, ``earthbench``), ``bootstrap`` (95% intervals) and ``report`` (the evaluation report)."""
