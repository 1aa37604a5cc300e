"""``cluster``: the machines and the rollout engine (conf/cluster/<name>.yaml picks one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from earthrl.launch.config_schema.rules import setting
from earthrl.models.device import DEVICES
from earthrl.rollout.vllm_env import LORA_MODES


@dataclass
class HFConfig:
    """Options of the transformers-generate engine (rollout/hf_engine.py)."""

    min_shared_prefix: int = setting(64, "prompts sharing this many leading tokens reuse one KV cache",
                                     range=(0, None))


@dataclass
class VllmConfig:
    """Options of the vLLM engine, in its own process (rollout/vllm_engine.py)."""

    python: str = setting("auto", "auto (.venv-vllm where `make vllm` built it, or this Python) or the path of "
                                  "a Python that imports vllm")
    max_model_len: int = setting(8192, "prompt + response tokens of one sequence", range=(256, None))
    cpu_memory_gib: Any = setting("auto", "CPU: the engine's host memory (weights + working set + KV cache), GiB; "
                                          "auto: derived from the model, dtype, batch and max_model_len",
                                  auto=True, range=(0.5, None))
    gpu_memory_utilization: float = setting(0.5, "GPU: share of each card vLLM keeps for weights + KV cache",
                                            range=(0, 1), lo_open=True)
    enforce_eager: bool = setting(False, "no CUDA graph capture (faster start, slower generation)")
    lora_mode: str = setting("auto", "how the learner's LoRA adapter is served: merged (into the weights after each "
                                     "push: the bare model's speed), requests (vLLM LoRA requests: adapter-only), "
                                     "auto (merged on CPU, where vLLM's LoRA kernels are slow; requests on GPU)",
                             choices=LORA_MODES)
    continuous_batching: bool = setting(True, "send each episode's turn to the engine as soon as it is ready "
                                              "(vLLM batches the calls in flight); false: one lock-step batch of "
                                              "all live episodes per turn, whose samples repeat run to run")


@dataclass
class VerlConfig:
    """backend=verl only (launch/verl_config.py maps these onto verl's config)."""

    nnodes: int = setting(1, "nodes", range=(1, None))
    n_gpus_per_node: int = setting(MISSING, "GPUs per node", range=(1, None))
    gpu_memory_gib: float = setting(MISSING, "memory of one card, GiB (the estimate printed before start)",
                                    range=(0, None), lo_open=True)
    tensor_parallel: int = setting(1, "GPUs per vLLM engine", range=(1, None))
    micro_batch_size_per_gpu: int = setting(1, "sequences per forward/backward on one GPU", range=(1, None))
    param_offload: bool = setting(False, "FSDP: parameters offloaded to the CPU")
    optimizer_offload: bool = setting(False, "FSDP: optimizer state offloaded to the CPU")
    max_prompt_length: int = setting(4096, "prompt tokens", range=(16, None))
    max_response_length: int = setting(4096, "all turns of a trajectory: generated + observation tokens",
                                       range=(16, None))


@dataclass
class DeepSpeedConfig:
    """DeepSpeed ZeRO for `earthrl sft` under a multi-process launcher (launch/deepspeed_config.py writes the
    JSON; batch sizes come from sft.global_batch / sft.micro_batch_size, precision from model.dtype)."""

    zero_stage: int | None = setting(None, "ZeRO stage (0-3) when `earthrl sft` runs under `deepspeed` or "
                                           "`torchrun`; null: no DeepSpeed", range=(0, 3))
    offload_optimizer: bool = setting(False, "ZeRO 1-3: optimizer state and step on the CPU (DeepSpeed's CPU "
                                             "Adam, compiled at first use)")
    offload_param: bool = setting(False, "ZeRO-3 only: parameters on the CPU between uses")


@dataclass
class ClusterConfig:
    """Schema of conf/cluster/*.yaml."""

    name: str = setting(MISSING, "the cluster preset's name")
    engine: str = setting("auto", "rollout engine: auto (vllm where `make vllm` built .venv-vllm or vLLM imports, "
                                  "else hf) or a name in rollout.engines.ENGINES")
    device: str = setting("auto", "where the learner and the rollout engine compute: auto (cuda where "
                                  "torch.cuda.is_available(), else cpu), cpu or cuda (models/device.py)",
                          choices=DEVICES)
    num_cpus: int = setting(2, "logical CPUs given to Ray (env actors, reward workers)", range=(1, None))
    torch_threads: int = setting(2, "intra-op threads of the engine and of the learner", range=(1, None))
    object_store_memory_mb: int = setting(1024, "Ray object store, MiB (75: Ray's smallest)", range=(75, None))
    hf: HFConfig = setting(factory=HFConfig, doc="options of engine hf")
    vllm: VllmConfig = setting(factory=VllmConfig, doc="options of engine vllm")
    deepspeed: DeepSpeedConfig = setting(factory=DeepSpeedConfig, doc="DeepSpeed ZeRO of `earthrl sft` on GPUs")
    verl: VerlConfig | None = setting(None, "backend=verl: the GPU job (null: the cluster cannot run it)")
