"""Rollout engines by name (``cluster.engine`` in the Hydra config)."""

from __future__ import annotations

from earthrl.envs.registry import Registry
from earthrl.rollout.hf_engine import make_engine_actor as make_hf_engine_actor

ENGINES: Registry = Registry("engine")
"""Rollout engines: ``factory(**engine kwargs) -> Ray actor handle with generate / set_lora_weights / ping``."""
ENGINES.register("hf", make_hf_engine_actor)


def make_engine(name: str, **kwargs):
    """Start the rollout engine ``name`` as a Ray actor.

    Raises:
        KeyError: unknown engine (lists the available ones).
    """
    if name not in ENGINES:
        raise KeyError(ENGINES.unknown(name, " (vLLM is not wired in yet)"))
    return ENGINES[name](**kwargs)
