"""Name → function registries (rewards, advantage estimators, policy losses).

Follows verl ``core_algos``' decorator registries (DESIGN §8): a name maps to one pure
function, and registering a *different* function under a taken name raises instead of
silently replacing it. Built-in entries live in modules imported on first lookup, so that
importing a registry stays light.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable


class Registry(dict):
    """A ``dict`` name → function with a refusing ``register`` decorator and a helpful ``lookup``.

    Args:
        kind: what is registered, for messages ("reward", "advantage estimator", …).
        builtin_modules: modules whose import registers the built-in entries.
    """

    def __init__(self, kind: str, builtin_modules: Iterable[str] = ()) -> None:
        super().__init__()
        self.kind = kind
        self.builtin_modules = tuple(builtin_modules)
        self._loaded = False

    def register(self, name: str) -> Callable[[Callable], Callable]:
        """Decorator registering ``fn`` under ``name``.

        Raises:
            ValueError: ``name`` already holds a different function (re-registering the
                same function object is a no-op).
        """

        def deco(fn: Callable) -> Callable:
            old = dict.get(self, name)
            if old is not None and old is not fn:
                raise ValueError(f"{self.kind} {name!r} is already registered by "
                                 f"{old.__module__}.{old.__qualname__}; choose another name")
            self[name] = fn
            return fn

        return deco

    def load_builtins(self) -> None:
        """Import the built-in modules once (idempotent)."""
        if not self._loaded:
            self._loaded = True
            for mod in self.builtin_modules:
                importlib.import_module(mod)

    def names(self) -> list[str]:
        """Sorted registered names (built-ins included)."""
        self.load_builtins()
        return sorted(self)

    def lookup(self, name: str) -> Callable:
        """The function registered as ``name``, or a user's ``"package.module:function"``.

        Raises:
            KeyError: unknown name (the message lists the registered ones) or an import
                path that does not resolve.
        """
        self.load_builtins()
        if name in self:
            return self[name]
        if ":" in name:
            module, _, attr = name.partition(":")
            try:
                return getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as exc:
                raise KeyError(f"{self.kind} {name!r} cannot be imported ({exc}); check the module is on PYTHONPATH") from None
        raise KeyError(f"unknown {self.kind} {name!r}; choose one of: {', '.join(sorted(self))}, or give module:function")


ESTIMATORS = Registry("advantage estimator", ["earthrl.algorithms.estimators", "earthrl.algorithms.hierarchical"])
"""Per-turn advantage estimators ``fn(batch: TurnBatch, cfg: AdvantageConfig) -> Tensor (M,)``."""

POLICY_LOSSES = Registry("policy loss", ["earthrl.algorithms.policy_loss", "earthrl.algorithms.mixed_loss"])
"""Policy losses ``fn(*, logprobs, old_logprobs, advantages, response_mask, ref_logprobs, cfg, role_mask,
batch_num_tokens, global_batch_size, role_num_tokens, dp_size) -> (loss, metrics)`` (named arguments only)."""
