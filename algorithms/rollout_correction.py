"""Rollout/learner mismatch correction: truncated importance weights and sequence masking (pure functions).

The rollout engine (vLLM, or EarthRL's HF engine) samples with its own kernels and precision, the learner
scores the same tokens with transformers: π_rollout ≠ π_old even before any update, which makes on-policy RL
silently off-policy (Yao et al. 2025). The correction weighs each response token's policy-gradient term by

    w_t = min(π_old(y_t) / π_rollout(y_t), C) = min(exp(old_logprobs − rollout_logprobs), C)      (TIS, C = 2)

or, at the sequence level, by one weight per sequence, min(∏_t π_old/π_rollout, C); and it can drop whole
sequences whose ratio (the product over the sequence, or its geometric mean) leaves a band [lower, upper]
(rejection sampling). The weights are detached: they change the measure, not the objective.

The semantics follow verl's ``algorithm.rollout_correction`` (verl 0.9.1 ``trainer/config/algorithm.py``
``RolloutCorrectionConfig`` and ``trainer/ppo/rollout_corr_helper.py``, decoupled mode: π_old is the
learner's policy before the update): ``weights`` is verl's ``rollout_is`` (token | sequence), ``cap`` its
``rollout_is_threshold``, ``mask`` its ``rollout_rs`` ``seq_sum_k1`` (product) / ``seq_mean_k1`` (geometric
mean) with ``rollout_rs_threshold``; :meth:`RolloutCorrection.verl_keys` gives verl's keys. As in verl, the
log-ratios are clamped to ±20 before ``exp``.

Sources: F. Yao, L. Liu, D. Zhang, C. Dong, J. Shang, J. Gao, "Your Efficient RL Framework Secretly Brings You
Off-Policy RL Training" (2025, https://fengyao.notion.site/off-policy-rl) for TIS; J. Liu, Y. Li, Y. Fu,
J. Wang, Q. Liu, Y. Shen, "When Speed Kills Stability: Demystifying RL Collapse from the Training-Inference
Mismatch" (2025, https://richardli.xyz/rl-collapse) for sequence-level weights and rejection; verl's docs
and source above for the keys.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

import torch

WEIGHT_LEVELS = ("token", "sequence", "none")
"""``weights``: one weight per token (TIS), one per sequence (the product of its token ratios), or none."""

MASK_LEVELS = ("none", "sequence", "geometric")
"""``mask``: none, or drop a sequence whose ratio ∏_t r_t (sequence) or (∏_t r_t)^(1/T) (geometric) leaves the band."""

SAFETY_BOUND = 20.0
"""Log-ratios are clamped to [−20, 20] before ``exp`` (verl's ``rollout_corr_helper.SAFETY_BOUND``)."""

KEY = "algorithm.rollout_correction"


@dataclass(frozen=True)
class RolloutCorrection:
    """Settings of the correction (``algorithm.rollout_correction``; their defaults live in the config schema).

    Attributes:
        weights: "token" (w_t = min(r_t, cap), Yao et al. 2025), "sequence" (w = min(∏_t r_t, cap) on every token
            of the sequence) or "none"; r_t = π_old(y_t) / π_rollout(y_t). verl: ``rollout_is``.
        cap: C, the truncation of the weights (≥ 1; verl: ``rollout_is_threshold``).
        mask: "none", "sequence" (drop a sequence whose ∏_t r_t leaves [mask_lower, mask_upper]; verl ``seq_sum_k1``)
            or "geometric" (the same on exp(mean_t log r_t); verl ``seq_mean_k1``).
        mask_lower: the band's lower end, in (0, 1].
        mask_upper: the band's upper end, ≥ 1.

    Raises:
        ValueError: a value out of its range, naming ``algorithm.rollout_correction.<key>`` and what it must be.
    """

    weights: str
    cap: float
    mask: str
    mask_lower: float
    mask_upper: float

    def __post_init__(self) -> None:
        if self.weights not in WEIGHT_LEVELS:
            raise ValueError(f"{KEY}.weights={self.weights} must be one of {', '.join(WEIGHT_LEVELS)}")
        if self.mask not in MASK_LEVELS:
            raise ValueError(f"{KEY}.mask={self.mask} must be one of {', '.join(MASK_LEVELS)}")
        if not (math.isfinite(self.cap) and self.cap >= 1.0):
            raise ValueError(f"{KEY}.cap={self.cap} must be a number of at least 1 (the weights are cut to it)")
        if not 0.0 < self.mask_lower <= 1.0:
            raise ValueError(f"{KEY}.mask_lower={self.mask_lower} must be in (0, 1]")
        if not (math.isfinite(self.mask_upper) and self.mask_upper >= 1.0):
            raise ValueError(f"{KEY}.mask_upper={self.mask_upper} must be a number of at least 1")

    @classmethod
    def from_mapping(cls, m: Mapping | None) -> RolloutCorrection | None:
        """Build from the ``algorithm.rollout_correction`` mapping; None (no correction) for None.

        Raises:
            ValueError: an unknown or missing key (names them), or a bad value (see the class).
        """
        if m is None:
            return None
        known = [f.name for f in fields(cls)]
        unknown, missing = sorted(set(m) - set(known)), [k for k in known if k not in m]
        if unknown:
            raise ValueError(f"{KEY} has unknown key(s) {unknown}; allowed: {known}")
        if missing:
            raise ValueError(f"{KEY} lacks {missing}: give every one of {known}")
        return cls(**{k: m[k] for k in known})

    def verl_keys(self) -> dict:
        """verl 0.9.1's ``algorithm.rollout_correction`` for the same correction (decoupled mode).

        verl's ``seq_*_k1`` threshold ``"lo_hi"`` keeps a sequence when log lo ≤ −log r ≤ log hi, r its ratio
        (``rollout_corr_helper.compute_rollout_rejection_mask``), i.e. when 1/hi ≤ r ≤ 1/lo: the band
        [mask_lower, mask_upper] on r is written ``"{1/mask_upper}_{1/mask_lower}"``.
        """
        rs = {"none": None, "sequence": "seq_sum_k1", "geometric": "seq_mean_k1"}[self.mask]
        return {"rollout_is": None if self.weights == "none" else self.weights,
                "rollout_is_threshold": float(self.cap), "rollout_is_batch_normalize": False,
                "rollout_rs": rs,
                "rollout_rs_threshold": None if rs is None else f"{1.0 / self.mask_upper!r}_{1.0 / self.mask_lower!r}",
                "bypass_mode": False}


@dataclass
class CorrectionStats:
    """Sums over the response tokens and sequences of one or more micro-batches (add them with ``+=``).

    Attributes:
        tokens: response tokens; sequences: sequences with at least one response token.
        weight_sum: Σ of the applied weights over response tokens (1 per token with ``weights=none``).
        truncated: tokens ("token") or sequences ("sequence") whose raw weight exceeded ``cap``.
        truncated_of: what ``truncated`` counts out of (tokens or sequences; 0 with ``weights=none``).
        masked: sequences dropped by the band.
        abs_diff: Σ |old_logprobs − rollout_logprobs| over response tokens (nats).
    """

    tokens: float = 0.0
    sequences: float = 0.0
    weight_sum: float = 0.0
    truncated: float = 0.0
    truncated_of: float = 0.0
    masked: float = 0.0
    abs_diff: float = 0.0

    def __iadd__(self, other: CorrectionStats) -> CorrectionStats:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def metrics(self) -> dict[str, float]:
        """``is_weight_mean`` (mean applied weight per response token), ``is_truncated_frac`` (share of
        tokens, or of sequences at the sequence level, whose weight was cut to ``cap``; verl's
        ``rollout_is_ratio_fraction_high``), ``masked_seq_frac`` (share of sequences dropped) and
        ``logprob_diff`` (mean |old − rollout| per token, nats); all 0.0 (the mean weight 1.0) with no tokens."""
        return {"is_weight_mean": self.weight_sum / self.tokens if self.tokens else 1.0,
                "is_truncated_frac": self.truncated / self.truncated_of if self.truncated_of else 0.0,
                "masked_seq_frac": self.masked / self.sequences if self.sequences else 0.0,
                "logprob_diff": self.abs_diff / self.tokens if self.tokens else 0.0}


@dataclass
class Correction:
    """What the loss takes from :func:`rollout_correction` for one (B, T) micro-batch.

    Attributes:
        weights: (B, T) float32 detached weights, 0 off the response mask, or None (``weights=none`` or no
            correction: the loss is unchanged).
        response_mask: (B, T), the input mask with every token of a dropped sequence set to 0 (same dtype).
        stats: the micro-batch's :class:`CorrectionStats`.
    """

    weights: torch.Tensor | None
    response_mask: torch.Tensor
    stats: CorrectionStats


def rollout_correction(old_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, response_mask: torch.Tensor,
                       cfg: RolloutCorrection | None) -> Correction:
    """Importance weights π_old/π_rollout (truncated at ``cfg.cap``) and the sequences the band drops.

    Args:
        old_logprobs: (B, T) float32 log π_old of the taken tokens (the learner before the update).
        rollout_logprobs: (B, T) float32 log π_rollout of the same tokens (the engine's, at the sampling
            temperature).
        response_mask: (B, T) {0, 1}, 1 on model-generated tokens.
        cfg: the settings, or None: no weights, nothing dropped (the statistics still count ``logprob_diff``).

    Returns:
        :class:`Correction`: the weights (None with ``weights=none``), the mask without the dropped sequences, the sums.

    Raises:
        ValueError: the three tensors differ in shape.
    """
    for name, t in (("rollout_logprobs", rollout_logprobs), ("response_mask", response_mask)):
        if t.shape != old_logprobs.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(old_logprobs.shape)} like old_logprobs")
    with torch.no_grad():
        mask = response_mask.to(torch.float32)
        log_ratio = (old_logprobs.float() - rollout_logprobs.float()) * mask
        n = mask.sum(-1)  # (B,) response tokens per sequence
        has = n > 0
        stats = CorrectionStats(tokens=float(mask.sum()), sequences=float(has.sum()),
                                abs_diff=float(log_ratio.abs().sum()), weight_sum=float(mask.sum()))
        if cfg is None:
            return Correction(None, response_mask, stats)
        seq_log = log_ratio.sum(-1)  # (B,) log ∏_t r_t
        weights = None
        if cfg.weights != "none":
            per = log_ratio if cfg.weights == "token" else seq_log[:, None].expand_as(log_ratio)
            raw = torch.exp(per.clamp(-SAFETY_BOUND, SAFETY_BOUND)) * mask
            weights = raw.clamp(max=cfg.cap)
            over = raw > cfg.cap  # raw is 0 off the mask and cap ≥ 1
            if cfg.weights == "token":
                stats.truncated, stats.truncated_of = float(over.sum()), stats.tokens
            else:
                stats.truncated, stats.truncated_of = float(over.any(-1).sum()), stats.sequences
            stats.weight_sum = float(weights.sum())
        keep = torch.ones_like(has)
        if cfg.mask != "none":
            stat = seq_log if cfg.mask == "sequence" else seq_log / n.clamp(min=1)
            keep = (stat >= math.log(cfg.mask_lower)) & (stat <= math.log(cfg.mask_upper))
            stats.masked = float((~keep & has).sum())
            response_mask = response_mask * keep[:, None].to(response_mask.dtype)
            if weights is not None:
                weights = weights * keep[:, None]
    return Correction(weights, response_mask, stats)
