"""The trainable policy of the local backend: a causal LM with a LoRA adapter.

Log-probabilities of chosen tokens are computed without a full-vocabulary float32
log-softmax over the whole sequence: the LM head runs only on the positions that
predict response tokens, and ``logsumexp`` is taken in float32 chunks (DESIGN §3).
The reference policy is the same model with the adapter disabled.
"""

from __future__ import annotations

from pathlib import Path

import torch

from earthrl.models.dtype import resolve_dtype
from earthrl.models.lora import attach_lora, lora_config


def pad_right(seqs: list[list], value) -> torch.Tensor:
    """Right-pad lists into a (B, T_max) tensor (long for int ``value``, float32 for float)."""
    width = max(len(s) for s in seqs)
    dtype = torch.float32 if isinstance(value, float) else torch.long
    out = torch.full((len(seqs), width), value, dtype=dtype)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=dtype)
    return out


def pack_batch(token_ids: list[list[int]], response_masks: list[list[int]]) -> dict[str, torch.Tensor]:
    """Right-pad sequences into tensors.

    Returns:
        ``input_ids`` (B, T) long, ``attention_mask`` (B, T) long (1 on every real token,
        observations included), ``response_mask`` (B, T) long (1 on generated tokens only;
        padding 0).

    Raises:
        ValueError: if a mask's length differs from its ids.
    """
    for i, (ids, m) in enumerate(zip(token_ids, response_masks)):
        if len(ids) != len(m):
            raise ValueError(f"sequence {i}: {len(ids)} ids but {len(m)} mask entries")
    return {
        "input_ids": pad_right(token_ids, 0),
        "attention_mask": pad_right([[1] * len(s) for s in token_ids], 0),
        "response_mask": pad_right(response_masks, 0),
    }


class Policy:
    """LoRA policy for the local learner.

    Args:
        model_path: base Hugging Face folder.
        lora: ``{"rank", "alpha", "dropout", "target_modules"}`` (see :func:`earthrl.models.lora.lora_config`).
        dtype: "auto", "bfloat16", "float16" or "float32" (:func:`earthrl.models.dtype.resolve_dtype`).
        gradient_checkpointing: trade compute for memory in the backward pass.
        logit_chunk: rows of the LM head per float32 logsumexp chunk.

    Raises:
        FileNotFoundError: if ``model_path`` does not exist.
    """

    def __init__(self, model_path: str, lora: dict, dtype: str = "auto",
                 gradient_checkpointing: bool = True, logit_chunk: int = 256) -> None:
        from transformers import AutoModelForCausalLM

        if not Path(model_path).exists():
            raise FileNotFoundError(f"model folder {model_path} does not exist: run `earthrl fetch model NAME`")
        self.dtype = resolve_dtype(dtype)[0]
        base = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, self.dtype))
        if gradient_checkpointing:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            base.enable_input_require_grads()
        self.model = attach_lora(base, lora_config(**lora))
        self.model.config.use_cache = False
        self.logit_chunk = logit_chunk

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The LoRA parameters (everything else is frozen)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """LoRA weights with peft's keys, detached on CPU (what the engine loads)."""
        from peft import get_peft_model_state_dict

        return {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(self.model).items()}

    def token_logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       response_mask: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """log π(x_t | x_<t) at every response position.

        Args:
            input_ids, attention_mask, response_mask: (B, T) as from :func:`pack_batch`.
            temperature: the rollout temperature (logits are divided by it, as in sampling).

        Returns:
            (B, T) float32; entry [b, t] is the log-probability of ``input_ids[b, t]`` where
            ``response_mask[b, t] == 1`` and 0 elsewhere (position 0 is never a response token).
        """
        base = self.model.get_base_model()
        hidden = base.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        head = base.get_output_embeddings()
        target = response_mask[:, 1:].bool()  # tokens 1..T-1 predicted from positions 0..T-2
        rows = hidden[:, :-1][target]  # (K, H)
        labels = input_ids[:, 1:][target]  # (K,)
        pieces = []
        for s in range(0, rows.shape[0], self.logit_chunk):
            logits = head(rows[s:s + self.logit_chunk]).float()
            if temperature > 0 and temperature != 1.0:
                logits = logits / temperature
            chosen = logits.gather(-1, labels[s:s + self.logit_chunk, None]).squeeze(-1)
            pieces.append(chosen - torch.logsumexp(logits, dim=-1))
        out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
        if pieces:
            full = torch.zeros(target.shape, dtype=torch.float32, device=input_ids.device)
            full = full.masked_scatter(target, torch.cat(pieces))
            out = torch.cat([torch.zeros_like(out[:, :1]), full], dim=1)
        return out

    @torch.no_grad()
    def ref_logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     response_mask: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """Same as :meth:`token_logprobs` under the reference policy (adapter disabled)."""
        with self.model.disable_adapter():
            return self.token_logprobs(input_ids, attention_mask, response_mask, temperature)
