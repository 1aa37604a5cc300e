"""One process of a DeepSpeed `earthrl sft` job: the process group, the engine, and what the processes share.

:class:`DeepSpeedJob` wraps the calls the SFT recipe makes when it runs under a multi-process launcher with
``cluster.deepspeed.zero_stage`` set (:mod:`earthrl.launch.deepspeed_config`): ``deepspeed.init_distributed``
(NCCL on CUDA, gloo on the CPU), ``deepspeed.initialize`` with the JSON config, each process's share of a
global batch, sums and barriers over the processes, and ZeRO-3's gathering of the adapter for the checkpoint
(``deepspeed.zero.GatheredParameters``). DeepSpeed docs: "Getting Started", "ZeRO" and "Model Checkpointing".
"""

from __future__ import annotations

import contextlib
import os

import torch

from earthrl.launch.deepspeed_config import Launch


class DeepSpeedJob:
    """This process's part of a DeepSpeed job.

    Args:
        launch: the launcher's layout (:func:`~earthrl.launch.deepspeed_config.launcher_process`).
        config: the DeepSpeed JSON config (:func:`~earthrl.launch.deepspeed_config.deepspeed_config`).
        device: "cpu" or "cuda" (``cluster.device`` resolved): on ``cuda`` this process uses GPU
            ``launch.local_rank``; on ``cpu`` DeepSpeed's CPU accelerator (``DS_ACCELERATOR=cpu``).
    """

    def __init__(self, launch: Launch, config: dict, device: str) -> None:
        self.launch, self.config, self.device = launch, config, device

    @property
    def stage(self) -> int:
        """The ZeRO stage of :attr:`config`."""
        return int(self.config["zero_optimization"]["stage"])

    def start(self) -> None:
        """Join the process group (every process of the job must call it): pick this process's GPU, then
        ``deepspeed.init_distributed`` (the rendezvous address comes from the launcher's ``MASTER_ADDR`` and
        ``MASTER_PORT``)."""
        if self.device == "cuda":
            torch.cuda.set_device(self.launch.local_rank)
        else:
            os.environ.setdefault("DS_ACCELERATOR", "cpu")  # read when deepspeed is first imported
        import deepspeed  # lazy: a slow import only DeepSpeed jobs need, after DS_ACCELERATOR is set

        deepspeed.init_distributed(dist_backend="nccl" if self.device == "cuda" else "gloo")

    def wrap(self, policy):
        """``deepspeed.initialize`` around ``policy.model`` with its trainable (LoRA) parameters; returns the
        engine (its ``optimizer`` is DeepSpeed's, built from the config)."""
        import deepspeed  # lazy: see start()

        engine, _, _, _ = deepspeed.initialize(model=policy.model, model_parameters=policy.trainable_parameters(),
                                               config=self.config)
        return engine

    def share(self, batch: list) -> list:
        """This process's examples of a global batch: every ``world_size``-th from ``rank`` (the batch has
        ``train_batch_size`` examples, so each process gets ``gradient_accumulation_steps`` micro-batches)."""
        return batch[self.launch.rank::self.launch.world_size]

    def sum(self, value: float) -> float:
        """``value`` summed over the processes (every process must call it)."""
        t = torch.tensor([float(value)], dtype=torch.float64,
                         device=torch.device("cuda", self.launch.local_rank) if self.device == "cuda" else "cpu")
        torch.distributed.all_reduce(t)
        return float(t.item())

    def barrier(self) -> None:
        """Wait until every process reaches this point."""
        torch.distributed.barrier()

    def full_adapter(self, policy):
        """A context in which ``policy``'s trainable parameters are whole on every process (ZeRO-3 partitions
        them; the other stages keep them whole): what a checkpoint of the adapter reads. Every process must
        enter it."""
        if self.stage != 3:
            return contextlib.nullcontext()
        import deepspeed  # lazy: see start()

        return deepspeed.zero.GatheredParameters(policy.trainable_parameters(), modifier_rank=None)

    def close(self) -> None:
        """Leave the process group (idempotent)."""
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
