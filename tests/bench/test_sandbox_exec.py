"""``earthrl bench env``'s sandbox measurement (bench/sandbox_exec.py): start-up and per-exec overhead."""

from __future__ import annotations

import pytest

from earthrl.bench.sandbox_exec import bench_sandbox


def test_bench_sandbox_measures_startup_and_overhead():
    out = bench_sandbox(n=5)
    assert set(out) == {"startup_s", "exec_median_ms", "exec_p90_ms", "tool_call_ms", "backend",
                        "seccomp", "netns", "pids_cgroup", "landlock", "n"}
    assert 0 < out["startup_s"] < 30 and 0 < out["exec_median_ms"] <= out["exec_p90_ms"]
    assert out["tool_call_ms"] > 0 and out["n"] == 5
    with pytest.raises(ValueError, match="n must be >= 1"):
        bench_sandbox(n=0)
