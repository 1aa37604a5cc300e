"""Hugging Face transformers rollout engine (CPU, or one GPU without vLLM).

Runs inside a Ray actor (:func:`make_engine_actor`); the learner pushes new LoRA
weights after each step with :meth:`HFEngine.set_lora_weights`. With one adapter per role (``agent.adapters``)
each adapter is pushed under its name and every ``generate`` call names each prompt's adapter: the engine
runs the prompts of one adapter together, merging that adapter into the weights first (roles on one frozen base:
VG-HRL of HiRS-Agent, Earth-Agent-Pro).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from earthrl.models.dtype import resolve_dtype


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings of one generate call.

    ``max_new_tokens``, ``temperature`` and ``top_p`` are required: their defaults live once, in the
    config schema (``earthrl.launch.config_schema.defaults("algorithm.sampling")`` gives them).

    Attributes:
        max_new_tokens: cap on generated tokens per request (one assistant turn).
        temperature: softmax temperature; 0 means greedy.
        top_p: nucleus sampling mass (1.0 disables).
        seed: torch seed of the call (callers vary it per call; equal seeds and prompts give
            equal samples on the same machine).
        ignore_eos: benchmarks only: no stop id or stop string ends a row, every row generates
            ``max_new_tokens`` tokens (vLLM's ``ignore_eos``; the HF engine suppresses the stop ids).
    """

    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int = 0
    ignore_eos: bool = False


class HFEngine:
    """Batched generation with per-token logprobs from a transformers causal LM.

    LoRA updates are applied as merged weights: the engine keeps the pristine base weights
    of the adapted layers and sets ``W = W0 + (alpha / rank) · B @ A`` (computed in float32)
    on every push, so generation runs at the bare model's speed (unmerged LoRA doubles the
    CPU generation time) and repeated pushes never accumulate rounding drift.

    Args:
        model_path: a Hugging Face folder (bf16 safetensors + tokenizer).
        stop_ids: token ids that end a turn (the chat template's end-of-turn id first).
        lora: ``{"rank", "alpha", ...}`` of the learner's adapter (see
            :func:`earthrl.models.lora.lora_config`), or None when no adapter is trained.
        stop_strings: texts that end a turn too (the action format's closing tag, e.g.
            ``"</tool_call>"``), whether emitted as a special token or as plain text.
        dtype: "auto", "bfloat16", "float16" or "float32" (:func:`earthrl.models.dtype.resolve_dtype`,
            the learner's rule; ``auto`` follows ``device``).
        num_threads: torch intra-op threads in this process.
        min_shared_prefix: when the prompts of a batch share at least this many leading
            tokens (the system prompt with the tool schemas), their KV cache is computed once
            and reused by every row and by later calls until the weights change; 0 disables.
        device: "cpu" or "cuda" (resolved by the launcher, :func:`earthrl.models.device.resolve_device`).

    Raises:
        FileNotFoundError: if ``model_path`` does not exist.
    """

    def __init__(self, model_path: str, stop_ids: list[int], lora: dict | None = None,
                 stop_strings: list[str] | None = None, dtype: str = "auto", num_threads: int = 2,
                 min_shared_prefix: int = 64, device: str = "cpu") -> None:
        from pathlib import Path

        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not Path(model_path).exists():
            raise FileNotFoundError(f"model folder {model_path} does not exist: run `earthrl fetch model NAME`")
        torch.set_num_threads(num_threads)
        self.device = torch.device(device)
        resolved = resolve_dtype(dtype, cuda=self.device.type == "cuda")[0]
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, resolved)).to(self.device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model_path) if stop_strings else None
        self.stop_strings = list(stop_strings or [])
        self.lora_scaling = float(lora["alpha"]) / float(lora["rank"]) if lora else None
        self._base_weights: dict[str, torch.Tensor] = {}
        self._adapters: dict[str, dict[str, torch.Tensor]] = {}  # adapter name -> its last pushed weights
        self._merged: str | None = None  # the adapter merged into the weights now
        self.min_shared_prefix = min_shared_prefix
        self._prefix: tuple[tuple[int, ...], object] | None = None
        self.stop_ids = list(stop_ids)
        pad = self.model.config.pad_token_id
        self.pad_id = pad if pad is not None else self.stop_ids[0]

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 adapters: list[str | None] | None = None) -> list[dict]:
        """Sample one continuation per prompt.

        Args:
            prompts: token-id lists (no padding), any lengths.
            params: :class:`SamplingParams`.
            adapters: the LoRA adapter of each prompt (names pushed with :meth:`set_lora_weights`), or None: the
                adapter merged now. The prompts of each adapter run as one batch, in the order the adapters first
                appear, each after its adapter is merged into the weights (seed ``params.seed`` for each batch).

        Returns:
            one dict per prompt, in the order of ``prompts``: ``response_ids`` (list[int], up to and including
            the first stop id), ``logprobs`` (list[float], log-probability of each response token under
            the temperature-scaled distribution, nats), ``finish_reason`` ("stop" | "length"), ``seconds`` of its
            batch, and, when ``adapters`` is given, ``adapter`` (the adapter that generated it; "" while none was
            pushed).

        Raises:
            KeyError: an adapter that was never pushed (names the pushed ones).
        """
        names = [None] * len(prompts) if adapters is None else list(adapters)
        if len(names) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(names)} adapters")
        groups = list(dict.fromkeys(names))
        if len(groups) == 1:
            self._use(groups[0])
            return self._routed(self._generate(prompts, params), adapters is not None)
        results: list[dict | None] = [None] * len(prompts)
        for name in groups:
            rows = [i for i, n in enumerate(names) if n == name]
            self._use(name)
            for i, res in zip(rows, self._routed(self._generate([prompts[i] for i in rows], params), True)):
                results[i] = res
        return results

    def _routed(self, results: list[dict], named: bool) -> list[dict]:
        """``results`` with the adapter that generated them (``adapter``) when the call named adapters."""
        return [{**r, "adapter": self._merged or ""} for r in results] if named else results

    def _use(self, adapter: str | None) -> None:
        """Merge ``adapter``'s pushed weights (None, or no adapter pushed yet: keep the weights as they are)."""
        if adapter is None or not self._adapters or adapter == self._merged:
            return
        if adapter not in self._adapters:
            raise KeyError(f"adapter {adapter!r} was never pushed to the engine; pushed: {sorted(self._adapters)}")
        self._merge(self._adapters[adapter])
        self._merged = adapter

    def _generate(self, prompts: list[list[int]], params: SamplingParams) -> list[dict]:
        """:meth:`generate` of one batch under the weights as they are."""
        t0 = time.perf_counter()
        torch.manual_seed(params.seed)
        shared = self._shared_prefix_len(prompts)
        cache = self._prefix_cache(prompts[0][:shared], len(prompts)) if shared else None
        width = max(len(p) for p in prompts) - shared
        input_ids = torch.full((len(prompts), shared + width), self.pad_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for i, p in enumerate(prompts):  # [shared prefix][left padding][own suffix]
            input_ids[i, :shared] = torch.tensor(p[:shared], dtype=torch.long)
            attention[i, :shared] = 1
            input_ids[i, shared + width - (len(p) - shared):] = torch.tensor(p[shared:], dtype=torch.long)
            attention[i, shared + width - (len(p) - shared):] = 1
        width = input_ids.shape[1]
        greedy = params.temperature <= 0
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids, attention_mask=attention, max_new_tokens=params.max_new_tokens,
                do_sample=not greedy, temperature=None if greedy else params.temperature,
                top_p=None if greedy else params.top_p, top_k=None, eos_token_id=self.stop_ids,
                pad_token_id=self.pad_id, output_logits=True, return_dict_in_generate=True,
                min_new_tokens=params.max_new_tokens if params.ignore_eos else None,
                stop_strings=None if params.ignore_eos else (self.stop_strings or None),
                tokenizer=self.tokenizer, past_key_values=cache,
            )
        gen = out.sequences[:, width:]
        logits = torch.stack(out.logits, dim=1).float()  # (B, T_new, V)
        if not greedy:
            logits = logits / params.temperature
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, gen[..., None]).squeeze(-1)
        seconds = time.perf_counter() - t0
        results = []
        for i in range(len(prompts)):
            ids = gen[i].tolist()
            end = None if params.ignore_eos else self._turn_end(ids)
            n = end if end is not None else len(ids)
            results.append({
                "response_ids": ids[:n],
                "logprobs": logprobs[i, :n].tolist(),
                "finish_reason": "stop" if end is not None else "length",
                "seconds": seconds,
            })
        return results

    def _shared_prefix_len(self, prompts: list[list[int]]) -> int:
        """Leading tokens common to all prompts (each keeps at least one own token), or 0 if too few."""
        if self.min_shared_prefix <= 0:
            return 0
        limit = min(len(p) for p in prompts) - 1
        n = 0
        first = prompts[0]
        while n < limit and all(p[n] == first[n] for p in prompts):
            n += 1
        return n if n >= self.min_shared_prefix else 0

    @torch.no_grad()
    def _prefix_cache(self, prefix: list[int], batch: int):
        """KV cache of ``prefix`` repeated for ``batch`` rows (computed once per prefix and weights)."""
        import copy

        key = tuple(prefix)
        if self._prefix is None or self._prefix[0] != key:
            ids = torch.tensor([prefix], dtype=torch.long, device=self.device)
            out = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
            self._prefix = (key, out.past_key_values)
        cache = copy.deepcopy(self._prefix[1])
        cache.batch_repeat_interleave(batch)
        return cache

    def _turn_end(self, ids: list[int]) -> int | None:
        """Length of the turn in ``ids``: through the first stop id or stop string, else None."""
        stops = set(self.stop_ids)
        last_chars = {s[-1] for s in self.stop_strings}
        for k, t in enumerate(ids):
            if t in stops:
                return k + 1
            # a stop string may end inside a token ("</plan>" in ">\n"), as transformers' stop_strings stops there
            if last_chars and last_chars & set(self.tokenizer.decode([t])):
                text = self.tokenizer.decode(ids[: k + 1])
                if any(s in text for s in self.stop_strings):
                    return k + 1
        return None

    def set_lora_weights(self, state_dict: dict[str, torch.Tensor], adapter: str = "shared") -> int:
        """Merge LoRA weights (peft ``get_peft_model_state_dict`` keys: ``…<module>.lora_A.weight``
        of shape (r, in) and ``…<module>.lora_B.weight`` of shape (out, r)) into the model, and keep them as
        ``adapter``'s (a later :meth:`generate` that names another adapter merges that one instead).

        Returns:
            number of linear layers updated.

        Raises:
            RuntimeError: if the engine was built without ``lora`` or a key names no module.
        """
        if self.lora_scaling is None:
            raise RuntimeError("this engine was built without lora settings: pass lora={'rank', 'alpha'}")
        updated = self._merge(state_dict)
        self._adapters[adapter] = state_dict
        self._merged = adapter
        return updated

    @torch.no_grad()
    def _merge(self, state_dict: dict[str, torch.Tensor]) -> int:
        """Set every adapted layer to ``W0 + scaling · B @ A`` of ``state_dict``; returns the layers updated."""
        modules = dict(self.model.named_modules())
        self._prefix = None  # cached keys/values belong to the old weights
        updated = 0
        for key, a in state_dict.items():
            if ".lora_A." not in key:
                continue
            prefix = key.split(".lora_A.")[0]
            name = prefix.removeprefix("base_model.model.")
            layer = modules.get(name)
            if layer is None or not hasattr(layer, "weight"):
                raise RuntimeError(f"LoRA key {key} names no linear layer {name!r} of the engine's model")
            b = state_dict[key.replace(".lora_A.", ".lora_B.")]
            if name not in self._base_weights:
                self._base_weights[name] = layer.weight.detach().clone()
            w0 = self._base_weights[name]
            delta = (b.to(w0.device, torch.float32) @ a.to(w0.device, torch.float32)) * self.lora_scaling
            layer.weight.copy_((w0.float() + delta).to(w0.dtype))
            updated += 1
        return updated

    def ping(self) -> bool:
        """Liveness check for the actor."""
        return True

    def sleep(self) -> bool:
        """Called after each rollout (the engine contract, :meth:`earthrl.rollout.vllm_engine.VLLMEngine.sleep`):
        this engine keeps its weights where they are and holds no KV cache between calls. Returns False
        (nothing released)."""
        return False


def actor_options(device: str) -> dict:
    """Ray actor options of a rollout engine on ``device``: 0 logical CPUs (threads are set explicitly) and,
    on ``cuda``, one GPU, which makes Ray set the actor's ``CUDA_VISIBLE_DEVICES`` (Ray docs, "GPU support").
    The learner in the driver shares that GPU outside Ray's accounting."""
    return {"num_cpus": 0, "num_gpus": 1 if device == "cuda" else 0, "max_restarts": 0}


def make_engine_actor(**kwargs):
    """Start :class:`HFEngine` as a Ray actor (:func:`actor_options`)."""
    import ray

    return ray.remote(**actor_options(kwargs.get("device", "cpu")))(HFEngine).remote(**kwargs)
