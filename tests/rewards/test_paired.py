"""Paired differences of two evaluations: hand-computed values and intervals that bracket them."""

from __future__ import annotations

import numpy as np
import pytest

from earthrl.rewards.episode import EpisodeRecord
from earthrl.rewards.metrics.paired import paired_difference


def _rec(task: str, correct: bool, errors: int, turns: int) -> EpisodeRecord:
    return EpisodeRecord(task_id=task, calls=[], correct=correct,
                         turns=[{"error": i < errors, "error_kind": None} for i in range(turns)])


# run A and B on three tasks, two samples each: (correct, error turns, turns)
A = {"t1": [(0, 2, 4), (0, 1, 2)], "t2": [(1, 0, 3), (0, 3, 5)], "t3": [(0, 1, 1), (0, 0, 2)]}
B = {"t1": [(1, 0, 2), (1, 0, 3)], "t2": [(1, 1, 4), (0, 0, 2)], "t3": [(0, 0, 2), (1, 0, 1)]}
REFS = {t: [] for t in A}


def _records(run):
    return [_rec(t, bool(c), e, n) for t, eps in run.items() for c, e, n in eps]


def test_accuracy_and_eir_differences_by_hand():
    acc = paired_difference(_records(A), _records(B), REFS, "accuracy", n_resamples=2000)
    assert acc["a"] == pytest.approx(1 / 6) and acc["b"] == pytest.approx(4 / 6)
    assert acc["diff"] == pytest.approx(0.5) and acc["n_tasks"] == 3
    lo, hi = acc["ci95"]
    assert lo <= 0.5 <= hi and hi <= 1.0
    eir = paired_difference(_records(A), _records(B), REFS, "eir", n_resamples=2000)
    # A: 7 error turns of 17; B: 1 of 14 (ratio of sums, as compute_all defines EIR)
    assert eir["a"] == pytest.approx(7 / 17) and eir["b"] == pytest.approx(1 / 14)
    assert eir["diff"] == pytest.approx(1 / 14 - 7 / 17)


def test_interval_is_the_paired_task_bootstrap():
    """Against a bootstrap written here: resample the 3 tasks with replacement, both runs together."""
    res = paired_difference(_records(A), _records(B), REFS, "accuracy", n_resamples=4000, seed=1)
    a = np.array([sum(c for c, _, _ in A[t]) for t in A]) / 2
    b = np.array([sum(c for c, _, _ in B[t]) for t in B]) / 2
    rng = np.random.default_rng(123)
    idx = rng.integers(0, 3, size=(20000, 3))
    diffs = (b[idx] - a[idx]).mean(axis=1)
    ref = np.percentile(diffs, [2.5, 97.5])
    assert res["ci95"] == pytest.approx(ref.tolist(), abs=1 / 6 + 1e-9)  # 3 tasks: the quantiles step by 1/6
    assert res["above_zero"] == bool(res["ci95"][0] > 0)


def test_only_shared_tasks_and_clear_errors():
    b_two = [r for r in _records(B) if r.task_id != "t3"]
    res = paired_difference(_records(A), b_two, REFS, "accuracy")
    assert res["n_tasks"] == 2 and res["a"] == pytest.approx(1 / 4) and res["b"] == pytest.approx(3 / 4)
    with pytest.raises(ValueError, match="no task was scored by both"):
        paired_difference(_records(A), [_rec("other", True, 0, 1)], REFS | {"other": []}, "accuracy")
    with pytest.raises(ValueError, match="unknown metric 'acc'"):
        paired_difference(_records(A), _records(B), REFS, "acc")
