"""LoRA adapters for Llama/Qwen-style models (peft).

Defaults target every attention and MLP projection of Llama/Qwen2 blocks. One base model
can carry several named adapters (one per role: manager, specialist, planner, executor);
:func:`attach_lora` adds a further named adapter to a model that already has one.
:func:`merge_lora` gives the settings a run trains with (``model.lora`` and ``algorithm.lora``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from peft import LoraConfig, PeftModel

#: Attention and MLP projections of Llama / Qwen2 / SmolLM2 decoder blocks.
DEFAULT_TARGET_MODULES: tuple[str, ...] = (
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
)


SHARED_ADAPTER = "shared"
"""The adapter of a role that ``agent.adapters`` does not name (and of every role by default)."""


def adapter_names(adapters: Mapping[str, str] | None, roles: Sequence[str] = ()) -> tuple[str, ...]:
    """The LoRA adapters of a run: the distinct values of ``agent.adapters`` (role -> adapter name) in the order
    they first appear, then ``"shared"`` when one of the loop's ``roles`` is not named (it generates with the
    shared adapter), or ``("shared",)`` when it names none. One name is one adapter, trained and served exactly
    as a run without roles; several are one named peft adapter each on one frozen base (VG-HRL of HiRS-Agent:
    manager and specialist; Earth-Agent-Pro: planner and executor).

    Args:
        adapters: ``agent.adapters``.
        roles: the roles of the agent loop (its function's ``roles`` attribute; empty when it declares none).

    Raises:
        ValueError: a name that is not a Python identifier, or one that peft would confuse with its ``lora_``
            parameter prefix (a substring of it, e.g. ``"a"``), or ``default`` (peft's name of the single adapter);
            names the role and the fix.
    """
    names: list[str] = []
    for role, name in (adapters or {}).items():
        name = str(name)
        if not name.isidentifier() or name in "lora_" or name == "default":
            raise ValueError(f"agent.adapters.{role}={name!r}: an adapter name must be an identifier (letters, digits, "
                             f"_) other than 'default' and not part of peft's prefix 'lora_'; e.g. agent.adapters.{role}={role}")
        if name not in names:
            names.append(name)
    if any(role not in (adapters or {}) for role in roles) and SHARED_ADAPTER not in names:
        names.append(SHARED_ADAPTER)
    return tuple(names) or (SHARED_ADAPTER,)


def merge_lora(model_lora: Any, override: Mapping | None = None) -> dict:
    """The LoRA settings a run trains with: ``model.lora`` with each key ``override`` sets in its place
    (``algorithm.lora``: an algorithm may size its own adapter, e.g. HiRS VG-HRL rank 64, alpha 128).

    Args:
        model_lora: ``{"rank", "alpha", "dropout", "target_modules"}``, the keywords of :func:`lora_config`;
            a mapping or the typed ``model.lora`` settings (a dataclass, ``launch/config_schema/model.py``).
        override: some of those keys (a mapping), or None / empty: ``model_lora`` as it is.

    Returns:
        A new plain dict (lists, not ``ListConfig``); neither argument is modified.
    """
    return {**_plain(model_lora), **_plain(override)}


def _plain(node: Any) -> dict:
    """``node`` (a mapping or a dataclass) as a new dict of plain values (a sequence as a list); None: {}."""
    if dataclasses.is_dataclass(node):
        node = dataclasses.asdict(node)
    return {k: list(v) if isinstance(v, Sequence) and not isinstance(v, str) else v for k, v in (node or {}).items()}


def lora_config(
    rank: int,
    alpha: float,
    dropout: float,
    target_modules: Sequence[str] | None = None,
) -> LoraConfig:
    """Build a causal-LM ``peft.LoraConfig`` (scaling = alpha / rank).

    ``rank``, ``alpha`` and ``dropout`` are required: their defaults live once, in the config schema
    (``model.lora``; from Python, ``lora_config(**earthrl.launch.config_schema.defaults("model.lora"))``).

    Args:
        rank: LoRA rank r (> 0).
        alpha: lora_alpha (> 0; an alpha of 0 zeroes the adapter, which is the verl
            merger bug of verl 0.9.1, so it is refused).
        dropout: LoRA dropout in [0, 1).
        target_modules: module names to adapt; ``None`` means :data:`DEFAULT_TARGET_MODULES`.
    Raises:
        ValueError: rank or alpha not positive, dropout outside [0, 1), empty targets.
    """
    from peft import LoraConfig  # lazy: peft imports torch and transformers; merge_lora serves the config checks

    if rank <= 0:
        raise ValueError(f"LoRA rank must be > 0, got {rank}")
    if alpha <= 0:
        raise ValueError(f"LoRA alpha must be > 0, got {alpha} (alpha 0 makes the adapter a no-op)")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"LoRA dropout must be in [0, 1), got {dropout}")
    targets = list(DEFAULT_TARGET_MODULES if target_modules is None else target_modules)
    if not targets:
        raise ValueError("LoRA target_modules is empty")
    return LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets,
        bias="none", task_type="CAUSAL_LM",
    )


def attach_lora(model, cfg: LoraConfig, adapter_name: str = "default") -> PeftModel:
    """Wrap ``model`` with a LoRA adapter ``adapter_name`` (or add it to an existing PeftModel).

    Only the LoRA weights are trainable afterwards; the base stays frozen. The new
    adapter becomes the active one.

    Returns:
        The ``peft.PeftModel``.
    Raises:
        ValueError: none of ``cfg.target_modules`` names a module of ``model`` (lists the
            linear layer names that exist), or ``adapter_name`` already exists.
    """
    from peft import PeftModel, get_peft_model  # lazy: peft imports torch and transformers

    base = model.get_base_model() if isinstance(model, PeftModel) else model
    leaf_names = {name.rsplit(".", 1)[-1] for name, mod in base.named_modules() if type(mod).__name__ == "Linear"}
    wanted = set(cfg.target_modules) if not isinstance(cfg.target_modules, str) else None
    if wanted is not None and not wanted & leaf_names:
        raise ValueError(
            f"no LoRA target module {sorted(wanted)} in {type(base).__name__}; linear layers: {sorted(leaf_names)}"
        )
    if isinstance(model, PeftModel):
        if adapter_name in model.peft_config:
            raise ValueError(f"adapter {adapter_name!r} already attached; adapters: {sorted(model.peft_config)}")
        model.add_adapter(adapter_name, cfg)
        model.set_adapter(adapter_name)
        return model
    return get_peft_model(model, cfg, adapter_name=adapter_name)
