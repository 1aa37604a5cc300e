"""earthrl-mini answers against independent computations (plain rasterio + numpy, scipy's
Theil-Sen, pymannkendall) on the real rasters, for a sample of templates."""

from __future__ import annotations

import datetime as dt
import re

import numpy as np
import pymannkendall
import pytest
import rasterio
from scipy.stats import theilslopes

from earthrl.envs.paths import data_dir
from earthrl.envs.suites import earthrl_mini as suite_mini

TEMPLATES = ["s2_index_stat", "s2_veg_share", "s2_builtup_share", "s2_water_area", "s2_nir_water", "ls_mean_ndvi",
             "ls_moisture_stress", "ls_simple_ratio", "ls_cloud_share", "ls_clear_share",
             "ls_snow_share", "ls_ndvi_change", "ls_greenest", "ls_change_direction",
             "ts_sen_slope", "ts_mk_trend", "ls_clear_ndvi", "l1_lst_stat", "l1_bt_stat",
             "l1_lst_share"]


@pytest.fixture(scope="module")
def built(data_root):
    res = suite_mini.build(data_root, templates=TEMPLATES)
    assert res.failures == []
    return res.tasks


def of(tasks, template):
    out = [t for t in tasks if t.template == template]
    assert out, template
    return out


def check(task, want, frac=0.2):
    """Within a fifth of the task's tolerance (plus the rounding of the stored answer)."""
    slack = max(task.answer.tolerance * frac, 0.5 * 10.0 ** -_decimals(task)) + 1e-9
    assert abs(task.answer.value - want) <= slack, (task.id, task.answer.value, want)


def _decimals(task):
    s = repr(float(task.answer.value))
    return len(s.split(".")[1]) if "." in s else 0


def nd(a, b):
    with np.errstate(all="ignore"):
        return (a - b) / (a + b)


def up(a, k):
    return np.repeat(np.repeat(a, k, 0), k, 1)


def test_sentinel2_index_shares_and_areas(built, raw):
    n, r, g = raw.s2("B08"), raw.s2("B04"), raw.s2("B03")
    s1 = up(raw.s2("B11"), 2)
    idx = {"NDVI": nd(n, r), "NDWI": nd(g, n), "MNDWI": nd(g, s1), "NDMI": nd(n, s1)}
    # thresholds exact: integer DNs put many pixels exactly on ratios such as 0.2; the normalized
    # difference of the integer DN is one correctly rounded float64 division, so comparing it with
    # the float64 threshold is the exact comparison (a pixel on the threshold is not above it)
    f32 = {k: nd(*(np.rint(a * 1e4) for a in ab)) for k, ab in
           {"NDVI": (n, r), "NDWI": (g, n), "MNDWI": (g, s1)}.items()}
    for t in of(built, "s2_index_stat"):
        name, stat = t.id.split("/")[-2:]
        if name in idx:
            check(t, {"mean": np.nanmean, "median": np.nanmedian}[stat](idx[name]))
    for t in of(built, "s2_veg_share"):
        check(t, 100 * (f32["NDVI"] > t.reference[1].arguments["value"]).mean())
    areas = of(built, "s2_water_area")
    for t in areas:
        i = t.reference[0].arguments["index"]
        if i in f32:
            thr = t.reference[1].arguments["value"]
            check(t, (f32[i] > thr).sum() * 10 * 10 / 1e6)
            assert t.answer.unit == "km2" and t.answer.tolerance == pytest.approx(0.01 * t.answer.value, abs=1e-3)
    for t in of(built, "s2_nir_water"):
        mask = n < t.reference[0].arguments["value"]
        check(t, mask.sum() * 100 / 1e6 if t.answer.unit == "km2" else 100 * mask.mean())


def test_builtup_ndbi_answers_are_exact_on_the_stored_dn(built, raw, data_root):
    """NDBI = (S1 − N)/(S1 + N) (Zha et al. 2003) of the integer DN (B11 repeated 2 × 2 onto the
    10 m grid), > t exactly; area from 10 m × 10 m cells divided by the UTM areal scale factor
    at each cell centre (pyproj), e.g. NDBI > 0.1 about 30.23 km²."""
    from pyproj import Proj

    s1, n = np.rint(up(raw.s2("B11"), 2) * 1e4), np.rint(raw.s2("B08") * 1e4)
    ndbi = nd(s1, n)
    with rasterio.open(raw.root / "s2l1c/IMG_DATA/T33UUU_20170216T102101_B08.jp2") as src:
        t, crs = src.transform, src.crs
    rows, cols = n.shape
    xx, yy = np.meshgrid(t.c + 10 * (np.arange(cols) + 0.5), t.f - 10 * (np.arange(rows) + 0.5))
    p = Proj(crs)
    cell = 100.0 / p.get_factors(*p(xx, yy, inverse=True)).areal_scale
    tasks = of(built, "s2_builtup_share")
    assert any(x.id.endswith("NDBI_gt0.1/km2") for x in tasks)
    for task in tasks:
        thr = task.reference[1].arguments["value"]
        hit = ndbi > thr
        if task.answer.unit == "km2":
            check(task, cell[hit].sum() / 1e6)
        else:
            check(task, 100 * hit.sum() / np.isfinite(ndbi).sum())


def ls_ndvi(raw, s):
    return nd(raw.ls(s, "b4"), raw.ls(s, "b3"))


def test_landsat_scene_statistics(built, raw):
    for t in of(built, "ls_mean_ndvi"):
        check(t, np.nanmean(ls_ndvi(raw, t.data[0])))
    for t in of(built, "ls_moisture_stress"):
        s = t.data[0]
        v = nd(raw.ls(s, "b4"), raw.ls(s, "b5"))
        check(t, 100 * (v[np.isfinite(v)] < 0.2).mean())
    for t in of(built, "ls_simple_ratio"):
        s = t.data[0]
        check(t, np.nanmean(raw.ls(s, "b4") / raw.ls(s, "b3")))
    for tpl, cls in (("ls_cloud_share", [4]), ("ls_clear_share", [0]), ("ls_snow_share", [3])):
        for t in of(built, tpl):
            fm = raw.fmask(t.data[0])
            assert t.reference[0].arguments["classes"] == cls
            check(t, 100 * np.isin(fm[fm != 255], cls).mean())
    for t in of(built, "ls_clear_ndvi"):
        s = t.data[0]
        v = ls_ndvi(raw, s)
        ok = np.isfinite(v) & np.isin(raw.fmask(s), [0, 1])
        check(t, v[ok].mean())


def test_landsat_change_and_comparisons(built, raw):
    for t in of(built, "ls_ndvi_change"):
        early, late = t.data
        check(t, np.nanmean(ls_ndvi(raw, late) - ls_ndvi(raw, early)))
    for t in of(built, "ls_change_direction"):
        d = np.nanmean(ls_ndvi(raw, t.data[1]) - ls_ndvi(raw, t.data[0]))
        assert t.answer.value == ("C" if abs(d) < 0.02 else "A" if d > 0 else "B"), (t.id, d)
    for t in of(built, "ls_greenest"):
        means = [np.nanmean(ls_ndvi(raw, s)) for s in t.data]
        assert t.answer.value == "ABC"[int(np.argmax(means))], (t.id, means)
        assert list(t.answer.options.values()) == sorted(t.answer.options.values())


def _decimal_year(iso):
    d = dt.date.fromisoformat(iso)
    return d.year + (d.timetuple().tm_yday - 1) / (366 if d.year % 4 == 0 else 365)


def _series(raw, data_root, scenes, index):
    from earthrl.envs.data.catalog import catalog  # only for the scene dates

    cat = catalog(data_root)
    vals = []
    for s in scenes:
        b3, b4, b5 = raw.ls(s, "b3"), raw.ls(s, "b4"), raw.ls(s, "b5")
        v = nd(b4, b3) if index == "NDVI" else nd(b4, b5)
        ok = np.isfinite(v) & np.isin(raw.fmask(s), [0, 1])
        vals.append(v[ok].mean())
    return np.array([_decimal_year(cat[s].date) for s in scenes]), np.array(vals)


def test_time_series_sen_slope_and_mann_kendall(built, raw, data_root):
    checked = 0
    mk = {t.id.replace("ts_mk_trend", ""): t for t in of(built, "ts_mk_trend")}
    for t in of(built, "ts_sen_slope"):
        index = t.reference[0].arguments["index"]
        if index not in ("NDVI", "NDMI"):
            continue
        years, vals = _series(raw, data_root, t.data, index)
        check(t, theilslopes(vals, years)[0])
        trend = pymannkendall.original_test(vals, alpha=0.05).trend
        m = mk[t.id.replace("ts_sen_slope", "")]
        assert m.answer.options[m.answer.value] == trend, (m.id, trend)
        checked += 1
    assert checked >= 8


def _mtl(path):
    out = {}
    for line in path.read_text().splitlines():
        m = re.match(r"\s*(\w+) = \"?([^\"]*)\"?$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _l1(root, sid, band, mtl, scale="REFLECTANCE"):
    with rasterio.open(root / f"{sid}_{band}.TIF") as src:
        dn = src.read(1).astype(np.float64)
    dn[(dn == 0) | (dn == -32768)] = np.nan
    key = band[1:]  # B10 -> 10, B6_VCID_1 -> 6_VCID_1
    return float(mtl[f"{scale}_MULT_BAND_{key}"]) * dn + float(mtl[f"{scale}_ADD_BAND_{key}"])


def test_landsat_level1_lst_independent(built):
    """Single-channel LST re-implemented from the MTL: L = ML·DN + AL, BT = K2 / ln(K1/L + 1),
    ε by the NDVI threshold method NDVI^THM (Sobrino et al. 2004: 0.973 - 0.047·ρ_red below NDVI
    0.2, 0.004·Pv + 0.986 up to 0.5, 0.99 above), LST = BT / (1 + (λ·BT/14388)·ln ε)."""
    root = data_dir("landsat8")
    lst_tasks = of(built, "l1_lst_stat")
    spec = {"LC08": ("B10", "B4", "B5", 10.895), "LE07": ("B6_VCID_1", "B3", "B4", 11.45)}
    for sid in sorted({t.data[0] for t in lst_tasks}):
        tb, rb, nb, lam = spec[sid[:4]]
        mtl = _mtl(root / f"{sid}_MTL.txt")
        rad = _l1(root, sid, tb, mtl, "RADIANCE")
        k = tb[1:]
        bt = float(mtl[f"K2_CONSTANT_BAND_{k}"]) / np.log(float(mtl[f"K1_CONSTANT_BAND_{k}"]) / rad + 1)
        sun = np.sin(np.deg2rad(float(mtl["SUN_ELEVATION"])))  # TOA reflectance, sun-corrected
        red = _l1(root, sid, rb, mtl) / sun
        ndvi = nd(_l1(root, sid, nb, mtl) / sun, red)
        pv = np.clip((ndvi - 0.2) / 0.3, 0, 1) ** 2
        eps = np.where(ndvi < 0.2, 0.973 - 0.047 * red, np.where(ndvi > 0.5, 0.99, 0.004 * pv + 0.986))
        lst = bt / (1 + (lam * bt / 14388.0) * np.log(eps))
        stats = {"mean": np.nanmean(lst), "median": np.nanmedian(lst), "max": np.nanmax(lst),
                 "min": np.nanmin(lst), "p10": np.nanpercentile(lst, 10), "p90": np.nanpercentile(lst, 90)}
        for t in lst_tasks:
            if t.data[0] == sid:
                check(t, stats[t.id.split("/")[-1]])
        for t in of(built, "l1_bt_stat"):
            if t.data[0] == sid and t.reference[0].arguments["band"] == tb and t.id.endswith("/mean"):
                check(t, np.nanmean(bt))
        for t in of(built, "l1_lst_share"):
            if t.data[0] == sid:
                v = lst[np.isfinite(lst)]
                check(t, 100 * (v > t.reference[1].arguments["value"]).mean())
