"""The value rules a schema field carries, and the one-line messages they give.

A field's type (``int``, ``float``, ``bool``, ``str``, ``Optional[...]``, ``List[str]``, a dataclass)
gives its rule; :func:`setting` adds what OmegaConf's types cannot say (a range, choices, ``auto``, a
preset name) as field metadata. :func:`rule_of` turns a field into one of the rule objects below, whose
``problem(value)`` says in words why a value breaks it.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from earthrl.launch.override_text import presets

PHRASINGS = ("IF", "AP", "OW")
SPLITS = ("train", "test")


@dataclass(frozen=True)
class Num:
    """A finite number in ``[lo, hi]`` (``lo_open``: ``lo`` excluded); ``integer`` for whole numbers;
    ``null`` allows None. A bool is never a number."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    integer: bool = False
    null: bool = False

    def problem(self, v: Any) -> str | None:
        """Why ``v`` breaks the rule, or None."""
        if v is None and self.null:
            return None
        kind = "an integer" if self.integer else "a number"
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (self.integer and not isinstance(v, int)):
            return f"must be {kind}" + (" or null" if self.null else "")
        if not math.isfinite(v):
            return "must be a finite number"
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            if self.lo_open:
                return f"must be greater than {self.lo:g}"
            return f"must be at least {self.lo:g}" if self.hi is None else f"must be between {self.lo:g} and {self.hi:g}"
        if self.hi is not None and v > self.hi:
            return f"must be at most {self.hi:g}" if self.lo is None else f"must be between {self.lo:g} and {self.hi:g}"
        return None


@dataclass(frozen=True)
class Text:
    """A string (``empty`` allows ""), one of ``choices`` when given; ``null`` allows None."""

    choices: tuple[str, ...] = ()
    empty: bool = False
    null: bool = False

    def problem(self, v: Any) -> str | None:
        """Why ``v`` breaks the rule, or None."""
        if v is None and self.null:
            return None
        if self.choices and v not in self.choices:
            return f"must be one of {', '.join(self.choices)}"
        if not isinstance(v, str):
            return "must be a string" + (" or null" if self.null else "")
        if not v.strip() and not self.empty:
            return "must not be empty"
        return None


@dataclass(frozen=True)
class Flag:
    """``true`` or ``false``."""

    def problem(self, v: Any) -> str | None:
        """Why ``v`` breaks the rule, or None."""
        return None if isinstance(v, bool) else "must be true or false"


@dataclass(frozen=True)
class ListOf:
    """A list whose items follow ``item``; ``nonempty`` refuses ``[]``; ``null`` allows None."""

    item: Num | Text
    nonempty: bool = False
    null: bool = False

    def problem(self, v: Any) -> str | None:
        """Why ``v`` breaks the rule, or None."""
        if v is None and self.null:
            return None
        if not isinstance(v, (list, tuple)) or (self.nonempty and not v):
            return "must be a " + ("non-empty " if self.nonempty else "") + "list"
        bad = next((p for p in map(self.item.problem, v) if p), None)
        return f"items {bad}" if bad else None


@dataclass(frozen=True)
class Group:
    """A group of settings (a schema dataclass; its keys have their own rules); ``null`` allows None."""

    keys: tuple[str, ...]
    null: bool = False

    def problem(self, v: Any) -> str | None:
        """Why ``v`` is not a group of settings, or None."""
        if isinstance(v, dict) or dataclasses.is_dataclass(v) or (v is None and self.null):
            return None
        return f"must be {'null or ' if self.null else ''}a group of settings ({', '.join(self.keys)})"


@dataclass(frozen=True)
class Section:
    """An optional group of settings whose keys follow schema dataclass ``schema`` (kept as a mapping in the
    composed config: OmegaConf 2.3 cannot set a null structured node from the command line, e.g.
    ``env.inject_errors={rate: 0.1}``); ``null`` allows None. :func:`section_problem` checks its keys."""

    schema: type
    null: bool = False

    def problem(self, v: Any) -> str | None:
        """Why ``v`` is not a mapping (its keys: :func:`section_problem`), or None."""
        if isinstance(v, dict) or (v is None and self.null):
            return None
        keys = ", ".join(f.name for f in dataclasses.fields(self.schema))
        return f"must be {'null or ' if self.null else ''}a group of settings ({keys})"


def section_problem(schema: type, v: dict, path: str, shown) -> str | None:
    """The one-line message for the first key of mapping ``v`` (at dotted ``path``) that ``schema`` does not
    have or whose value breaks its rule, or for a required key that is missing; None when all are good."""
    fields = {f.name: f for f in dataclasses.fields(schema)}
    for key, item in v.items():
        if key not in fields:
            return f"{path}.{key}={shown(item)} {Unknown(tuple(fields)).problem(item)}"
        if (bad := rule_of(schema, fields[key]).problem(item)) is not None:
            return f"{path}.{key}={shown(item)} {bad}"
    missing = [n for n, f in fields.items() if n not in v and f.default is MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        return f"{path}: missing {', '.join(missing)}; give every one of them"
    return None


@dataclass(frozen=True)
class Mapping:
    """A mapping of free keys (checked by the code that uses them, e.g. a registry or a user's reward);
    ``values``, when given, is the rule of every value."""

    values: Num | None = None

    def problem(self, v: Any) -> str | None:
        """Why ``v`` is not a mapping (or a value breaks ``values``), or None."""
        if not isinstance(v, dict):
            return "must be a mapping like {key: value}"
        if self.values is not None:
            for key, item in v.items():
                if (bad := self.values.problem(item)) is not None:
                    return f"value of {key} {bad}"
        return None


@dataclass(frozen=True)
class Unknown:
    """A key under a group whose keys are all known: always refused, naming the known ones."""

    known: tuple[str, ...]

    def problem(self, v: Any) -> str | None:
        """Always the list of known keys."""
        return f"is not a known setting there; known: {', '.join(self.known)}"


@dataclass(frozen=True)
class Preset:
    """The name of a preset ``conf/<group>/<name>.yaml``, as text (a name with no file is refused, with
    the same list, by the code that loads it); ``null`` allows None."""

    group: str
    null: bool = False

    def problem(self, v: Any) -> str | None:
        """Why ``v`` is not a preset name (lists the presets), or None."""
        if (v is None and self.null) or (isinstance(v, str) and v.strip()):
            return None
        return (f"must be {'null or ' if self.null else ''}a conf/{self.group} preset: one of "
                f"{', '.join(presets(self.group))}")


@dataclass(frozen=True)
class AutoOr:
    """``auto`` or a value that follows ``rule``."""

    rule: Num

    def problem(self, v: Any) -> str | None:
        """Why ``v`` is neither ``auto`` nor allowed by ``rule``, or None."""
        if v == "auto":
            return None
        bad = self.rule.problem(v)
        return f"must be auto or {bad.removeprefix('must be ')}" if bad else None


@dataclass(frozen=True)
class Free:
    """Anything (checked by the code that uses it, e.g. a registry)."""

    def problem(self, v: Any) -> str | None:
        """Never a problem."""
        return None


Rule = Num | Text | Flag | ListOf | Group | Section | Mapping | Unknown | Preset | AutoOr | Free


def setting(default: Any = MISSING, doc: str = "", *, factory: Any = None, range: tuple | None = None,
            lo_open: bool = False, choices: tuple[str, ...] = (), nonempty: bool = False, empty: bool = False,
            auto: bool | type = False, preset: str | None = None, values: Num | None = None, null: bool = False,
            schema: type | None = None) -> Any:
    """A schema field: its default (``MISSING``: the preset must give it; ``factory`` for a mutable one),
    its meaning and unit (``doc``), and the rules its type cannot carry.

    Args:
        range: ``(lo, hi)`` of a number (None: unbounded); ``lo_open`` excludes ``lo``.
        choices: the values a string (or each item of a list) may take.
        nonempty: a list must not be empty. empty: a string may be "".
        auto: ``auto`` or a number in ``range`` (the field is typed ``Any``); ``auto=int``: or a whole number.
        preset: the value names a ``conf/<preset>`` file (the field is typed ``Any``).
        values: the rule of every value of a free mapping.
        null: an ``Any`` field (``auto``, ``preset``) may be null.
        schema: the dataclass whose fields the keys of an optional mapping follow (:class:`Section`).
    """
    meta = {"doc": doc, "range": range, "lo_open": lo_open, "choices": tuple(choices), "nonempty": nonempty,
            "empty": empty, "auto": auto, "preset": preset, "values": values,
            "null": null, "schema": schema}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)


def unwrap(tp: Any) -> tuple[Any, bool]:
    """(the type inside ``Optional[...]``, whether None is allowed)."""
    args = typing.get_args(tp)
    if (typing.get_origin(tp) in (typing.Union, types.UnionType)) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return tp, False


def field_types(cls: type) -> dict[str, Any]:
    """The resolved annotations of schema dataclass ``cls``."""
    return typing.get_type_hints(cls)


def rule_of(cls: type, f: dataclasses.Field) -> Rule:
    """The rule of field ``f`` of schema dataclass ``cls``, from its type and metadata."""
    tp, null = unwrap(field_types(cls)[f.name])
    m = f.metadata
    null = null or m.get("null", False)
    lo, hi = m.get("range") or (None, None)
    if m.get("schema"):
        return Section(m["schema"], null=null)
    if m.get("preset"):
        return Preset(m["preset"], null=null)
    if m.get("auto"):
        return AutoOr(Num(lo, hi, lo_open=m.get("lo_open", False), integer=m["auto"] is int))
    if dataclasses.is_dataclass(tp):
        return Group(tuple(g.name for g in dataclasses.fields(tp)), null=null)
    if tp is bool:
        return Flag()
    if tp in (int, float):
        return Num(lo, hi, lo_open=m.get("lo_open", False), integer=tp is int, null=null)
    if tp is str:
        return Text(m.get("choices", ()), empty=m.get("empty", False), null=null)
    origin = typing.get_origin(tp)
    if origin in (list, list):
        return ListOf(Text(m.get("choices", ())), nonempty=m.get("nonempty", False), null=null)
    if origin in (dict, dict):
        return Mapping(m.get("values"))
    return Free()
