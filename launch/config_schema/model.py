"""``model``: the policy model (conf/model/<name>.yaml picks one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from earthrl.launch.config_schema.rules import setting
from earthrl.models.dtype import DTYPES
from earthrl.models.lora import DEFAULT_TARGET_MODULES

ALL_LINEAR = list(DEFAULT_TARGET_MODULES)


@dataclass
class LoraConfig:
    """The LoRA adapter that is trained (``algorithm.lora`` overrides it for one algorithm)."""

    rank: int = setting(16, "LoRA rank r (dimensions of the low-rank update)", range=(1, None))
    alpha: float = setting(32.0, "LoRA alpha: the update is scaled by alpha / rank", range=(0, None), lo_open=True)
    dropout: float = setting(0.0, "dropout probability on the LoRA input", range=(0, 0.99))
    target_modules: list[str] = setting(ALL_LINEAR, "module names that get an adapter (default: every linear layer)",
                                        nonempty=True)


@dataclass
class ArchConfig:
    """A model's shape, as in its config.json: what the memory estimate reads when ``model.path`` is not
    there yet (backend=verl; :meth:`earthrl.launch.memory.Arch.from_mapping` reads the keys given)."""

    hidden_size: int = setting(MISSING, "hidden size (elements)", range=(1, None))
    num_hidden_layers: int = setting(MISSING, "decoder layers", range=(1, None))
    num_attention_heads: int = setting(MISSING, "query heads", range=(1, None))
    num_key_value_heads: int | None = setting(None, "key/value heads (GQA); null: num_attention_heads",
                                                 range=(1, None))
    head_dim: int | None = setting(None, "elements per head; null: hidden_size / num_attention_heads",
                                      range=(1, None))
    intermediate_size: int = setting(MISSING, "MLP hidden size (elements)", range=(1, None))
    vocab_size: int = setting(MISSING, "vocabulary size (tokens)", range=(1, None))
    tie_word_embeddings: bool = setting(False, "the output projection shares the embedding matrix")


@dataclass
class ModelConfig:
    """Schema of conf/model/*.yaml."""

    name: str = setting(MISSING, "model name: the folder $EARTHRL_HOME/models/<name> and `earthrl fetch model <name>`")
    path: str | None = setting(None, "a local Hugging Face folder (config.json, safetensors, tokenizer); "
                                        "null: $EARTHRL_HOME/models/<name>")
    dtype: str = setting("auto", "weights and compute dtype; auto: bf16 on a GPU or a CPU with AVX512-BF16/AMX, "
                                 "float32 elsewhere (models/dtype.py)", choices=DTYPES)
    gradient_checkpointing: bool = setting(True, "recompute activations in the backward pass (less memory, slower)")
    lora: LoraConfig = setting(factory=LoraConfig, doc="the trained adapter")
    arch: Any = setting(None, "the model's shape for the memory estimate (backend=verl; keys: "
                                                   "ArchConfig); null: read from the model folder",
                                             schema=ArchConfig, null=True)
