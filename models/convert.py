"""Turn registry GGUF files into plain, trainable Hugging Face folders.

A GGUF loaded straight into transformers stays flagged as quantized and cannot be trained
or saved, so :func:`convert_gguf` loads it once, drops the quantization
config, rebuilds the model from its config in bf16, loads the dequantized state dict and
saves a safetensors folder. :func:`build_tiny_llama` makes the deterministic 2-layer
random-weight model used by fast tests.
"""

from __future__ import annotations

from pathlib import Path

import torch

#: Chat special tokens of the ChatML-style templates (Qwen2.5, SmolLM2). GGUF metadata
#: of SmolLM2 names ``<|im_start|>`` as eos, which would never stop generation.
CHATML_EOS = "<|im_end|>"
CHATML_PAD = "<|endoftext|>"


class ConversionError(RuntimeError):
    """A GGUF file could not be turned into a complete Hugging Face folder."""


def load_gguf_tokenizer(gguf_file: Path):
    """Load the tokenizer stored in ``gguf_file`` and fix its chat special tokens.

    Sets eos to ``<|im_end|>`` and pad to ``<|endoftext|>`` when the vocabulary has them
    (ChatML models), turns off ``clean_up_tokenization_spaces`` and checks that a chat
    template is present.

    Returns:
        A ``transformers`` fast tokenizer.
    Raises:
        ConversionError: the GGUF carries no chat template.
    """
    from transformers import AutoTokenizer

    gguf_file = Path(gguf_file)
    tok = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    vocab = tok.get_vocab()
    if CHATML_EOS in vocab:
        tok.eos_token = CHATML_EOS
    if CHATML_PAD in vocab:
        tok.pad_token = CHATML_PAD
    # BPE tokenizers must not "clean up" spaces before punctuation when decoding
    # (it changes text, and text -> ids round trips).
    tok.clean_up_tokenization_spaces = False
    if not tok.chat_template:
        raise ConversionError(f"{gguf_file.name} has no chat template (tokenizer.chat_template is empty)")
    return tok


def _set_special_ids(model, tok) -> None:
    """Make config and generation config agree with the tokenizer's eos/pad/bos ids."""
    for cfg in (model.config, model.generation_config):
        if cfg is None:
            continue
        cfg.eos_token_id = tok.eos_token_id
        cfg.pad_token_id = tok.pad_token_id
        if tok.bos_token_id is not None:
            cfg.bos_token_id = tok.bos_token_id


def convert_gguf(gguf_file: Path, out_dir: Path, dtype: torch.dtype = torch.bfloat16) -> dict:
    """Convert ``gguf_file`` into a plain safetensors HF folder written into ``out_dir``.

    Steps: load tokenizer and model from the GGUF (dequantized to ``dtype``), remove
    ``quantization_config``, rebuild ``AutoModelForCausalLM.from_config`` in ``dtype``,
    ``load_state_dict`` (only tied weights such as ``lm_head.weight`` may be missing),
    then ``save_pretrained`` model and tokenizer. ``out_dir`` must exist.

    Returns:
        ``{"architecture", "num_parameters", "dtype"}`` for the metadata file.
    Raises:
        ConversionError: keys missing or unexpected after the rebuild.
    """
    from transformers import AutoModelForCausalLM

    gguf_file = Path(gguf_file)
    tok = load_gguf_tokenizer(gguf_file)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name, dtype=dtype)
    cfg = loaded.config
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    state = loaded.state_dict()
    del loaded
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # tied weights (lm_head = embed_tokens) may be absent from the GGUF, nothing else
    tied = set(getattr(model, "_tied_weights_keys", None) or []) if getattr(cfg, "tie_word_embeddings", False) else set()
    untied_missing = [k for k in missing if k not in tied]
    if untied_missing or unexpected:
        raise ConversionError(
            f"{gguf_file.name}: state dict mismatch after rebuild (missing {untied_missing[:5]}, unexpected {list(unexpected)[:5]})"
        )
    model.tie_weights()
    _set_special_ids(model, tok)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    tok.save_pretrained(str(out_dir))
    return {
        "architecture": type(model).__name__,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "dtype": str(dtype).removeprefix("torch."),
    }


#: Shape of the tiny test model (vocabulary comes from the tokenizer).
TINY_LLAMA_SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,  # vLLM's CPU attention supports head sizes 32·k, not hidden/heads = 16
    "max_position_embeddings": 8192,
}


def build_tiny_llama(tokenizer, seed: int = 0, dtype: torch.dtype = torch.bfloat16):
    """Build the deterministic 2-layer random-weight ``LlamaForCausalLM`` for fast tests.

    Shape: :data:`TINY_LLAMA_SHAPE`, ``vocab_size = len(tokenizer)`` (49152 for SmolLM2,
    ~3.3M parameters), tied embeddings. Weights are drawn under ``torch.manual_seed(seed)``
    inside a forked RNG (the caller's RNG state is untouched), so two calls with the same
    seed give bit-identical weights.

    Returns:
        ``LlamaForCausalLM`` in ``dtype``, eval mode, special ids taken from ``tokenizer``.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **TINY_LLAMA_SHAPE,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg).to(dtype)
    _set_special_ids(model, tokenizer)
    return model.eval()
