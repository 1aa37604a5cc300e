"""Argument specs of benchmark tool surfaces: a tool's arguments written as one line
(``"image:str!, text:str!, top1:bool=True"``) and turned into a pydantic argument model.

Used by the surfaces whose tools EarthRL registers from a benchmark's published signatures
(Earth-Agent's, :mod:`earthrl.envs.tools.earthagent`; ThinkGeo's, :mod:`earthrl.envs.tools.thinkgeo_tools`).
An entry is ``name[|alias…]:type[!][=default]``: ``!`` marks a required argument, a default is a
Python literal (``'x'``, ``True``, ``None``, a number); the types are :data:`TYPES`.
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, Field, create_model

from earthrl.envs.tools.registry import Args

#: type codes of an argument spec
TYPES: dict[str, Any] = {
    "str": str, "num": float, "int": int, "bool": bool, "list": list[Any],
    "path": str | list[str],  # one file or a batch of files
    "numstr": float | str, "boolstr": bool | str, "optnum": float | None,
}


def _default(text: str) -> Any:
    """The default of an argument spec: ``'x'`` a string, ``True``/``False``/``None``, else a number."""
    if not text or text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    if text[0] == text[-1] == "'":
        return text[1:-1]
    return float(text) if "." in text else int(text)


def parse_arguments(spec: str) -> list[tuple[list[str], str, bool, Any]]:
    """``[(names, type code, required, default)]`` of an argument spec ``"a|alias:str!, b:num=1, c:str='x'"``
    (names: the argument, then its aliases; default None when not given).

    Raises:
        ValueError: an unknown type code or a malformed entry.
    """
    out = []
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        names, _, rest = item.partition(":")
        code, _, default = rest.partition("=")
        required = code.endswith("!")
        code = code.removesuffix("!")
        if code not in TYPES or not names:
            raise ValueError(f"argument spec {item!r}: type {code!r} not in {sorted(TYPES)}")
        out.append((names.split("|"), code, required, _default(default)))
    return out


def spec_model(name: str, spec: str, doc: str, prefix: str = "Args") -> type[Args]:
    """The pydantic argument model of tool ``name`` from its argument spec (:func:`parse_arguments`):
    required arguments have no default, optional ones default to the spec's default or None (not
    validated: the argument was left out; an explicit null is a schema error); aliases validate
    into the first name (``validation_alias``). ``doc`` becomes the model's docstring (the source
    of the signature); the model is named ``<prefix>_<name>``."""
    fields: dict[str, Any] = {}
    for names, code, required, default in parse_arguments(spec):
        alias = AliasChoices(*names) if len(names) > 1 else None
        fields[names[0]] = (TYPES[code], Field(... if required else default, validation_alias=alias))
    model = create_model(f"{prefix}_{name.replace('-', '_')}", __base__=Args, **fields)
    model.__doc__ = doc
    return model
