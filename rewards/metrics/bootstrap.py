"""Bootstrap confidence intervals for evaluation metrics.

SimCRAFT (§4.3) reports its metrics with bootstrap 95% intervals over 1000 resamples; EarthRL
gives every metric of :func:`earthrl.rewards.metrics.compute.compute_all` such an interval. The
resampling unit is the episode (one task attempt), so per-episode values are resampled with
replacement; ratio metrics (e.g. errors / turns) resample the episode's numerator and
denominator together (paired) and recompute the ratio of sums.

The work is done by :func:`scipy.stats.bootstrap` with the percentile method.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats


def bootstrap_ci(values, stat: Callable = np.mean, n_resamples: int = 1000, alpha: float = 0.05,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap ``(1 - alpha)`` interval of ``stat`` over episodes.

    Args:
        values: per-episode values, 1-D array-like of length n; or a tuple of such arrays of
            equal length (paired samples, e.g. ``(numerators, denominators)``), resampled
            together.
        stat: statistic; called as ``stat(*samples, axis=-1)`` (numpy reductions such as
            ``np.mean`` accept ``axis``). A statistic without an ``axis`` argument is
            also accepted (slower: evaluated per resample).
        n_resamples: bootstrap resamples (SimCRAFT: 1000); 0 computes no interval (both ends NaN).
        alpha: 0.05 gives the 95% interval.
        seed: seed of the resampling generator (same seed, same interval).

    Returns:
        ``(low, high)`` as floats. With no values both are NaN; with one value, or when every
        resample gives the same statistic (e.g. constant values), the interval has zero width
        at the statistic.

    Raises:
        ValueError: paired samples of different lengths, ``alpha`` outside (0, 1), or ``n_resamples`` < 0.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if n_resamples < 0:
        raise ValueError(f"n_resamples must be ≥ 0 (0: no interval), got {n_resamples}")
    samples = _as_samples(values)
    n = len(samples[0])
    if n == 0 or n_resamples == 0:
        return float("nan"), float("nan")
    point = float(_call(stat, samples))
    if n == 1 or all(np.all(s == s[0]) for s in samples):
        return point, point
    res = stats.bootstrap(samples, stat, paired=True, vectorized=_accepts_axis(stat, samples),
                          n_resamples=n_resamples, confidence_level=1.0 - alpha,
                          method="percentile", rng=np.random.default_rng(seed))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return low, high


def ratio_of_sums(numerators, denominators, axis: int = -1):
    """``sum(numerators) / sum(denominators)`` along ``axis`` (NaN where the denominator sum is 0).

    A micro-averaged rate, e.g. EIR = Σ error turns / Σ assistant turns over episodes.
    """
    num = np.sum(numerators, axis=axis)
    den = np.sum(denominators, axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def _as_samples(values) -> tuple[np.ndarray, ...]:
    if isinstance(values, tuple):
        samples = tuple(np.asarray(v, dtype=float).ravel() for v in values)
    else:
        samples = (np.asarray(values, dtype=float).ravel(),)
    if len({len(s) for s in samples}) > 1:
        raise ValueError(f"paired samples differ in length: {[len(s) for s in samples]}")
    return samples


def _call(stat: Callable, samples: Sequence[np.ndarray]):
    try:
        return stat(*samples, axis=-1)
    except TypeError:
        return stat(*samples)


def _accepts_axis(stat: Callable, samples: Sequence[np.ndarray]) -> bool:
    try:
        stat(*samples, axis=-1)
    except TypeError:
        return False
    return True
