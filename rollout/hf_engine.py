"""Hugging Face transformers rollout engine (CPU, or one GPU without vLLM).

Runs inside a Ray actor (:func:`make_engine_actor`); the learner pushes new LoRA
weights after each step with :meth:`HFEngine.set_lora_weights`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings of one generate call.

    Attributes:
        max_new_tokens: cap on generated tokens per request (one assistant turn).
        temperature: softmax temperature; 0 means greedy.
        top_p: nucleus sampling mass (1.0 disables).
        seed: torch seed of the call (callers vary it per call; equal seeds and prompts give
            equal samples on the same machine).
    """

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0


class HFEngine:
    """Batched generation with per-token logprobs from a transformers causal LM.

    Args:
        model_path: a Hugging Face folder (bf16 safetensors + tokenizer).
        stop_ids: token ids that end a turn (the chat template's end-of-turn id first).
        lora: peft LoRA settings ``{"rank", "alpha", "dropout", "target_modules"}`` (see :func:`earthrl.models.lora.lora_config`)
            or None for the bare model. The adapter starts as the identity (B = 0).
        dtype: "bfloat16" or "float32".
        num_threads: torch intra-op threads in this process.

    Raises:
        FileNotFoundError: if ``model_path`` does not exist.
    """

    def __init__(self, model_path: str, stop_ids: list[int], lora: dict | None = None,
                 dtype: str = "bfloat16", num_threads: int = 2) -> None:
        from pathlib import Path

        from transformers import AutoModelForCausalLM

        if not Path(model_path).exists():
            raise FileNotFoundError(f"model folder {model_path} does not exist: run `earthrl fetch model NAME`")
        torch.set_num_threads(num_threads)
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype))
        if lora is not None:
            from earthrl.models.lora import attach_lora, lora_config

            model = attach_lora(model, lora_config(**lora))
        self.model = model.eval()
        self.stop_ids = list(stop_ids)
        pad = model.config.pad_token_id
        self.pad_id = pad if pad is not None else self.stop_ids[0]

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[dict]:
        """Sample one continuation per prompt.

        Args:
            prompts: token-id lists (no padding), any lengths.
            params: :class:`SamplingParams`.

        Returns:
            one dict per prompt: ``response_ids`` (list[int], up to and including the first
            stop id), ``logprobs`` (list[float], log-probability of each response token under
            the temperature-scaled distribution, nats), ``finish_reason`` ("stop" | "length"),
            and ``seconds`` of the whole batch.
        """
        t0 = time.perf_counter()
        torch.manual_seed(params.seed)
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for i, p in enumerate(prompts):  # left padding
            input_ids[i, width - len(p):] = torch.tensor(p)
            attention[i, width - len(p):] = 1
        greedy = params.temperature <= 0
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids, attention_mask=attention, max_new_tokens=params.max_new_tokens,
                do_sample=not greedy, temperature=None if greedy else params.temperature,
                top_p=None if greedy else params.top_p, top_k=None, eos_token_id=self.stop_ids,
                pad_token_id=self.pad_id, output_logits=True, return_dict_in_generate=True,
            )
        gen = out.sequences[:, width:]
        logits = torch.stack(out.logits, dim=1).float()  # (B, T_new, V)
        if not greedy:
            logits = logits / params.temperature
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, gen[..., None]).squeeze(-1)
        seconds = time.perf_counter() - t0
        results = []
        stops = set(self.stop_ids)
        for i in range(len(prompts)):
            ids = gen[i].tolist()
            end = next((k + 1 for k, t in enumerate(ids) if t in stops), None)
            n = end if end is not None else len(ids)
            results.append({
                "response_ids": ids[:n],
                "logprobs": logprobs[i, :n].tolist(),
                "finish_reason": "stop" if end is not None else "length",
                "seconds": seconds,
            })
        return results

    def set_lora_weights(self, state_dict: dict[str, torch.Tensor]) -> int:
        """Load LoRA adapter weights (peft's ``get_peft_model_state_dict`` keys). Returns tensors loaded.

        Raises:
            RuntimeError: if the engine was built without LoRA or keys do not match.
        """
        from peft import set_peft_model_state_dict

        if not hasattr(self.model, "peft_config"):
            raise RuntimeError("this engine has no LoRA adapter: build it with lora settings")
        result = set_peft_model_state_dict(self.model, state_dict)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise RuntimeError(f"{len(unexpected)} LoRA keys do not match the engine's model, e.g. {unexpected[0]}")
        return len(state_dict)

    def ping(self) -> bool:
        """Liveness check for the actor."""
        return True


def make_engine_actor(**kwargs):
    """Start :class:`HFEngine` as a Ray actor (0 logical CPUs: threads are set explicitly)."""
    import ray

    return ray.remote(num_cpus=0, max_restarts=0)(HFEngine).remote(**kwargs)
