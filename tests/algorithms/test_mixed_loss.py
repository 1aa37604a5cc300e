import math

import pytest
import torch

from earthrl.algorithms.mixed_loss import mixed_role_loss, role_token_masks
from earthrl.algorithms.registry import POLICY_LOSSES
from earthrl.algorithms.spec import LOSS_INPUTS
from earthrl.tests.algorithms.builders import loss_config, traj, turn


def _args(lp, adv, mask, role, name="mixed_role", **cfg):
    """Named arguments of loss ``name``: the common ones plus the extra inputs the spec lists for it."""
    extra = {k: role for k in LOSS_INPUTS.get(name, ())}
    return dict(logprobs=lp, old_logprobs=lp.detach(), advantages=adv, response_mask=mask, **extra,
                ref_logprobs=torch.zeros_like(lp), cfg=loss_config(**cfg))


def test_mixed_loss_hand_computed():
    lp = torch.zeros(1, 4)
    adv = torch.tensor([[2.0, 2.0, 4.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    role = torch.tensor([[1, 1, 0, 0]])
    # on-policy ratio 1: L = λ·(−mean A_manager) + (1−λ)·(−mean A_specialist)
    loss, m = mixed_role_loss(**_args(lp, adv, mask, role, kl_coef=0.0))
    assert loss.item() == pytest.approx(-(0.5 * 2 + 0.5 * 4))
    assert m["manager/pg_loss"] == pytest.approx(-2.0) and m["specialist/pg_loss"] == pytest.approx(-4.0)
    loss, _ = mixed_role_loss(**_args(lp, adv, mask, role, kl_coef=0.0, manager_weight=0.25))
    assert loss.item() == pytest.approx(-(0.25 * 2 + 0.75 * 4))


def test_mixed_loss_kl_term_per_role():
    lp = torch.tensor([[-1.0, -1.0]])
    args = _args(lp, torch.zeros(1, 2), torch.ones(1, 2), torch.tensor([[1, 0]]), kl_coef=0.5)
    args["ref_logprobs"] = torch.tensor([[-2.0, -1.0]])
    loss, _ = mixed_role_loss(**args)
    k3 = math.exp(-1.0) - (-1.0) - 1.0  # manager token only; the specialist's KL is 0
    assert loss.item() == pytest.approx(0.5 * 0.5 * k3, rel=1e-6)


def test_all_zero_mask_gives_zero_not_nan_for_every_loss():
    for name in POLICY_LOSSES.names():
        lp = torch.zeros(2, 3, requires_grad=True)
        loss, _ = POLICY_LOSSES.lookup(name)(**_args(lp, torch.ones(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), name))
        assert loss.item() == 0.0 and not torch.isnan(loss), name
        loss.backward()
        assert torch.all(lp.grad == 0), name


def test_every_registered_loss_is_finite_with_named_arguments():
    torch.manual_seed(0)
    assert {"ppo_clip_kl", "mixed_role"} <= set(POLICY_LOSSES.names())
    for name in POLICY_LOSSES.names():
        lp = torch.randn(3, 5, requires_grad=True)
        args = _args(lp, torch.randn(3, 5), (torch.rand(3, 5) > 0.3).int(), (torch.rand(3, 5) > 0.5).int(), name)
        args["old_logprobs"] = lp.detach() + 0.1 * torch.randn(3, 5)
        args["ref_logprobs"] = lp.detach() - 0.2
        loss, metrics = POLICY_LOSSES.lookup(name)(**args, batch_num_tokens=None, global_batch_size=3)
        assert torch.isfinite(loss), name
        assert all(math.isfinite(v) for v in metrics.values()), name
        loss.backward()
        assert torch.isfinite(lp.grad).all(), name


def test_aggregation_mode_changes_mixed_loss_with_uneven_lengths():
    lp = torch.zeros(2, 3)
    adv = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    role = torch.ones(2, 3)
    tm, _ = mixed_role_loss(**_args(lp, adv, mask, role, kl_coef=0.0, loss_agg_mode="token-mean"))
    sm, _ = mixed_role_loss(**_args(lp, adv, mask, role, kl_coef=0.0, loss_agg_mode="seq-mean-token-mean"))
    assert tm.item() == pytest.approx(0.5 * -(3 + 4) / 4)
    assert sm.item() == pytest.approx(0.5 * -(1 + 4) / 2)


def test_role_masks_follow_turn_spans_and_role_mask_is_required():
    t = traj([turn(role="manager"), turn(role="specialist", n_obs=0)])
    assert role_token_masks([t])[0].tolist() == [0, 0, 1, 1, 0, 0, 0]
    assert role_token_masks([t], "specialist")[0].tolist() == [0, 0, 0, 0, 0, 1, 1]
    with pytest.raises(ValueError, match="role_mask"):
        mixed_role_loss(**_args(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), None))
