"""Rollout/learner mismatch correction: weights, truncation and sequence masks against hand computations, the
identity when engine and learner agree, the same result as verl's own helper through the mapped keys, and
the weights on the policy-gradient term only."""

import math

import pytest
import torch

from earthrl.algorithms.mixed_loss import mixed_role_loss
from earthrl.algorithms.policy_loss import ppo_clip_kl_loss
from earthrl.algorithms.rollout_correction import RolloutCorrection, rollout_correction
from earthrl.tests.algorithms.builders import loss_config


def _cfg(weights="token", cap=2.0, mask="none", lower=0.5, upper=2.0) -> RolloutCorrection:
    return RolloutCorrection(weights=weights, cap=cap, mask=mask, mask_lower=lower, mask_upper=upper)


# log r = old − rollout per token: row 0 [0.5, −1.0, 0.0] (Σ −0.5), row 1 [0.4, 0.5] (Σ 0.9), row 2 [−0.8]
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.6, -1.5, 0.0], [-1.8, 0.0, 0.0]])
ROLLOUT = torch.tensor([[-1.5, -1.0, -0.5], [-1.0, -2.0, -7.0], [-1.0, -3.0, 0.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]])


def test_token_weights_are_truncated_at_the_cap_by_hand():
    c = rollout_correction(OLD, ROLLOUT, MASK, _cfg("token", cap=1.5))
    # min(e^0.5 = 1.6487, 1.5), e^-1 = 0.367879, e^0 = 1 | e^0.4 = 1.491825, min(e^0.5, 1.5) | e^-0.8 = 0.449329
    want = [[1.5, 0.367879, 1.0], [1.491825, 1.5, 0.0], [0.449329, 0.0, 0.0]]
    torch.testing.assert_close(c.weights, torch.tensor(want), rtol=0, atol=1e-6)
    assert c.weights.dtype == torch.float32 and not c.weights.requires_grad
    assert torch.equal(c.response_mask, MASK)  # no mask: nothing dropped
    m = c.stats.metrics()
    assert m["is_truncated_frac"] == pytest.approx(2 / 6)  # 2 of the 6 response tokens were cut
    assert m["is_weight_mean"] == pytest.approx((1.5 + 0.367879 + 1.0 + 1.491825 + 1.5 + 0.449329) / 6, abs=1e-6)
    assert m["logprob_diff"] == pytest.approx((0.5 + 1.0 + 0.0 + 0.4 + 0.5 + 0.8) / 6)  # the padded −7 never counts
    assert m["masked_seq_frac"] == 0.0


def test_sequence_weights_are_the_truncated_product_of_the_token_ratios():
    c = rollout_correction(OLD, ROLLOUT, MASK, _cfg("sequence", cap=2.0))
    # e^-0.5 = 0.606531 on row 0's 3 tokens; min(e^0.9 = 2.459603, 2) on row 1's 2; e^-0.8 = 0.449329 on row 2's 1
    want = [[0.606531] * 3, [2.0, 2.0, 0.0], [0.449329, 0.0, 0.0]]
    torch.testing.assert_close(c.weights, torch.tensor(want), rtol=0, atol=1e-6)
    assert c.stats.metrics()["is_truncated_frac"] == pytest.approx(1 / 3)  # one sequence of three was cut


@pytest.mark.parametrize("mask, kept", [("sequence", [True, False, False]),  # ∏ r: 0.6065 in, 2.4596 and 0.4493 out
                                        ("geometric", [True, True, False])])  # (∏ r)^(1/T): 0.8465, 1.5683 in; 0.4493 out
def test_sequences_whose_ratio_leaves_the_band_are_dropped_by_hand(mask, kept):
    c = rollout_correction(OLD, ROLLOUT, MASK, _cfg("token", mask=mask, lower=0.5, upper=1.6))
    keep = torch.tensor(kept)[:, None]
    assert torch.equal(c.response_mask, MASK * keep) and c.response_mask.dtype == MASK.dtype
    assert torch.equal(c.weights == 0, (MASK * keep) == 0)  # a dropped sequence keeps no weight
    assert c.stats.metrics()["masked_seq_frac"] == pytest.approx(kept.count(False) / 3)


def test_weights_none_and_no_correction_leave_the_loss_alone():
    none = rollout_correction(OLD, ROLLOUT, MASK, _cfg("none", mask="sequence", lower=0.5, upper=1.6))
    assert none.weights is None and none.response_mask[1].sum() == 0  # the band still drops rows 1 and 2
    off = rollout_correction(OLD, ROLLOUT, MASK, None)
    assert off.weights is None and off.response_mask is MASK
    assert off.stats.metrics() == pytest.approx({"is_weight_mean": 1.0, "is_truncated_frac": 0.0,
                                                 "masked_seq_frac": 0.0, "logprob_diff": 3.2 / 6})


def test_identity_when_engine_and_learner_agree():
    torch.manual_seed(0)
    lp = (-3 * torch.rand(4, 7)).requires_grad_()
    old = lp.detach() - 0.1 * torch.rand(4, 7)  # a later PPO pass: ratio ≠ 1
    mask = (torch.rand(4, 7) > 0.3).long()
    adv, ref = torch.randn(4, 7), lp.detach() - 0.2
    c = rollout_correction(old, old.clone(), mask, _cfg("token", mask="geometric", lower=0.999, upper=1.001))
    assert torch.equal(c.weights, mask.float()) and torch.equal(c.response_mask, mask)  # w = e^0 = 1 exactly
    cfg = loss_config(kl_coef=0.3)
    plain, pm = ppo_clip_kl_loss(lp, old, adv, mask, ref, cfg)
    weighted, wm = ppo_clip_kl_loss(lp, old, adv, c.response_mask, ref, cfg, is_weights=c.weights)
    assert weighted.item() == plain.item() and wm == pm
    role = (torch.rand(4, 7) > 0.5).long()
    mixed, _ = mixed_role_loss(logprobs=lp, old_logprobs=old, advantages=adv, response_mask=mask, cfg=cfg,
                               role_mask=role, ref_logprobs=ref)
    mixed_w, _ = mixed_role_loss(logprobs=lp, old_logprobs=old, advantages=adv, response_mask=mask, cfg=cfg,
                                 role_mask=role, ref_logprobs=ref, is_weights=c.weights)
    assert mixed_w.item() == mixed.item()


def test_weights_multiply_the_policy_gradient_term_only():
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv, mask, w = torch.tensor([[1.0, -2.0]]), torch.tensor([[1, 1]]), torch.tensor([[0.5, 2.0]])
    ref = torch.tensor([[-2.0, -1.0]])
    cfg = loss_config(kl_coef=0.5, kl_estimator="low_var_kl")
    loss, m = ppo_clip_kl_loss(lp, lp.detach(), adv, mask, ref, cfg, is_weights=w)
    _, plain = ppo_clip_kl_loss(lp, lp.detach(), adv, mask, ref, cfg)
    k3 = ((math.exp(-1.0) + 1.0 - 1.0) + (math.exp(1.0) - 1.0 - 1.0)) / 2  # e^(ref−lp) − (ref−lp) − 1, token mean
    assert m["pg_loss"] == pytest.approx((-1.0 * 0.5 + 2.0 * 2.0) / 2)  # −w·Â at ratio 1: (−0.5 + 4) / 2 tokens
    assert m["kl"] == plain["kl"] == pytest.approx(k3, rel=1e-6)  # the KL term does not see the weights
    assert loss.item() == pytest.approx(1.75 + 0.5 * k3, rel=1e-6)
    loss.backward()  # d/dlp: −w·Â/2 + β·(1 − e^(ref−lp))/2
    assert lp.grad[0].tolist() == pytest.approx([-0.25 + 0.25 * (1 - math.exp(-1.0)),
                                                 2.0 + 0.25 * (1 - math.exp(1.0))], rel=1e-6)


@pytest.mark.parametrize("weights", ["token", "sequence", "none"])
@pytest.mark.parametrize("mask, band", [("none", (0.5, 2.0)), ("sequence", (0.8, 1.1)), ("geometric", (0.95, 1.3))])
def test_same_weights_and_mask_as_verls_helper_through_the_mapped_keys(weights, mask, band):
    """verl's ``compute_rollout_correction_and_rejection_mask`` run with :meth:`RolloutCorrection.verl_keys`
    keeps the same sequences and gives the same weights and metrics (asymmetric bands: verl's k1 bounds apply
    to −log r)."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    torch.manual_seed(0)
    old = -3 * torch.rand(64, 12)
    rollout = old + 0.15 * torch.randn(64, 12)
    mask_t = (torch.rand(64, 12) > 0.2).long()
    cfg = _cfg(weights, cap=1.5, mask=mask, lower=band[0], upper=band[1])
    ours = rollout_correction(old, rollout, mask_t, cfg)
    keys = cfg.verl_keys()
    proto, verl_mask, verl_m = compute_rollout_correction_and_rejection_mask(
        old, rollout, mask_t, rollout_is=keys["rollout_is"], rollout_is_threshold=keys["rollout_is_threshold"],
        rollout_rs=keys["rollout_rs"], rollout_rs_threshold=keys["rollout_rs_threshold"])
    assert torch.equal(verl_mask, ours.response_mask)
    if mask != "none":
        assert 0 < ours.stats.masked < 64
        assert ours.stats.metrics()["masked_seq_frac"] == pytest.approx(verl_m["rollout_corr/rollout_rs_seq_masked_fraction"])
    if weights == "none":
        assert proto is None and ours.weights is None
        return
    kept = ours.response_mask.bool()
    torch.testing.assert_close(ours.weights[kept], proto.batch["rollout_is_weights"][kept], rtol=1e-6, atol=0)
    m = ours.stats.metrics()
    assert m["is_weight_mean"] == pytest.approx(verl_m["rollout_corr/rollout_is_mean"], rel=1e-6)
    assert m["is_truncated_frac"] == pytest.approx(verl_m["rollout_corr/rollout_is_ratio_fraction_high"], rel=1e-6)
    assert m["is_truncated_frac"] > 0


@pytest.mark.parametrize("kwargs, message", [
    ({"weights": "tok"}, "algorithm.rollout_correction.weights=tok must be one of token, sequence, none"),
    ({"cap": 0.5}, r"algorithm.rollout_correction.cap=0.5 must be a number of at least 1 \(the weights are cut to it\)"),
    ({"mask": "seq"}, "algorithm.rollout_correction.mask=seq must be one of none, sequence, geometric"),
    ({"lower": 0.0}, r"algorithm.rollout_correction.mask_lower=0.0 must be in \(0, 1\]"),
    ({"upper": 0.9}, "algorithm.rollout_correction.mask_upper=0.9 must be a number of at least 1")])
def test_bad_settings_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        _cfg(**kwargs)


def test_from_mapping_names_unknown_and_missing_keys():
    good = {"weights": "token", "cap": 2.0, "mask": "none", "mask_lower": 0.5, "mask_upper": 2.0}
    assert RolloutCorrection.from_mapping(good) == _cfg()
    assert RolloutCorrection.from_mapping(None) is None
    with pytest.raises(ValueError, match=r"^algorithm.rollout_correction has unknown key\(s\) \['threshold'\]"):
        RolloutCorrection.from_mapping({**good, "threshold": 2})
    with pytest.raises(ValueError, match=r"^algorithm.rollout_correction lacks \['cap'\]"):
        RolloutCorrection.from_mapping({k: v for k, v in good.items() if k != "cap"})
