"""``earthrl bench algorithms`` (bench/rewards_advantages.py): the synthetic batch and the cost of the score
and advantage stages."""

import pytest

from earthrl.bench.rewards_advantages import bench_algorithms, synthetic_batch


def test_synthetic_batch_has_exact_token_counts():
    trajs = synthetic_batch(4, 1000, turns=5, hierarchical=True)
    assert [len(t.token_ids()) for t in trajs] == [1000] * 4
    assert [t.turns[k].role for k in range(3) for t in trajs[:1]] == ["manager", "specialist", "manager"]


@pytest.mark.parametrize("estimator", ["grpo_tap", "hierarchical", "executor_node"])
def test_bench_small_batch(estimator):
    r = bench_algorithms(batch=32, tokens=512, estimator=estimator, repeats=1)
    assert r["batch"] == 32 and r["tokens"] == 512
    assert 0 < r["rewards_s"] <= r["total_s"] and 0 < r["broadcast_s"] <= r["total_s"]
    assert r["share_of_step"] == pytest.approx(r["total_s"] / 330.0)

