"""Index constants and exact thresholds.

EVI2 = 2.5·(N − R)/(N + 2.4·R + 1) (Jiang et al. 2008, RSE 112:3833, L = 1) on the real
Sentinel-2 scene; and pixels that lie exactly on a threshold in exact arithmetic (NDBI of DN
1150/850 is 300/2000 = 0.15; B08 DN 500 is reflectance 0.05) classified by the exact rule: out for
``>``/``<``, in for ``>=``/``<=``. Expected counts come from integer arithmetic on the DN
(``Fraction``), not from EarthRL code."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin

from earthrl.envs.data import catalog
from earthrl.envs.data.artifacts import ArtifactRegistry, ToolError
from earthrl.envs.suites.earthrl_mini import run_reference
from earthrl.envs.tools.mini_toolset import compute_index

S2 = "S2_T33UUU_20170216"


def _saved(env, result) -> np.ndarray:
    with rasterio.open(env.registry.get(result["artifact"]).path) as src:
        return src.read(1).astype(np.float64)


def test_evi2_uses_jiang_2008_constants_on_the_sentinel2_scene(make_env, run, raw):
    env = make_env(S2)
    n, r = (np.where(a == 0, np.nan, a) for a in (raw.s2("B08"), raw.s2("B04")))
    want = 2.5 * (n - r) / (n + 2.4 * r + 1.0)
    res = run(env, "spectral_index", scene=S2, index="EVI2")
    assert not res.error, res.observation
    got = _saved(env, res.result)
    assert np.nanmean(got) == pytest.approx(np.nanmean(want), abs=1e-6)
    np.testing.assert_allclose(got, want, atol=1e-6, equal_nan=True)
    # a constant the caller gives wins over the index's own
    got, _, _ = compute_index(env.registry, env.registry.scene(S2), "EVI2", {"L": 0.5})
    assert np.nanmean(got) == pytest.approx(np.nanmean(2.5 * (n - r) / (n + 2.4 * r + 0.5)), abs=1e-6)
    with pytest.raises(ToolError, match="no constant C1"):
        compute_index(env.registry, env.registry.scene(S2), "EVI2", {"C1": 6.0})


# DN pairs (SWIR1 B11, NIR B08): exactly on NDBI 0.15, just above and just below it
ON = [(1150, 850), (2300, 1700), (575, 425), (4600, 3400), (23, 17)]
OFF = [(1151, 850), (1149, 850), (3000, 1000), (800, 1200), (2301, 1700)]


@pytest.fixture
def tie_scene(tmp_path):
    """A 'sentinel-2' scene of 4 × 10 pixels of 10 m on EPSG:6933 (cylindrical equal-area: every
    cell is 100 m² on the ellipsoid), B11/B08 DN from :data:`ON` and :data:`OFF`, B08 column 0 at
    DN 500 (reflectance 0.05)."""
    pairs = (ON + OFF) * 4
    s1 = np.array([p[0] for p in pairs], np.uint16).reshape(4, 10)
    nir = np.array([p[1] for p in pairs], np.uint16).reshape(4, 10)
    nir[:, 0] = 500
    paths = {}
    for band, arr in (("B11", s1), ("B08", nir)):
        paths[band] = tmp_path / f"{band}.tif"
        with rasterio.open(paths[band], "w", driver="GTiff", width=10, height=4, count=1, dtype="uint16",
                           crs="EPSG:6933", transform=from_origin(1_000_000, 5_000_000, 10, 10)) as dst:
            dst.write(arr, 1)
    scene = catalog.Scene("S2_TTIE_20200101", "sentinel-2", "2020-01-01", paths, catalog.S2_SYMBOLS)
    yield ArtifactRegistry(Path(tmp_path) / "ws", {scene.id: scene}), scene, s1.astype(int), nir.astype(int)
    catalog._BANDS.clear()


def _exact(s1, nir, op, t):
    """Count of pixels with (s1 − nir)/(s1 + nir) <op> t in exact rational arithmetic."""
    t = Fraction(str(t))
    cmp = {">": lambda v: v > t, ">=": lambda v: v >= t, "<": lambda v: v < t}[op]
    return sum(cmp(Fraction(int(a) - int(b), int(a) + int(b))) for a, b in zip(s1.ravel(), nir.ravel()))


@pytest.mark.parametrize("op", [">", ">=", "<"])
def test_pixels_exactly_on_an_ndbi_threshold_follow_the_exact_rule(tie_scene, op):
    reg, scene, s1, nir = tie_scene
    want = _exact(s1, nir, op, 0.15)
    assert 0 < want < s1.size
    _, res = run_reference(reg, [{"name": "spectral_index", "arguments": {"scene": scene.id, "index": "NDBI"}},
                                 {"name": "threshold_mask", "arguments": {"name": "@1", "op": op, "value": 0.15}},
                                 {"name": "mask_area", "arguments": {"name": "@2", "unit": "m2"}}])
    assert res[2]["ones_px"] == want
    assert res[2]["area"] == pytest.approx(want * 10 * 10, rel=1e-6)  # 100 m² cells (equal-area grid)


def test_band_math_and_band_thresholds_follow_the_exact_rule(tie_scene):
    reg, scene, s1, nir = tie_scene
    expr = {"name": "band_math", "arguments": {"expr": "(s - n) / (s + n) > 0.15",
                                                "inputs": {"s": f"{scene.id}:B11", "n": f"{scene.id}:B08"}}}
    _, res = run_reference(reg, [expr, {"name": "raster_stats", "arguments": {"name": "@1"}}])
    assert round(res[1]["mean"] * s1.size) == _exact(s1, nir, ">", 0.15)
    # B08 reflectance DN / 10000 < 0.05: DN 500 is exactly 0.05, so not below it
    _, res = run_reference(reg, [{"name": "threshold_mask", "arguments": {"name": f"{scene.id}:B08", "op": "<",
                                                                          "value": 0.05}},
                                 {"name": "pixel_share", "arguments": {"name": "@1"}}])
    assert res[1]["ones_px"] == int((nir < 500).sum())
    _, res = run_reference(reg, [{"name": "threshold_mask", "arguments": {"name": f"{scene.id}:B08", "op": "<=",
                                                                          "value": 0.05}},
                                 {"name": "pixel_share", "arguments": {"name": "@1"}}])
    assert res[1]["ones_px"] == int((nir <= 500).sum())
