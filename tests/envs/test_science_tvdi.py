"""TVDI after Sandholt et al. (2002) with its options, against an independent computation here
(numpy + scipy) on the real Landsat 7 Level-1 scene: Theil-Sen fit, fitted wet edge, ranges, the
horizontal wet edge crossed by the dry edge (NaN past the crossing) and too few pixels per bin (a
clear tool error). The defaults: ``test_science_tvdi_defaults.py``."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from affine import Affine
from scipy.stats import theilslopes

LE07 = "LE07_L1TP_195025_20010730_20170204_01_T1"


def _read(env, name):
    with rasterio.open(env.registry.get(name).path) as src:
        return src.read(1).astype(np.float64)


def _bins(nd, lst, bins, lo, hi, lmin, lmax, min_px):
    ok = (nd >= lo) & (nd <= hi) & (lst >= lmin) & (lst <= lmax)
    k = np.minimum(np.floor((nd - lo) / (hi - lo) * bins), bins - 1)
    use = [i for i in range(bins) if (ok & (k == i)).sum() >= min_px]
    cx = np.array([lo + (i + 0.5) * (hi - lo) / bins for i in use])
    return ok, cx, [lst[ok & (k == i)] for i in use]


@pytest.fixture
def le07(make_env, run):
    env = make_env(LE07, toolset="all")
    run(env, "ndvi", scene=LE07)
    run(env, "land_surface_temperature", scene=LE07)
    return env, _read(env, f"ndvi_{LE07}"), _read(env, f"lst_{LE07}")


def test_tvdi_theil_sen_fitted_wet_edge_custom_ranges(le07, run):
    env, nd, lst = le07
    r = run(env, "tvdi", ndvi=f"ndvi_{LE07}", lst=f"lst_{LE07}", bins=12, ndvi_min=0.05, ndvi_max=0.85,
            lst_min=290.0, lst_max=320.0, min_pixels=20, fit="theil_sen", wet_edge="fit")
    assert not r.error, r.observation
    ok, cx, groups = _bins(nd, lst, 12, 0.05, 0.85, 290.0, 320.0, 20)
    dry = theilslopes([g.max() for g in groups], cx)
    wet = theilslopes([g.min() for g in groups], cx)
    assert r.result["dry_edge"] == pytest.approx([dry[1], dry[0]], rel=1e-6)
    assert r.result["wet_edge"] == pytest.approx([wet[1], wet[0]], rel=1e-6)
    want = np.clip((lst - wet[1] - wet[0] * nd) / (dry[1] - wet[1] + (dry[0] - wet[0]) * nd), 0, 1)
    got = _read(env, r.result["artifact"])
    np.testing.assert_allclose(got[ok], want[ok], atol=1e-4)
    assert np.isnan(got[~ok]).all() and (~ok).sum() > 0  # pixels outside the valid ranges
    d = run(env, "tvdi", ndvi=f"ndvi_{LE07}", lst=f"lst_{LE07}")  # defaults: another name
    assert d.result["artifact"] != r.result["artifact"]
    assert 0.3 < np.nanmean(_read(env, d.result["artifact"])) < 0.8


def test_crossed_horizontal_wet_edge_is_nan_past_the_crossing_and_sparse_bins_an_error(le07, run):
    from scipy.stats import linregress

    env, nd, lst = le07
    # flat LST with hot outliers only in the lowest NDVI bin: the OLS dry edge dips below Ts_min
    fake = np.where(np.isfinite(nd), 300.0, np.nan)
    fake[(nd >= 0) & (nd < 0.1)] = 340.0
    env.registry.write("lst_fake", fake.astype(np.float32), kind="raster",
                       crs=env.registry.get(f"lst_{LE07}").crs,
                       transform=Affine(*env.registry.get(f"lst_{LE07}").transform), units="K", parents=[],
                       call=None)
    r = run(env, "tvdi", ndvi=f"ndvi_{LE07}", lst="lst_fake", bins=10, min_pixels=1, wet_edge="min")
    assert not r.error, r.observation
    ok, cx, groups = _bins(nd, fake, 10, 0.0, 1.0, 200.0, 350.0, 1)
    dry = linregress(cx, [g.max() for g in groups])
    crossed = ok & (dry.intercept + dry.slope * nd <= 300.0)  # Ts_min = 300 K
    assert 0 < crossed.sum() < ok.sum()
    got = _read(env, r.result["artifact"])
    assert np.array_equal(np.isnan(got), crossed | ~ok)
    assert r.result["crossed_pixels"] == crossed.sum() and "edges cross" in r.observation
    s = run(env, "tvdi", ndvi=f"ndvi_{LE07}", lst=f"lst_{LE07}", bins=50, min_pixels=200)
    assert s.error and s.error_kind == "empty_raster" and "min_pixels" in s.observation
