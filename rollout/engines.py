"""Rollout engines by name (``cluster.engine`` in the Hydra config).

``hf`` is transformers ``generate`` in a Ray actor; ``vllm`` is vLLM in its own process behind a
Ray actor (:mod:`earthrl.rollout.vllm_engine`); ``auto`` picks vLLM where a Python with vLLM is
found (``make vllm`` on CPU, the ``gpu`` extra on GPU) and the HF engine otherwise.
"""

from __future__ import annotations

from earthrl.envs.registry import Registry
from earthrl.rollout.hf_engine import make_engine_actor as make_hf_engine_actor
from earthrl.rollout.vllm_engine import make_engine_actor as make_vllm_engine_actor
from earthrl.rollout.vllm_env import vllm_python

ENGINES: Registry = Registry("engine")
"""Rollout engines: ``factory(**engine kwargs) -> Ray actor handle with generate / set_lora_weights / ping``."""
ENGINES.register("hf", make_hf_engine_actor)
ENGINES.register("vllm", make_vllm_engine_actor)

ENGINE_OPTIONS = {"hf": ("min_shared_prefix",),
                  "vllm": ("python", "max_model_len", "kv_cache_gib", "gpu_memory_utilization", "enforce_eager",
                           "lora_mode", "num_adapters")}
"""Keys of ``cluster.<engine>`` passed to that engine only (``num_adapters``: set by the runtime for a run with
several LoRA adapters, one per role; the HF engine merges one adapter at a time and needs no count)."""

CONTINUOUS_BATCHING = frozenset({"vllm"})
"""Engines whose actor takes concurrent ``generate`` calls and batches them itself (vLLM's continuous batching):
the agent loop sends each episode's turn as soon as it is ready
(:class:`~earthrl.rollout.agent_loop.BatchingEngineClient` ``continuous=True``), unless the engine's
``cluster.<engine>.continuous_batching`` setting is false. The other engines get one lock-step batch per turn."""


def continuous_batching(name: str, options: dict | None = None) -> bool:
    """Whether rollouts on engine ``name`` (not ``auto``) send each turn at once: the engine is in
    :data:`CONTINUOUS_BATCHING` and its ``cluster.<name>`` settings ``options`` do not set
    ``continuous_batching`` false."""
    return name in CONTINUOUS_BATCHING and bool((options or {}).get("continuous_batching", True))


def resolve_engine(name: str, python: str = "auto") -> tuple[str, str]:
    """The engine ``name`` stands for, and why.

    Args:
        name: ``"auto"`` or a registered engine.
        python: ``cluster.vllm.python`` (see :func:`earthrl.rollout.vllm_env.vllm_python`).

    Returns:
        ``(engine, reason)``, e.g. ``("vllm", "vLLM found at .venv-vllm/bin/python")``.

    Raises:
        KeyError: unknown engine (lists the available ones).
    """
    if name == "auto":
        exe = vllm_python(python)
        if exe is not None:
            return "vllm", f"auto: vLLM found ({exe})"
        return "hf", "auto: no Python with vLLM (run `make vllm` for the faster engine)"
    if name not in ENGINES:
        raise KeyError(ENGINES.unknown(name, " or auto"))
    return name, "set in cluster.engine"


def make_engine(name: str, options: dict | None = None, **kwargs):
    """Start the rollout engine ``name`` (not ``auto``: see :func:`resolve_engine`) as a Ray actor.

    Args:
        options: ``cluster.<name>`` settings; only the keys in :data:`ENGINE_OPTIONS` for ``name`` pass.
        kwargs: the common engine arguments (``model_path``, ``stop_ids``, ``lora``, ``stop_strings``,
            ``dtype``, ``num_threads``).

    Raises:
        KeyError: unknown engine (lists the available ones).
    """
    if name not in ENGINES:
        raise KeyError(ENGINES.unknown(name))
    extra = {k: v for k, v in (options or {}).items() if k in ENGINE_OPTIONS.get(name, ())}
    return ENGINES[name](**kwargs, **extra)
