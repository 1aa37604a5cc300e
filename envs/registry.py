"""One name → thing registry for every extension table of EarthRL (lowest layer; imports nothing of ours).

Used for tools, action formats, suites, suite templates, toolsets, env actions and engines,
metrics, rewards, advantage estimators, policy losses, rollout engines and bench suites. Follows
verl ``core_algos``' decorator registries: a name maps to one object (a function, a
class or a record such as a :class:`~earthrl.envs.tools.registry.Tool`), and registering a
*different* object under a taken name raises instead of silently replacing it. Built-in entries
live in modules that register themselves when imported; the registry imports them on its first
read (``reg[name]``, ``name in reg``, iteration, :meth:`Registry.lookup`, :meth:`Registry.names`),
which is the one way built-ins load, so importing a registry stays light and never cycles.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import Any

_DECORATOR = object()


def _origin(obj: Any) -> str:
    """Where ``obj`` was defined, for messages (``module.qualname``; a record's ``fn`` if it has one)."""
    target = getattr(obj, "fn", obj)
    module = getattr(target, "__module__", None) or type(target).__module__
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}.{name}"


def import_target(target: str) -> Any:
    """The attribute named by ``"package.module:attr"``.

    Raises:
        ImportError / AttributeError: the module or the attribute does not exist.
    """
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


class Registry(MutableMapping):
    """A mapping name → object with a refusing :meth:`register` and a helpful :meth:`lookup`.

    Args:
        kind: what is registered, for messages ("reward", "tool", "suite", …).
        builtin_modules: modules (dotted names) whose import registers the built-in entries;
            imported once, on the first read.

    Reading (``[]``, ``in``, ``len``, iteration, ``get``/``items``) loads the built-ins first;
    :meth:`register` refuses a taken name, item assignment replaces on purpose.
    """

    def __init__(self, kind: str, builtin_modules: Iterable[str] = ()) -> None:
        self.kind = kind
        self.builtin_modules = tuple(builtin_modules)
        self._entries: dict[str, Any] = {}
        self._loaded = False

    # --------------------------------------------------------------------- registering

    def add(self, name: str, obj: Any, *, replace: bool = False) -> Any:
        """Register ``obj`` under ``name`` and return it.

        Args:
            replace: overwrite a different object on purpose (tests, user overrides).

        Raises:
            ValueError: ``name`` already holds a different object (re-registering the same or an
                equal object is a no-op).
        """
        old = self._entries.get(name)
        if old is not None and not replace and old is not obj and old != obj:
            raise ValueError(f"{self.kind} {name!r} is already registered by {_origin(old)}; "
                             "choose another name")
        self._entries[name] = obj
        return obj

    def register(self, name: str, obj: Any = _DECORATOR, *, replace: bool = False):
        """``register(name, obj)`` registers ``obj``; ``@register(name)`` is the decorator form.

        Raises:
            ValueError: as :meth:`add`.
        """
        if obj is not _DECORATOR:
            return self.add(name, obj, replace=replace)

        def deco(fn: Callable) -> Callable:
            return self.add(name, fn, replace=replace)

        return deco

    def __setitem__(self, name: str, obj: Any) -> None:
        """``reg[name] = obj`` replaces on purpose (a test's ``monkeypatch.setitem``); use :meth:`register`."""
        self._entries[name] = obj

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    # ------------------------------------------------------------------------- reading

    def load_builtins(self) -> None:
        """Import the built-in modules once (idempotent; safe while one of them is importing)."""
        if not self._loaded:
            self._loaded = True
            for mod in self.builtin_modules:
                importlib.import_module(mod)

    def __getitem__(self, name: str) -> Any:
        self.load_builtins()
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        self.load_builtins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        self.load_builtins()
        return iter(self._entries)

    def __len__(self) -> int:
        self.load_builtins()
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._entries)})"

    def names(self) -> list[str]:
        """Sorted registered names (built-ins included)."""
        return sorted(self)

    def unknown(self, name: str, extra: str = "") -> str:
        """The message for an unknown ``name``: ``unknown <kind> '<name>'; choose one of: …<extra>``."""
        return f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}{extra}"

    def lookup(self, name: str, *, imports: bool = True, error: type[Exception] = KeyError) -> Any:
        """The object registered as ``name``, or (``imports``) a user's ``"package.module:attr"``.

        Args:
            error: the exception class raised for an unknown name (KeyError, or ValueError where
                the name comes from a config field).

        Raises:
            KeyError (or ``error``): unknown name (the message lists the registered ones) or an
                import path that does not resolve.
        """
        if name in self:
            return self._entries[name]
        if imports and ":" in name:
            try:
                return import_target(name)
            except (ImportError, AttributeError) as exc:
                raise error(f"{self.kind} {name!r} cannot be imported ({exc}); "
                            "check the module is on PYTHONPATH") from None
        raise error(self.unknown(name, ", or give module:function" if imports else ""))
