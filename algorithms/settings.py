"""Settings objects of the algorithms built from a config mapping that must hold every field.

The dataclasses of this package that mirror a config group (``AdvantageConfig``, ``PolicyLossConfig``,
``AlgorithmSpec``, ``LearnerConfig``) have no defaults of their own: the config schema
(``earthrl.launch.config_schema``) is the one home of each default, and
``earthrl.launch.config_schema.defaults(key, **changes)`` gives them from Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import ClassVar


def required_fields(cls: type, m: Mapping | None, key: str) -> dict:
    """``m`` as the keyword arguments of dataclass ``cls``: every field without a default, and no other key.

    Raises:
        ValueError: one line naming the unknown or missing keys of config ``key`` and where the
            defaults are.
    """
    m = dict(m or {})
    known = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
    unknown, missing = sorted(set(m) - known), sorted(required - set(m))
    if unknown:
        raise ValueError(f"{key} has unknown key(s) {unknown}; allowed: {sorted(known)}")
    if missing:
        raise ValueError(f"{key} is missing {missing}; the config gives every key "
                         f"(from Python: earthrl.launch.config_schema.defaults({key!r}, ...))")
    return m


class FromMapping:
    """Mixin of a settings dataclass that mirrors config group :attr:`CONFIG_KEY`: :meth:`from_mapping`."""

    CONFIG_KEY: ClassVar[str]

    @classmethod
    def from_mapping(cls, m: Mapping | None):
        """Build from a plain mapping holding every field (the :attr:`CONFIG_KEY` config).

        Raises:
            ValueError: an unknown or a missing key (the message names them).
        """
        return cls(**required_fields(cls, m, cls.CONFIG_KEY))
