"""GPU memory estimate of a ``backend=verl`` job, printed by ``earthrl train`` before it starts.

verl's hybrid engine alternates two phases on each card, so the peak is the larger of:

- **train**: bf16 base weights sharded over the GPUs (FSDP2; the reference policy is the same base
  with the adapter off), the LoRA adapter's bf16 weights + fp32 gradients + fp32 master copy + Adam's
  two fp32 moments (16 B per adapter parameter beyond its 2), activations of one micro-batch
  (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models":
  34·s·b·h bytes per layer with flash attention; with gradient checkpointing 2·s·b·h per layer for
  the saved layer inputs plus one layer's 34·s·b·h recomputed) and the bf16 logits s·b·V·2 of the
  micro-batch (float32 log-softmax in chunks adds ~one more of those);
- **rollout**: vLLM's share ``gpu_memory_utilization`` of the card must hold its weights (/ tensor
  parallel) and the KV cache of the rollout batch: 2·L·kv_heads·head_dim·2 bytes per token for every
  (prompt + response) token of the trajectories the GPU's engine serves. vLLM queues what its cache
  cannot hold, so the batch need not fit at once: the estimate says how many trajectories run
  concurrently, and refuses only a budget that cannot hold the weights and one whole trajectory.

All figures are GiB (2^30 bytes). :func:`check_fits` refuses a configuration whose phase exceeds the
card, naming the knob to turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from earthrl.envs.errors import ConfigError

GIB = 2**30
ARCH_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
             "intermediate_size", "vocab_size", "tie_word_embeddings")


@dataclass(frozen=True)
class Arch:
    """The shape of a decoder-only transformer (Hugging Face ``config.json`` names)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False

    @classmethod
    def from_mapping(cls, m: dict) -> Arch:
        """From ``config.json`` or ``model.arch`` (``head_dim`` defaults to hidden / heads).

        Raises:
            ConfigError: a missing key (named).
        """
        m = dict(m)
        m.setdefault("head_dim", m.get("hidden_size", 0) // max(int(m.get("num_attention_heads", 1)), 1))
        m.setdefault("num_key_value_heads", m.get("num_attention_heads"))
        missing = [k for k in ARCH_KEYS[:-1] if not m.get(k)]
        if missing:
            raise ConfigError(f"model.arch: missing {', '.join(missing)}; copy them from the model's config.json")
        return cls(**{k: (bool(m[k]) if k == "tie_word_embeddings" else int(m[k])) for k in ARCH_KEYS if k in m})

    @classmethod
    def from_folder(cls, path: Path) -> Arch:
        """From ``path/config.json``."""
        return cls.from_mapping(json.loads((Path(path) / "config.json").read_text()))

    def summary(self) -> str:
        """Hidden size, layers and attention / KV heads, as one phrase (``hidden 2560, 36 layers, 32/8 heads``)."""
        return (f"hidden {self.hidden_size}, {self.num_hidden_layers} layers, "
                f"{self.num_attention_heads}/{self.num_key_value_heads} heads")

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each projection of one layer, by peft module name."""
        h, q, kv, f = self.hidden_size, self.num_attention_heads * self.head_dim, \
            self.num_key_value_heads * self.head_dim, self.intermediate_size
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, f), "up_proj": (h, f), "down_proj": (f, h)}

    def parameters(self) -> int:
        """Parameter count (norms included; the output matrix counted once when tied)."""
        per_layer = sum(i * o for i, o in self.linear_shapes().values()) + 2 * self.hidden_size \
            + 2 * self.head_dim  # q/k norms (Qwen3)
        emb = self.vocab_size * self.hidden_size
        return self.num_hidden_layers * per_layer + emb * (1 if self.tie_word_embeddings else 2) + self.hidden_size

    def lora_parameters(self, rank: int, targets: list[str]) -> int:
        """Adapter parameters: r·(in + out) per targeted projection per layer."""
        shapes = self.linear_shapes()
        unknown = sorted(set(targets) - set(shapes))
        if unknown:
            raise ConfigError(f"model.lora.target_modules: {unknown} are not projections of this model "
                              f"({', '.join(shapes)})")
        return self.num_hidden_layers * sum(rank * sum(shapes[t]) for t in targets)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV-cache bytes per token: 2 (K and V) · layers · kv_heads · head_dim · dtype bytes."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * dtype_bytes


@dataclass(frozen=True)
class Estimate:
    """Per-GPU figures in GiB (module doc)."""

    weights: float
    adapter_states: float
    activations: float
    logits: float
    train_total: float
    vllm_weights: float
    kv_cache: float
    rollout_total: float
    vllm_budget: float
    card: float
    concurrent: int
    rows_per_engine: int

    def lines(self) -> str:
        """The figures as the lines ``earthrl train`` prints."""
        return (f"memory per GPU (GiB, card {self.card:.0f}): train {self.train_total:.1f} = weights {self.weights:.2f}"
                f" + adapter+grads+Adam {self.adapter_states:.2f} + activations {self.activations:.2f}"
                f" + logits {self.logits:.2f}\n"
                f"                 rollout {self.rollout_total:.1f} = vLLM weights {self.vllm_weights:.2f}"
                f" + KV cache {self.kv_cache:.2f} (vLLM budget {self.vllm_budget:.1f}: "
                f"{min(self.concurrent, self.rows_per_engine)} of {self.rows_per_engine} trajectories at once per engine)")


def estimate(arch: Arch, *, gpus: int, card_gib: float, lora_rank: int, lora_targets: list[str],
             micro_batch: int, seq_len: int, gradient_checkpointing: bool, rollout_rows: int, tensor_parallel: int,
             gpu_memory_utilization: float, param_offload: bool = False) -> Estimate:
    """Per-GPU memory of one verl job (module doc).

    Args:
        gpus: GPUs of the job (FSDP shards the base over all of them).
        seq_len: prompt + response tokens of one trajectory.
        rollout_rows: trajectories of one step (``tasks_per_step × group_size``); each vLLM engine
            (``tensor_parallel`` GPUs) serves its share.
        param_offload: FSDP parameters on the CPU between uses (only one layer's weights on the GPU).
    """
    p = arch.parameters()
    weights = (p * 2 / gpus if not param_offload else p * 2 / arch.num_hidden_layers) / GIB
    a = arch.lora_parameters(lora_rank, lora_targets)
    adapter = a * (2 + 4 + 4 + 8) / GIB
    sbh = seq_len * micro_batch * arch.hidden_size
    layers = arch.num_hidden_layers
    act = (2 * sbh * layers + 34 * sbh) if gradient_checkpointing else 34 * sbh * layers
    logits = 2 * seq_len * micro_batch * arch.vocab_size * 2 / GIB  # bf16 logits + the chunked fp32 log-softmax
    train = weights + adapter + act / GIB + logits
    engines = max(gpus // tensor_parallel, 1)
    rows = -(-rollout_rows // engines)
    kv = rows * seq_len * arch.kv_bytes_per_token() / tensor_parallel / GIB
    vllm_w = p * 2 / tensor_parallel / GIB
    budget = gpu_memory_utilization * card_gib
    per_traj = seq_len * arch.kv_bytes_per_token() / tensor_parallel / GIB
    return Estimate(weights=weights, adapter_states=adapter, activations=act / GIB, logits=logits, train_total=train,
                    vllm_weights=vllm_w, kv_cache=kv, rollout_total=vllm_w + kv, vllm_budget=budget, card=card_gib,
                    concurrent=max(int((budget - vllm_w) // per_traj), 0), rows_per_engine=rows)


def check_fits(e: Estimate) -> None:
    """Refuse what cannot fit, naming the knob.

    Raises:
        ConfigError: the train phase exceeds the card, or vLLM's budget cannot hold its weights and
            the KV cache of one whole trajectory.
    """
    if e.train_total > e.card * 0.95:
        raise ConfigError(f"training needs ~{e.train_total:.1f} GiB per GPU of {e.card:.0f}: lower "
                          "cluster.verl.micro_batch_size_per_gpu, set model.gradient_checkpointing=true, "
                          "cluster.verl.param_offload=true, or shorten cluster.verl.max_response_length")
    if e.concurrent < 1:
        raise ConfigError(f"vLLM's {e.vllm_budget:.1f} GiB (cluster.vllm.gpu_memory_utilization × card) cannot hold its "
                          f"weights ({e.vllm_weights:.1f} GiB) and one trajectory's KV cache: raise "
                          "cluster.vllm.gpu_memory_utilization or cluster.verl.tensor_parallel, or lower "
                          "cluster.verl.max_response_length")
    if e.vllm_budget + e.weights + e.adapter_states > e.card * 0.95:
        raise ConfigError(f"vLLM's {e.vllm_budget:.1f} GiB and the trainer's resident {e.weights + e.adapter_states:.1f} GiB "
                          f"exceed the {e.card:.0f} GiB card: lower cluster.vllm.gpu_memory_utilization or set "
                          "cluster.verl.param_offload=true")
