"""The SFT objective and its update: token-mean negative log-likelihood of the supervised tokens.

:func:`sft_loss` is pure (tensors in, loss out). :func:`sft_update` takes one optimizer step over a
global batch split into micro-batches, with the loss of each micro-batch divided by the whole global
batch's supervised-token count, so that micro-batching does not change the gradient (as the GRPO
learner does with ``batch_num_tokens``); :func:`sft_update_deepspeed` is the same step as one process of
a DeepSpeed job. :func:`cosine_lr` is the schedule of RS-Claw-Evolution's SFT
(lr 5e-6 cosine-decayed to 5e-7).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from earthrl.models.policy import pack_batch


def sft_loss(logprobs: torch.Tensor, label_mask: torch.Tensor, num_tokens: int | float) -> torch.Tensor:
    """−Σ log π(x_t | x_<t) over supervised tokens / ``num_tokens``.

    Args:
        logprobs: (B, T) float32 log-probabilities of the sequence's own tokens
            (:meth:`earthrl.models.policy.Policy.token_logprobs`; 0 off the mask).
        label_mask: (B, T), 1 on supervised tokens (:func:`earthrl.rollout.sft_tokens.label_mask`).
        num_tokens: supervised tokens of the whole global batch (≥ the mask's sum).

    Raises:
        ValueError: shapes differ, or ``num_tokens`` ≤ 0.
    """
    if logprobs.shape != label_mask.shape:
        raise ValueError(f"logprobs {tuple(logprobs.shape)} and label_mask {tuple(label_mask.shape)} differ")
    if num_tokens <= 0:
        raise ValueError(f"num_tokens={num_tokens}: a batch needs at least one supervised token")
    return -(logprobs * label_mask.to(logprobs.dtype)).sum() / float(num_tokens)


def cosine_lr(step: int, total: int, lr: float, lr_min: float, warmup: int = 0) -> float:
    """Learning rate of optimizer step ``step`` (0-based) of ``total``: linear warm-up over ``warmup``
    steps, then cosine from ``lr`` (first step after warm-up) to ``lr_min`` (last step)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    span = max(total - warmup - 1, 1)
    progress = min(max(step - warmup, 0) / span, 1.0)
    return lr_min + 0.5 * (lr - lr_min) * (1.0 + math.cos(math.pi * progress))


def micro_losses(policy, examples: Sequence, micro_batch_size: int, num_tokens: int | float):
    """The :func:`sft_loss` of each micro-batch of ``examples`` in order, each divided by ``num_tokens`` (the
    global batch's supervised tokens), so that their sum is the global batch's mean NLL per token.

    Args:
        policy: :class:`~earthrl.models.policy.Policy`.
        examples: :class:`~earthrl.rollout.sft_tokens.SFTExample` (``input_ids``, ``label_mask``).
        micro_batch_size: sequences per forward.

    Yields:
        scalar float32 losses with their graph (for ``backward``).
    """
    for s in range(0, len(examples), micro_batch_size):
        chunk = examples[s:s + micro_batch_size]
        mb = pack_batch([e.input_ids for e in chunk], [e.label_mask for e in chunk])
        logprobs = policy.token_logprobs(mb["input_ids"], mb["attention_mask"], mb["response_mask"])
        yield sft_loss(logprobs, mb["response_mask"], num_tokens)


def sft_update(policy, optimizer: torch.optim.Optimizer, examples: Sequence, micro_batch_size: int,
               grad_clip: float, lr: float | None = None) -> dict[str, float]:
    """One optimizer step of :func:`sft_loss` over ``examples`` (the global batch).

    Args:
        policy: :class:`~earthrl.models.policy.Policy` (``token_logprobs``, ``trainable_parameters``, ``model``).
        examples: :class:`~earthrl.rollout.sft_tokens.SFTExample` (``input_ids``, ``label_mask``).
        micro_batch_size: sequences per forward/backward.
        grad_clip: max global gradient norm.
        lr: learning rate of this step (set on every parameter group), or None to keep the optimizer's.

    Returns:
        ``{"loss", "grad_norm", "tokens", "lr"}``: the global batch's mean NLL per supervised token
        (before the step), the gradient norm before clipping, the supervised tokens, the rate used.
    """
    num_tokens = sum(sum(e.label_mask) for e in examples)
    if lr is not None:
        for group in optimizer.param_groups:
            group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    policy.model.train()
    total = 0.0
    for loss in micro_losses(policy, examples, micro_batch_size, num_tokens):
        loss.backward()
        total += float(loss.detach())
    params = policy.trainable_parameters()
    grad_norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    optimizer.step()
    policy.model.eval()
    return {"loss": total, "grad_norm": float(grad_norm), "tokens": float(num_tokens),
            "lr": float(optimizer.param_groups[0]["lr"])}


def sft_update_deepspeed(policy, engine, examples: Sequence, micro_batch_size: int, num_tokens: int | float,
                         world_size: int, lr: float | None = None) -> dict[str, float]:
    """This process's share of one optimizer step of :func:`sft_loss` through a DeepSpeed engine, with the
    same gradient as :func:`sft_update` over the whole global batch in one process.

    DeepSpeed divides each micro-batch's loss by its gradient accumulation steps (``backward(...,
    scale_wrt_gas=True)``, the default) and averages gradients over the processes (``gradient_allreduce_op``
    mean); here each loss is already divided by the global batch's tokens, so it is passed multiplied by the
    process count with ``scale_wrt_gas=False``: the reduced gradient is then the sum over every micro-batch of
    every process, :func:`sft_update`'s. ``engine.step()`` after each micro-batch steps the optimizer (gradient
    clipping by the config's ``gradient_clipping``) at the last one only (DeepSpeed docs, "Training:
    gradient accumulation").

    Args:
        policy: :class:`~earthrl.models.policy.Policy` whose ``model`` is the engine's module.
        engine: the ``deepspeed.DeepSpeedEngine`` (``backward``, ``step``, ``optimizer``,
            ``get_global_grad_norm``).
        examples: this process's examples of the global batch: ``gradient_accumulation_steps ×
            micro_batch_size`` of them.
        micro_batch_size: sequences per forward/backward (the config's ``train_micro_batch_size_per_gpu``).
        num_tokens: supervised tokens of the whole global batch, every process's examples.
        world_size: processes of the job.
        lr: learning rate of this step (set on the engine optimizer's parameter groups), or None.

    Returns:
        ``{"loss", "grad_norm", "tokens", "lr"}``: this process's part of the global mean NLL per supervised
        token (the processes' parts sum to :func:`sft_update`'s), the gradient norm before clipping (DeepSpeed's,
        over all processes), the global batch's supervised tokens, the rate used.
    """
    if lr is not None:
        for group in engine.optimizer.param_groups:
            group["lr"] = lr
    policy.model.train()
    total = 0.0
    for loss in micro_losses(policy, examples, micro_batch_size, num_tokens):
        engine.backward(loss * world_size, scale_wrt_gas=False)
        engine.step()
        total += float(loss.detach())
    policy.model.eval()
    norm = engine.get_global_grad_norm()
    return {"loss": total, "grad_norm": float(norm) if norm is not None else float("nan"), "tokens": float(num_tokens),
            "lr": float(engine.optimizer.param_groups[0]["lr"])}


@torch.no_grad()
def sft_eval_loss(policy, examples: Sequence, micro_batch_size: int) -> float:
    """Mean NLL per supervised token of ``examples`` under ``policy`` (no gradient)."""
    num_tokens = sum(sum(e.label_mask) for e in examples)
    return sum(float(loss) for loss in micro_losses(policy, examples, micro_batch_size, num_tokens))
