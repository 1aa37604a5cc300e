"""Config values as command-line override text, and where the configs live.

:func:`as_overrides` turns a config mapping back into the ``key=value`` overrides that recreate it, in
Hydra's override grammar (https://hydra.cc/docs/advanced/override_grammar/basic/): what
``earthrl learn`` gives each stage and what ``trainer.warm_start`` gives its ``earthrl sft`` run.
"""

from __future__ import annotations

import re
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def presets(group: str) -> list[str]:
    """The preset names of config group ``group``: the ``conf/<group>/*.yaml`` file stems, sorted."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def as_overrides(node, prefix: str = "") -> list[str]:
    """A config mapping as the command-line overrides that recreate it: ``{trainer: {steps: 4}, sft: cpu,
    eval: {modes: [IF]}}`` → ``["trainer.steps=4", "sft=cpu", "eval.modes=[IF]"]`` (a top-level string such
    as ``sft: cpu`` selects a config group, as on the command line)."""
    from omegaconf import DictConfig

    out = []
    for key, value in (node or {}).items():
        path = f"{prefix}{key}"
        if isinstance(value, DictConfig | dict):
            out += as_overrides(value, f"{path}.")
        else:
            out.append(f"{path}={_override_value(value)}")
    return out


def _override_value(v) -> str:
    """A config value in Hydra's override grammar: null, true/false, [a,b], 'quoted' text where needed."""
    from omegaconf import ListConfig

    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, ListConfig | list | tuple):
        return "[" + ",".join(_override_value(x) for x in v) + "]"
    text = str(v)
    if isinstance(v, str) and (not re.fullmatch(r"[\w.\-/+@]+", text) or _reads_as_other_type(text)):
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return text


def _reads_as_other_type(text: str) -> bool:
    """Whether Hydra would read unquoted ``text`` as a number, bool or null rather than a string."""
    if text.lower() in ("true", "false", "null", "nan", "inf", "-inf"):
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True
