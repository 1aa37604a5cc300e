"""Bootstrap intervals (rewards/metrics/bootstrap.py)."""

from __future__ import annotations

import numpy as np
import pytest

from earthrl.rewards.metrics.bootstrap import bootstrap_ci, ratio_of_sums


def test_constant_values_give_zero_width_interval():
    assert bootstrap_ci([0.25] * 40) == (0.25, 0.25)


def test_single_value_and_empty():
    assert bootstrap_ci([3.0]) == (3.0, 3.0)
    low, high = bootstrap_ci([])
    assert np.isnan(low) and np.isnan(high)


def test_interval_brackets_mean_and_matches_normal_theory():
    # 200 Bernoulli(0.5) draws with 100 ones: mean 0.5, standard error sqrt(0.25/200) = 0.03536;
    # the 95% percentile interval must be close to 0.5 ± 1.96·0.03536 = [0.431, 0.569].
    values = np.r_[np.zeros(100), np.ones(100)]
    low, high = bootstrap_ci(values, n_resamples=2000, seed=0)
    assert low < 0.5 < high
    assert low == pytest.approx(0.431, abs=0.02) and high == pytest.approx(0.569, abs=0.02)


def test_same_seed_same_interval_other_seed_differs():
    rng = np.random.default_rng(1)
    values = rng.normal(size=50)
    assert bootstrap_ci(values, seed=3) == bootstrap_ci(values, seed=3)
    assert bootstrap_ci(values, seed=3) != bootstrap_ci(values, seed=4)


def test_coverage_sanity_with_fixed_seed():
    # 100 experiments of 60 draws from N(1, 1): the 95% interval should contain the true mean
    # about 95 times; the percentile bootstrap under-covers slightly at n=60, so accept 88-100.
    rng = np.random.default_rng(123)
    hits = 0
    for k in range(100):
        low, high = bootstrap_ci(rng.normal(1.0, 1.0, size=60), n_resamples=500, seed=k)
        hits += low <= 1.0 <= high
    assert 88 <= hits <= 100


def test_paired_ratio_of_sums():
    # errors (1, 0, 2, 0) over turns (2, 2, 2, 2): Σ3/Σ8 = 0.375 lies inside the interval,
    # which cannot leave [0, 1]: every resample is a ratio of counts with errors <= turns.
    num, den = np.array([1, 0, 2, 0]), np.array([2, 2, 2, 2])
    assert float(ratio_of_sums(num, den)) == pytest.approx(0.375)
    low, high = bootstrap_ci((num, den), stat=ratio_of_sums, seed=0)
    assert 0.0 <= low <= 0.375 <= high <= 1.0


def test_stat_without_axis_argument():
    low, high = bootstrap_ci([1.0, 2.0, 3.0, 4.0, 100.0], stat=lambda x: float(np.median(x)), seed=0)
    assert 1.0 <= low <= 3.0 <= high <= 100.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="alpha"):
        bootstrap_ci([1, 2], alpha=1.5)
    with pytest.raises(ValueError, match="length"):
        bootstrap_ci(([1, 2], [1, 2, 3]))
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_ci([1, 2], n_resamples=-1)


def test_zero_resamples_gives_no_interval():
    # eval.bootstrap=0: the point estimates without intervals (scipy refuses 0 resamples)
    low, high = bootstrap_ci([0.0, 1.0, 1.0], n_resamples=0)
    assert np.isnan(low) and np.isnan(high)
