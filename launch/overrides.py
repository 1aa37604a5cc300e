"""One-line errors for bad command-line overrides, before Hydra runs anything.

Hydra reports a bad override as a multi-line block (search path, grammar tokens, a stack
trace hint). ``earthrl train`` composes the config first and turns such errors into one line
that names the override and the fix.
"""

from __future__ import annotations

import re
from pathlib import Path

from earthrl.launch.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def one_line(exc: Exception) -> str:
    """Condense a Hydra composition / override-parsing error into one line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    head = lines[0].removeprefix("In 'config': ")
    if "Available options in" in str(exc):
        start = next(i for i, line in enumerate(lines) if line.startswith("Available options in"))
        stop = next((i for i, line in enumerate(lines) if line.startswith("Config search path")), len(lines))
        return f"{head}; choose one of: {', '.join(lines[start + 1:stop])}"
    if type(exc).__name__ == "OverrideParseException":
        return f"{head}: write key=value (Hydra override grammar: https://hydra.cc/docs/advanced/override_grammar/basic/)"
    hint = next((re.sub(r"^\d+\.\s*", "", line) for line in lines[1:]
                 if re.match(r"^(\d+\.\s*)?to ", line, re.IGNORECASE)), None)
    return f"{head.rstrip('.')}; {hint[0].lower() + hint[1:]}" if hint else head


def check_overrides(argv: list[str], config_name: str = "train") -> None:
    """Compose the command's config (``conf/config.yaml`` for train, ``conf/eval.yaml`` for eval)
    with ``argv``'s overrides.

    Sweeps (``-m``/``--multirun``) and Hydra's own flags are left to Hydra.

    Raises:
        ConfigError: one line naming the bad override and the fix.
    """
    if any(a.startswith("-") for a in argv):
        return
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from earthrl.launch.hydra_app import CONFIG_NAMES

    name = CONFIG_NAMES.get(config_name, config_name)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        try:
            compose(name, overrides=list(argv))
        except (HydraException, OmegaConfBaseException) as exc:
            raise ConfigError(_did_you_mean(exc, argv, name) or one_line(exc)) from None


def _did_you_mean(exc: Exception, argv: list[str], name: str = "config") -> str | None:
    """For an override of a key that does not exist, name the closest existing key."""
    import difflib

    from hydra import compose

    m = re.match(r"Could not override '([^']+)'", str(exc))
    if m is None:
        return None
    key = m.group(1)
    parent, _, leaf = key.rpartition(".")
    groups = [a for a in argv if "=" in a and "." not in a.split("=", 1)[0]]  # keep model=…, tasks=…
    node = compose(name, overrides=groups)
    for part in filter(None, parent.split(".")):
        node = node.get(part) if hasattr(node, "get") else None
    if not hasattr(node, "keys"):
        return None
    close = difflib.get_close_matches(leaf, [str(k) for k in node.keys()], n=1)
    if not close:
        return None
    fixed = f"{parent}.{close[0]}" if parent else close[0]
    return f"unknown config key '{key}'; did you mean '{fixed}'? (to add a new key, write +{key}=…)"
