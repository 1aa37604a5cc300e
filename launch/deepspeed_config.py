"""DeepSpeed ZeRO for `earthrl sft`: the launcher's process layout and the DeepSpeed JSON config.

Under a multi-process launcher — ``deepspeed --no_local_rank --num_gpus N -m earthrl.launch sft …`` or
``torchrun --nproc_per_node N -m earthrl.launch sft …``, which both set ``WORLD_SIZE``, ``RANK`` and
``LOCAL_RANK`` in every process (PyTorch docs, "torchrun": environment variables; DeepSpeed docs, "Launching
DeepSpeed training") — with ``cluster.deepspeed.zero_stage`` set, `earthrl sft` trains through
``deepspeed.initialize`` with the config :func:`deepspeed_config` builds from the typed settings:

- batch: ``train_batch_size`` = ``sft.global_batch`` (all processes), ``train_micro_batch_size_per_gpu`` =
  ``sft.micro_batch_size``, ``gradient_accumulation_steps`` = global / (micro × processes), which must be a
  whole number (DeepSpeed asserts ``train_batch_size = micro × accumulation × world size``);
- ``gradient_clipping`` = ``sft.grad_clip``; optimizer AdamW with ``sft.lr`` and ``sft.weight_decay`` (torch's
  AdamW, as the one-process run, unless the optimizer is offloaded: then DeepSpeed's CPU Adam); the learning
  rate of each step is still the cosine of :func:`~earthrl.algorithms.sft_loss.cosine_lr`, set on the engine's
  optimizer;
- ``zero_optimization``: ``stage`` and the CPU offloads of ``cluster.deepspeed``;
- precision from ``model.dtype`` as resolved for the device: ``bf16`` for bfloat16, ``fp16`` (with
  DeepSpeed's dynamic loss scaling) for float16, neither for float32 — one setting, never two that could
  disagree.

Key names and meanings: DeepSpeed docs, "DeepSpeed Configuration JSON".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from earthrl.envs.errors import ConfigError


@dataclass(frozen=True)
class Launch:
    """This process's place under a multi-process launcher."""

    world_size: int  # processes of the job (WORLD_SIZE)
    rank: int  # this process among them, 0 .. world_size - 1 (RANK)
    local_rank: int  # this process on its node: its GPU index (LOCAL_RANK)


def launcher_process(environ: Mapping[str, str] = os.environ) -> Launch | None:
    """The launcher's layout from ``WORLD_SIZE`` / ``RANK`` / ``LOCAL_RANK``, or None when the process was not
    started by one (no ``WORLD_SIZE``).

    Raises:
        ConfigError: ``WORLD_SIZE`` is set but a variable is missing or not a whole number in range.
    """
    if "WORLD_SIZE" not in environ:
        return None
    try:
        world, rank, local = (int(environ[k]) for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"))
    except (KeyError, ValueError):
        raise ConfigError("WORLD_SIZE is set but RANK / LOCAL_RANK are missing or not whole numbers: start "
                          "`earthrl sft` with `deepspeed --no_local_rank` or `torchrun`, or unset WORLD_SIZE") from None
    if world < 1 or not 0 <= rank < world or local < 0:
        raise ConfigError(f"WORLD_SIZE={world}, RANK={rank}, LOCAL_RANK={local} do not describe a process of the "
                          "job: start `earthrl sft` with `deepspeed --no_local_rank` or `torchrun`")
    return Launch(world, rank, local)


def deepspeed_config(ds, sft, dtype: str, world_size: int) -> dict:
    """The DeepSpeed JSON config of one `earthrl sft` job (module doc).

    Args:
        ds: the typed ``cluster.deepspeed`` settings (``zero_stage`` 0-3, ``offload_optimizer``, ``offload_param``).
        sft: the typed ``sft`` settings (``global_batch``, ``micro_batch_size``, ``grad_clip``, ``lr``,
            ``weight_decay``).
        dtype: ``model.dtype`` resolved ("bfloat16", "float16" or "float32").
        world_size: processes of the job (:attr:`Launch.world_size`).

    Returns:
        the config as a JSON-ready dict (what ``deepspeed.initialize(config=…)`` takes).

    Raises:
        ConfigError: ``zero_stage`` is null, the global batch does not split into whole micro-batches over the
            processes, or an offload the stage cannot do (one line naming the key and the fix).
    """
    stage = ds.zero_stage
    if stage is None:
        raise ConfigError("cluster.deepspeed.zero_stage is null: set it (0-3), e.g. cluster.deepspeed.zero_stage=2")
    micro, total = int(sft.micro_batch_size), int(sft.global_batch)
    per_step = micro * world_size
    if total % per_step:
        fit = -(-total // per_step) * per_step
        raise ConfigError(f"sft.global_batch={total} does not split into sft.micro_batch_size={micro} x "
                          f"{world_size} processes: set sft.global_batch={fit} (a multiple of {per_step}) or change "
                          "sft.micro_batch_size")
    if ds.offload_param and stage != 3:
        raise ConfigError(f"cluster.deepspeed.offload_param=true needs cluster.deepspeed.zero_stage=3 (it is {stage}): "
                          "set the stage to 3 or offload_param=false")
    if ds.offload_optimizer and stage == 0:
        raise ConfigError("cluster.deepspeed.offload_optimizer=true needs cluster.deepspeed.zero_stage 1, 2 or 3: "
                          "set the stage or offload_optimizer=false")
    zero: dict = {"stage": int(stage)}
    if ds.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if ds.offload_param:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_batch_size": total,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": total // per_step,
        "gradient_clipping": float(sft.grad_clip),
        "optimizer": {"type": "AdamW", "params": {"lr": float(sft.lr), "weight_decay": float(sft.weight_decay),
                                                  "torch_adam": not ds.offload_optimizer}},
        "zero_optimization": zero,
        "bf16": {"enabled": dtype == "bfloat16"},
        "fp16": {"enabled": dtype == "float16"},
        "steps_per_print": 2**31 - 1,  # `earthrl sft` prints its own step lines
    }
