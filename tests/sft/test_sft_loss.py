"""The SFT objective by hand, the cosine schedule, and a few SFT steps of the tiny model lowering the
loss of its own batch."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoTokenizer

from earthrl.algorithms.sft_loss import cosine_lr, sft_loss
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.sft_tokens import encode
from tests.sft.steps_kit import three_steps
from tests.sft.test_sft_labels import _record

LORA = {"rank": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}


def test_sft_loss_is_the_mean_nll_of_supervised_tokens():
    logprobs = torch.tensor([[0.0, -1.0, -2.0, -3.0], [0.0, -0.5, -4.0, 0.0]])
    mask = torch.tensor([[0, 1, 0, 1], [0, 1, 1, 0]])
    assert float(sft_loss(logprobs, mask, 4)) == pytest.approx((1 + 3 + 0.5 + 4) / 4)
    # micro-batches over the global token count add up to the whole batch's loss
    parts = float(sft_loss(logprobs[:1], mask[:1], 4)) + float(sft_loss(logprobs[1:], mask[1:], 4))
    assert parts == pytest.approx(float(sft_loss(logprobs, mask, 4)))
    with pytest.raises(ValueError, match="num_tokens"):
        sft_loss(logprobs, mask, 0)


def test_cosine_schedule_runs_from_lr_to_lr_min():
    lrs = [cosine_lr(k, 10, 5e-6, 5e-7) for k in range(10)]
    assert lrs[0] == pytest.approx(5e-6) and lrs[-1] == pytest.approx(5e-7)
    assert all(a > b for a, b in zip(lrs, lrs[1:]))
    assert lrs[5] == pytest.approx(5e-7 + 0.5 * 4.5e-6 * (1 + math.cos(math.pi * 5 / 9)))
    assert cosine_lr(0, 10, 1e-4, 0.0, warmup=2) == pytest.approx(5e-5)


def test_a_few_sft_steps_lower_the_loss_of_their_batch(tiny_model):
    torch.manual_seed(0)
    codec = ChatCodec(AutoTokenizer.from_pretrained(str(tiny_model)))
    examples, _ = encode([_record()], codec, "masked", ("</tool_call>",))
    before, losses, after = three_steps(tiny_model, examples, LORA, 1)
    assert losses[0] == pytest.approx(before, rel=1e-4)  # the first step's loss is the model before it
    assert all(a > b for a, b in zip(losses, losses[1:] + [after])), (losses, after)  # falls at every step
    assert after < before - 0.1, (before, losses, after)
    assert before > 5.0  # a random model: about log(vocab) nats per token
