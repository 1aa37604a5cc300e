import math

import pytest
import torch

from earthrl.algorithms.policy_loss import ppo_clip_kl_loss
from earthrl.tests.algorithms.builders import loss_config


def test_on_policy_loss_is_minus_mean_advantage_and_gradient_is_policy_gradient():
    lp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    adv = torch.tensor([[2.0, 2.0, 0.0]])
    mask = torch.tensor([[1, 1, 0]])
    loss, m = ppo_clip_kl_loss(lp, lp.detach(), adv, mask, None, loss_config(kl_coef=0.0))
    assert loss.item() == pytest.approx(-2.0)  # -(2+2)/2 tokens
    loss.backward()
    assert lp.grad.tolist() == [[-1.0, -1.0, 0.0]]  # -A / n_tokens on masked tokens
    assert m["clip_frac"] == 0.0


def test_clipping_hand_computed():
    # ratio e^{0.5}=1.6487 > 1.2 with positive advantage -> clipped to 1.2
    lp = torch.tensor([[0.0]])
    old = torch.tensor([[-0.5]])
    loss, m = ppo_clip_kl_loss(lp, old, torch.tensor([[1.0]]), torch.tensor([[1]]), None, loss_config(kl_coef=0.0))
    assert loss.item() == pytest.approx(-1.2)
    assert m["clip_frac"] == 1.0
    # negative advantage: min picks the unclipped -ratio*|A| -> loss = +1.6487
    loss, _ = ppo_clip_kl_loss(lp, old, torch.tensor([[-1.0]]), torch.tensor([[1]]), None, loss_config(kl_coef=0.0))
    assert loss.item() == pytest.approx(math.exp(0.5))


def test_kl_term_k3_hand_computed():
    lp = torch.tensor([[-1.0]])
    ref = torch.tensor([[-2.0]])
    cfg = loss_config(kl_coef=0.5, kl_estimator="low_var_kl")
    loss, m = ppo_clip_kl_loss(lp, lp, torch.tensor([[0.0]]), torch.tensor([[1]]), ref, cfg)
    k3 = math.exp(-1.0) - (-1.0) - 1.0  # ratio - log ratio - 1 with log ratio = ref - lp
    assert m["kl"] == pytest.approx(k3, rel=1e-6)
    assert loss.item() == pytest.approx(0.5 * k3, rel=1e-6)


def test_all_zero_mask_gives_zero_not_nan():
    lp = torch.zeros(2, 3, requires_grad=True)
    loss, _ = ppo_clip_kl_loss(lp, lp.detach(), torch.ones(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), loss_config())
    assert loss.item() == 0.0 and not torch.isnan(loss)
    loss.backward()
    assert torch.all(lp.grad == 0)


def test_aggregation_mode_changes_loss_with_uneven_lengths():
    lp = torch.zeros(2, 3)
    adv = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    tm, _ = ppo_clip_kl_loss(lp, lp, adv, mask, None, loss_config(kl_coef=0.0, loss_agg_mode="token-mean"))
    sm, _ = ppo_clip_kl_loss(lp, lp, adv, mask, None, loss_config(kl_coef=0.0, loss_agg_mode="seq-mean-token-mean"))
    assert tm.item() == pytest.approx(-(3 + 4) / 4)
    assert sm.item() == pytest.approx(-(1 + 4) / 2)


def test_micro_batches_with_global_token_count_equal_full_batch():
    torch.manual_seed(0)
    lp = torch.randn(4, 5)
    old = lp + 0.1 * torch.randn(4, 5)
    adv = torch.randn(4, 5)
    mask = (torch.rand(4, 5) > 0.3).int()
    cfg = loss_config(kl_coef=0.0)
    full, _ = ppo_clip_kl_loss(lp, old, adv, mask, None, cfg)
    n = int(mask.sum())
    parts = [ppo_clip_kl_loss(lp[i:i + 2], old[i:i + 2], adv[i:i + 2], mask[i:i + 2], None, cfg, batch_num_tokens=n)[0] for i in (0, 2)]
    assert (parts[0] + parts[1]).item() == pytest.approx(full.item(), rel=1e-6)


def test_shape_mismatch_and_missing_ref():
    with pytest.raises(ValueError, match="advantages"):
        ppo_clip_kl_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 3), torch.ones(1, 2), None, loss_config())
    with pytest.raises(ValueError, match="ref_logprobs"):
        ppo_clip_kl_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), None, loss_config(kl_coef=0.1))
