"""Rollout engines by name (``cluster.engine`` in the Hydra config)."""

from __future__ import annotations

from collections.abc import Callable

from earthrl.rollout.hf_engine import make_engine_actor as make_hf_engine_actor

# name -> factory(**engine kwargs) -> Ray actor handle with generate / set_lora_weights / ping
ENGINES: dict[str, Callable] = {"hf": make_hf_engine_actor}


def make_engine(name: str, **kwargs):
    """Start the rollout engine ``name`` as a Ray actor.

    Raises:
        KeyError: unknown engine (lists the available ones).
    """
    if name not in ENGINES:
        raise KeyError(f"unknown engine {name!r}; available: {', '.join(sorted(ENGINES))} (vLLM is not wired in yet)")
    return ENGINES[name](**kwargs)
