"""Three SFT steps of a fresh LoRA policy on one batch: what "a few steps lower the loss" tests share."""

import torch

from earthrl.algorithms.sft_loss import sft_eval_loss, sft_update
from earthrl.models.policy import Policy


def three_steps(model_dir, examples: list, lora: dict, micro: int) -> tuple[float, list[float], float]:
    """``(loss before, the three steps' losses, loss after)`` of AdamW at lr 1e-2 on ``examples`` (float32)."""
    policy = Policy(str(model_dir), lora, dtype="float32", gradient_checkpointing=False)
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-2)
    before = sft_eval_loss(policy, examples, micro)
    losses = [sft_update(policy, opt, examples, micro, 1.0)["loss"] for _ in range(3)]
    return before, losses, sft_eval_loss(policy, examples, micro)
