"""bench_ndvi: the tool path computes the same NDVI as bare numpy and reports both timings."""

from __future__ import annotations

import pytest

from earthrl.bench.ndvi import bench_ndvi
from earthrl.envs.data import catalog


def test_bench_ndvi_small_matches_numpy_and_cleans_up():
    r = bench_ndvi(size=512, repeats=2)
    assert r["size"] == 512 and r["repeats"] == 2
    assert r["max_abs_diff"] < 1e-6  # float32 NDVI: tool path == (n - r) / (n + r)
    assert r["tool_s"] > 0 and r["numpy_s"] > 0 and r["ratio"] == pytest.approx(r["tool_s"] / r["numpy_s"])
    assert len(catalog._BANDS) == 0  # the 2 x size^2 bands are not kept cached
    with pytest.raises(ValueError, match="repeats"):
        bench_ndvi(size=8, repeats=0)
