"""Action formats: how a model's turn becomes tool calls (``registry``: FORMATS and the ``json`` format;
``codeact``: fenced Python over the sandbox; ``hierarchical``: manager/specialist turns; ``parsers``:
the bounded parsers of a turn's text; ``prompts``: the system prompts)."""
