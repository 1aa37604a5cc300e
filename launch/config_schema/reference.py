"""The configuration reference page, written from the typed schema (the documentation site builds it).

Every key of every command's root schema (:data:`~.roots.ROOTS`), its rule in words, its schema default and
its meaning, one table per top-level group: the same fields, metadata and rules that check a config before a
run starts (:mod:`.rules`), so the page cannot drift from what the commands accept.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import MISSING

from earthrl.launch.config_schema.roots import ROOTS
from earthrl.launch.config_schema.rules import (
    AutoOr,
    Flag,
    Free,
    Group,
    ListOf,
    Mapping,
    Num,
    Preset,
    Section,
    Text,
    field_types,
    rule_of,
    unwrap,
)

INTRO = """# Configuration reference

Every key that `earthrl train`, `eval`, `sft` and `learn` accept, written from the typed schema the commands
check their configuration against (`launch/config_schema/`), so this page and the commands agree. Set a key on
the command line as a Hydra override (`earthrl train trainer.steps=10`); a group's preset
(`conf/<group>/<name>.yaml`, chosen with `group=name`) may set other values than the schema defaults below.
A value outside a key's rule stops the command with one line naming the key and the rule, before anything starts
([Hydra configuration](../training.md#configuration-hydra)).

*preset* as a default: the group's preset gives the value. Commands: the commands whose configuration has the key.
"""


def _number(rule: Num) -> str:
    """A number rule in words: ``integer ≥ 1``, ``number in [0, 0.99]``, ``number > 0``."""
    kind = "integer" if rule.integer else "number"
    lo, hi = rule.lo, rule.hi
    if lo is not None and hi is not None:
        text = f"{kind} in {'(' if rule.lo_open else '['}{lo:g}, {hi:g}]"
    elif lo is not None:
        text = f"{kind} {'>' if rule.lo_open else '≥'} {lo:g}"
    elif hi is not None:
        text = f"{kind} ≤ {hi:g}"
    else:
        text = kind
    return text + (" or null" if rule.null else "")


def rule_text(rule: Any) -> str:
    """A schema rule (:mod:`.rules`) in words, as the reference table shows it."""
    if isinstance(rule, Num):
        return _number(rule)
    if isinstance(rule, Text):
        text = f"one of {', '.join(f'`{c}`' for c in rule.choices)}" if rule.choices else "text"
        return text + (" or null" if rule.null else "")
    if isinstance(rule, Flag):
        return "true or false"
    if isinstance(rule, ListOf):
        item = rule_text(rule.item)
        text = ("non-empty " if rule.nonempty else "") + ("list" if item == "text" else f"list, each {item}")
        return text + (" or null" if rule.null else "")
    if isinstance(rule, AutoOr):
        return f"`auto` or {_number(rule.rule)}"
    if isinstance(rule, Preset):
        return f"a `conf/{rule.group}` preset name" + (" or null" if rule.null else "")
    if isinstance(rule, Section):
        keys = ", ".join(f"`{f.name}`" for f in dataclasses.fields(rule.schema))
        return ("null or " if rule.null else "") + f"a group of settings ({keys})"
    if isinstance(rule, Mapping):
        return "mapping" + (f", each value {_number(rule.values)}" if rule.values is not None else "")
    if isinstance(rule, Group):
        return "a group of settings" + (" or null" if rule.null else "")
    if isinstance(rule, Free):
        return "any value"
    raise TypeError(f"no words for rule {rule!r}")


def _shown(value: Any) -> str:
    """A default as the command line writes it (``null``, ``true``, ``[a, b]``); *preset* for MISSING."""
    if isinstance(value, str) and value == MISSING:
        return "*preset*"
    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = f"{value:.1f}"
    if isinstance(value, (list, tuple)):
        value = "[" + ", ".join(map(str, value)) + "]"
    if isinstance(value, dict):
        value = "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}" if value else "{}"
    text = str(value)
    return f"`{text}`" if text else '`""`'


def _cell(text: str) -> str:
    """``text`` safe inside a Markdown table cell: ``|`` escaped, ``<…>`` kept as text, ``*`` not emphasis."""
    out, code = [], False
    for ch in text:
        if ch == "`":
            code = not code
        if ch == "|":
            out.append("\\|")
        elif not code and ch == "<":
            out.append("&lt;")
        elif not code and ch == "*":
            out.append("\\*")
        else:
            out.append(ch)
    return "".join(out)


def rows(command: str) -> list[tuple[str, str, str, str]]:
    """(dotted key, rule in words, schema default, meaning) of every key of ``command``'s schema, groups
    before their keys, in the schema's field order; defaults are the root's (``sampling`` of `earthrl eval`
    at temperature 0.1, not the class's)."""
    out: list[tuple[str, str, str, str]] = []

    def walk(cls: type, obj: Any, prefix: str) -> None:
        types = field_types(cls)
        for f in dataclasses.fields(cls):
            key = f"{prefix}{f.name}"
            tp = unwrap(types[f.name])[0]
            value = getattr(obj, f.name)
            rule = rule_of(cls, f)
            if dataclasses.is_dataclass(tp):  # a group; a null one (cluster.verl) lists its keys' class defaults
                out.append((key, rule_text(rule), "" if value is not None else "`null`", f.metadata.get("doc", "")))
                walk(tp, value if value is not None else tp(), key + ".")
            else:
                out.append((key, rule_text(rule), _shown(value), f.metadata.get("doc", "")))

    root = ROOTS[command]
    walk(root, root(), "")
    return out


def reference_markdown() -> str:
    """The whole configuration reference page (Markdown): one table per top-level group of any command, each
    key once, with the commands that have it (the first command's default where they differ)."""
    keys: dict[str, dict[str, Any]] = {}
    for command in ROOTS:
        for key, rule, default, doc in rows(command):
            entry = keys.setdefault(key, {"rule": rule, "default": default, "doc": doc, "commands": []})
            entry["commands"].append(command)
    sections: dict[str, list[str]] = {}
    top = []
    for key, entry in keys.items():
        group, _, rest = key.partition(".")
        line = (f"| `{key}` | {_cell(entry['rule'])} | {_cell(entry['default'])} | {_cell(entry['doc'])} | "
                f"{', '.join(entry['commands'])} |")
        if rest:
            sections.setdefault(group, []).append(line)
        elif not entry["default"] and entry["doc"]:  # a top-level group: its heading carries its meaning
            sections.setdefault(group, []).insert(0, f"{_cell(entry['doc'][:1].upper() + entry['doc'][1:])}; in "
                                                    f"{', '.join(entry['commands'])}.\n")
        else:
            top.append(line)
    header = "| key | value | default | meaning | commands |\n|---|---|---|---|---|"
    parts = [INTRO, "## Top-level keys\n", header, *top, ""]
    for group, lines in sections.items():
        intro = [x for x in lines if not x.startswith("|")]
        table = [x for x in lines if x.startswith("|")]
        parts += [f"## `{group}`\n", *intro, header, *table, ""]
    return "\n".join(parts)
