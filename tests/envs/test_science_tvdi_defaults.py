"""TVDI defaults (NDVI intervals of 0.01, LST 200-350 K, fitted dry and wet edges), crossed edges
as per-pixel NaN, the per-date valid-share rule and the frozen-pixel option, each against a
computation written here with numpy alone (np.polyfit of the per-interval LST extremes)."""

from __future__ import annotations

import numpy as np
import pytest
from affine import Affine

from tests.envs.test_science_tvdi import LE07, _read, le07  # noqa: F401  (le07: the fixture)


def _write(env, name, arr):
    ref = env.registry.get(f"lst_{LE07}")
    env.registry.write(name, arr.astype(np.float32), kind="raster", crs=ref.crs,
                       transform=Affine(*ref.transform), units="K", parents=[], call=None)


def textbook(nd, lst, step=0.01, min_px=5, lst_lo=200.0, lst_hi=350.0):
    """Per-pixel TVDI from NDVI intervals [k·step, (k+1)·step) over [0, 1] with >= min_px pixels,
    np.polyfit lines through the interval maxima (dry) and minima (wet) at the interval centres,
    clipped to [0, 1]; NaN off the ranges and where the wet line is not below the dry line."""
    ok = np.isfinite(nd) & np.isfinite(lst) & (nd >= 0) & (nd <= 1) & (lst >= lst_lo) & (lst <= lst_hi)
    n = int(round(1 / step))
    k = np.minimum(np.floor(nd / step), n - 1)
    cx, hi, lo = [], [], []
    for i in range(n):
        sel = lst[ok & (k == i)]
        if sel.size >= min_px:
            cx.append((i + 0.5) * step), hi.append(sel.max()), lo.append(sel.min())
    bd, ad = np.polyfit(cx, hi, 1)
    bw, aw = np.polyfit(cx, lo, 1)
    dry, wet = ad + bd * nd, aw + bw * nd
    with np.errstate(all="ignore"):
        t = np.clip((lst - wet) / (dry - wet), 0, 1)
    crossed = ok & (wet >= dry)
    return np.where(ok & ~crossed, t, np.nan), crossed, (ad, bd), (aw, bw)


def test_defaults_reproduce_textbook_on_real_scene(le07, run):
    env, nd, lst = le07
    from earthrl.envs.tools.physics import TVDI_DEFAULTS
    from earthrl.envs.tools.tvdi_core import DEFAULTS

    assert TVDI_DEFAULTS == DEFAULTS  # the tool's schema and the documented defaults agree
    r = run(env, "tvdi", ndvi=f"ndvi_{LE07}", lst=f"lst_{LE07}")
    assert not r.error, r.observation
    # 1681 valid pixels: the default count per interval is max(5, ceil(0.2 % of 1681)) = 5
    want, crossed, dry, wet = textbook(nd, lst, min_px=5)
    assert r.result["dry_edge"] == pytest.approx(list(dry), rel=1e-9)
    assert r.result["wet_edge"] == pytest.approx(list(wet), rel=1e-9)
    assert r.result["min_pixels"] == 5 and r.result["crossed_pixels"] == int(crossed.sum()) == 0
    got = _read(env, r.result["artifact"])
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.nanmean(got) == pytest.approx(np.nanmean(want), abs=1e-6)
    assert np.nanmean(got) == pytest.approx(0.5488, abs=1e-4)  # docs/benchmarks.md, TVDI sensitivity, first row
    # two more rows of that table: step 0.05 and 20 px per interval
    s = run(env, "tvdi", ndvi=f"ndvi_{LE07}", lst=f"lst_{LE07}", ndvi_step=0.05)
    np.testing.assert_allclose(_read(env, s.result["artifact"]), textbook(nd, lst, 0.05)[0], atol=1e-5)
    p = run(env, "tvdi", ndvi=f"ndvi_{LE07}", lst=f"lst_{LE07}", min_pixels=20)
    np.testing.assert_allclose(_read(env, p.result["artifact"]), textbook(nd, lst, min_px=20)[0], atol=1e-5)


def test_documented_sensitivity_table_is_what_the_script_prints(data_root):
    from pathlib import Path

    from earthrl.envs.core.tvdi_sensitivity import markdown, sensitivity

    page = (Path(__file__).parents[2] / "docs" / "benchmarks.md").read_text()
    for line in markdown(sensitivity(data_root)).splitlines():
        assert "  " + line + "\n" in page, line


def test_crossed_edges_are_nan_per_pixel(le07, run):
    env, nd, _ = le07
    rng = np.random.default_rng(7)
    x = rng.uniform(0.0, 1.0, nd.shape)
    # a wide triangle below NDVI 0.6 and a thin, cold, flat band above it: the least-squares dry
    # line is pulled under the wet line in the upper part of the NDVI range
    hi = np.where(x < 0.6, 330 - 10 * x, 301.0)
    lo = np.where(x < 0.6, 290 + 15 * x, 300.0)
    lst = lo + rng.uniform(0, 1, x.shape) * (hi - lo)
    _write(env, "ndvi_fake", x)
    _write(env, "lst_fake", lst)
    x, lst = _read(env, "ndvi_fake"), _read(env, "lst_fake")
    r = run(env, "tvdi", ndvi="ndvi_fake", lst="lst_fake", min_pixels=5)
    assert not r.error, r.observation
    want, crossed, dry, wet = textbook(x, lst, min_px=5)
    assert 50 < crossed.sum() < 0.5 * x.size  # the edges cross in part of the NDVI range only
    got = _read(env, r.result["artifact"])
    assert np.array_equal(np.isnan(got), crossed)  # exactly the crossed pixels are NaN
    assert np.isfinite(got[~crossed]).all()
    np.testing.assert_allclose(got[~crossed], want[~crossed], atol=1e-5)
    assert r.result["crossed_pixels"] == int(crossed.sum())
    assert r.result["valid_share"] == pytest.approx(1 - crossed.sum() / x.size)
    # edges crossed on every valid pixel (flat LST): an error, and no all-NaN raster
    _write(env, "lst_flat", np.full(x.shape, 300.0))
    before = set(env.registry.artifacts)
    f = run(env, "tvdi", ndvi="ndvi_fake", lst="lst_flat")
    assert f.error and f.error_kind == "tvdi_edges_crossed" and "every valid pixel" in f.observation
    assert set(env.registry.artifacts) == before


def test_min_valid_share_refuses_or_accepts_a_date(le07, run):
    env, nd, lst = le07
    lst = lst.copy()
    lst[:, :12] = np.nan  # no LST: not counted
    lst[:10, 12:] = 360.0  # implausibly hot: counted, never valid
    _write(env, "lst_part", lst)
    want = textbook(nd, lst)[0]
    share = np.isfinite(want).sum() / (np.isfinite(nd) & np.isfinite(lst)).sum()
    assert share == pytest.approx(1 - 10 * 29 / (41 * 29))
    before = set(env.registry.artifacts)
    bad = run(env, "tvdi", ndvi=f"ndvi_{LE07}", lst="lst_part", min_valid_share=share + 0.01)
    assert bad.error and bad.error_kind == "tvdi_valid_share"
    assert "min_valid_share" in bad.observation and f"{share:.1%}" in bad.observation
    assert set(env.registry.artifacts) == before
    ok = run(env, "tvdi", ndvi=f"ndvi_{LE07}", lst="lst_part", min_valid_share=share - 0.01)
    assert not ok.error, ok.observation
    assert ok.result["valid_share"] == pytest.approx(share)
    np.testing.assert_allclose(_read(env, ok.result["artifact"]), want, atol=1e-5)


def test_exclude_frozen_drops_pixels_below_freezing(le07, run):
    env, nd, lst = le07
    lst = lst.copy()
    lst[30:, :] = 265.0  # a frozen strip: inside 200-350 K, so used unless excluded
    _write(env, "lst_frozen", lst)
    keep = run(env, "tvdi", ndvi=f"ndvi_{LE07}", lst="lst_frozen")
    np.testing.assert_allclose(_read(env, keep.result["artifact"]), textbook(nd, lst)[0], atol=1e-5)
    r = run(env, "tvdi", ndvi=f"ndvi_{LE07}", lst="lst_frozen", exclude_frozen=True)
    assert not r.error, r.observation
    want = textbook(nd, lst, lst_lo=273.15)[0]
    got = _read(env, r.result["artifact"])
    assert np.isnan(got[30:]).all() and np.isfinite(got[:30]).all()
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_skill_catalogue_counts_the_tvdi_options():
    from earthrl.envs.core.actions import catalogue_line
    from earthrl.envs.tools.registry import TOOLS

    assert catalogue_line(TOOLS["tvdi"]).startswith("tvdi(ndvi, lst, +11 options): ")
    assert catalogue_line(TOOLS["threshold_mask"]).startswith("threshold_mask(name, op=…, value): ")
