"""Paired comparison of two evaluations of the same tasks: the difference of a metric with its
bootstrap 95% interval, resampling tasks.

A learning curve says "after GRPO accuracy is higher than after SFT" only when the interval of the
difference lies above 0. The two evaluations ran the same tasks (and samples per task), so the
difference is paired: a bootstrap resample draws tasks with replacement and takes both runs'
episodes of each drawn task together, which removes the task-difficulty variance that two
independent intervals would double count (Efron & Tibshirani 1993, *An Introduction to the
Bootstrap*, §16.4). Each metric is a ratio of sums over the resampled tasks, so a mean metric
(accuracy) weights episodes equally and a ratio metric (EIR = error turns / turns) is the ratio of
the summed numerators and denominators, as :func:`earthrl.rewards.metrics.compute.compute_all`
defines them. The resampling itself is :func:`scipy.stats.bootstrap` (percentile method) through
:func:`earthrl.rewards.metrics.bootstrap.bootstrap_ci`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from earthrl.rewards.episode import EpisodeRecord
from earthrl.rewards.metrics.bootstrap import bootstrap_ci
from earthrl.rewards.metrics.compute import METRICS, enters_metric


def _per_task(records: Sequence[EpisodeRecord], references: Mapping[str, Sequence[dict]], metric: str):
    """``{task_id: [numerator sum, denominator sum]}`` of ``metric`` over the task's episodes
    (a mean metric's denominator is the episode count); which episodes enter is
    :func:`~earthrl.rewards.metrics.compute.enters_metric`, faulted records left out, as in compute_all."""
    spec = METRICS[metric]
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for rec in records:
        if rec.faulted or not enters_metric(spec, rec):
            continue
        v = spec.fn(rec, list(references.get(rec.task_id, [])))
        num, den = (float(v[0]), float(v[1])) if spec.ratio else (float(v), 1.0)
        sums[rec.task_id][0] += num
        sums[rec.task_id][1] += den
    return sums


def _diff_of_ratios(num_a, den_a, num_b, den_b, axis: int = -1):
    """``Σ num_b / Σ den_b − Σ num_a / Σ den_a`` along ``axis`` (NaN where a denominator sums to 0)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(num_b, axis=axis) / np.sum(den_b, axis=axis) - np.sum(num_a, axis=axis) / np.sum(den_a, axis=axis)


def paired_difference(records_a: Sequence[EpisodeRecord], records_b: Sequence[EpisodeRecord],
                      references: Mapping[str, Sequence[dict]], metric: str, *, n_resamples: int = 1000,
                      seed: int = 0) -> dict:
    """``metric(b) − metric(a)`` over the tasks both evaluations scored, with its paired bootstrap 95% CI.

    Args:
        records_a, records_b: scored episodes of the two runs (e.g. after SFT and after GRPO), any
            number of samples per task.
        references: ``{task_id: reference calls}`` (:func:`~earthrl.rewards.metrics.compute.references_of`).
        metric: a registered metric name (``accuracy``, ``eir``, ``avg_turns``, …).
        n_resamples, seed: bootstrap settings (resamples of tasks).

    Returns:
        ``{"metric", "a", "b", "diff", "ci95": [low, high], "n_tasks", "above_zero"}``: the two values
        over the shared tasks, their difference, its interval and whether the interval lies above 0.

    Raises:
        ValueError: unknown metric, or no task scored by both runs.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; registered: {', '.join(METRICS)}")
    a, b = _per_task(records_a, references, metric), _per_task(records_b, references, metric)
    shared = sorted(t for t in a if t in b and a[t][1] > 0 and b[t][1] > 0)
    if not shared:
        raise ValueError(f"{metric}: no task was scored by both evaluations")
    arrays = tuple(np.array([d[t][k] for t in shared]) for d in (a, b) for k in (0, 1))
    diff = float(_diff_of_ratios(*arrays))
    low, high = bootstrap_ci(arrays, stat=_diff_of_ratios, n_resamples=n_resamples, seed=seed)
    value_a = float(arrays[0].sum() / arrays[1].sum())
    value_b = float(arrays[2].sum() / arrays[3].sum())
    return {"metric": metric, "a": value_a, "b": value_b, "diff": diff, "ci95": [low, high],
            "n_tasks": len(shared), "above_zero": bool(low > 0)}
