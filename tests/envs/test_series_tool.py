"""raster_series: dated rasters (user scenes indexed from real GeoTIFFs, and per-date artifacts)
or per-date values -> a series artifact that the trend tools take; slopes checked against scipy
and pymannkendall computed in the test."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pymannkendall as mk
import pytest
import rasterio
from affine import Affine
from scipy.stats import linregress, theilslopes

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import TaskSpec
from earthrl.launch.catalog_cmd import main as catalog_main

DATES = ["2014-07-01", "2015-06-20", "2016-07-12", "2017-07-01", "2018-08-02", "2019-07-01",
         "2020-06-25", "2021-07-09", "2022-07-01"]
SLOPE_K = 0.5  # K per year


def _decimal_year(iso: str) -> float:
    d = dt.date.fromisoformat(iso)
    start, end = dt.date(d.year, 1, 1), dt.date(d.year + 1, 1, 1)
    return d.year + (d - start).days / (end - start).days


@pytest.fixture
def lst(tmp_path, monkeypatch, capsys):
    """Per-date LST GeoTIFFs (K, tags) with a linear trend + noise, indexed as user scenes;
    returns (env, scene ids, per-date arrays with NaN fill)."""
    monkeypatch.setenv("EARTHRL_HOME", str(tmp_path / "home"))
    (tmp_path / "empty").mkdir()
    d = tmp_path / "lst"
    d.mkdir()
    rng = np.random.default_rng(0)
    arrays = []
    for date in DATES:
        a = 290 + SLOPE_K * (_decimal_year(date) - 2014) + rng.normal(0, 2.0, (10, 14))
        a[0, 0] = -9999  # fill
        arrays.append(a.astype("float32"))
        prof = dict(driver="GTiff", height=10, width=14, count=1, dtype="float32", nodata=-9999,
                    crs="EPSG:32613", transform=Affine(30, 0, 400000, 0, -30, 4400000))
        with rasterio.open(d / f"lst_{date}.tif", "w", **prof) as dst:
            dst.write(arrays[-1], 1)
            dst.update_tags(DATE=date, SENSOR="landsat-8")
            dst.update_tags(1, UNITS="K")
            dst.descriptions = ("LST",)
    assert catalog_main(["add", str(d)]) == 0
    capsys.readouterr()
    ids = [f"lst_landsat-8_{x.replace('-', '')}" for x in DATES]
    env = RSEnv(tmp_path / "empty", tmp_path / "ws", toolset="all")
    env.reset(TaskSpec(id="byo/lst-trend", question={"IF": "LST trend"}, data=ids, reference=[],
                       answer={"value": 0.5, "tolerance": 0.1}, skill="change_trend"))
    yield env, ids, [np.where(a == -9999, np.nan, a) for a in arrays]
    env.close()


def _step(env, tool, **arguments):
    r = env.step("<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>")
    return r


def _ok(env, tool, **arguments):
    r = _step(env, tool, **arguments)
    assert not r.error, r.observation
    return r.result


def test_series_of_scene_bands_feeds_the_trend_tools(lst):
    env, ids, arrays = lst
    means = np.array([np.nanmean(a.astype(np.float64)) for a in arrays])
    years = np.array([_decimal_year(x) for x in DATES])
    res = _ok(env, "raster_series", rasters=[f"{s}:LST" for s in reversed(ids)])  # any order in
    assert res["dates"] == DATES and res["units"] == "K" and res["stat"] == "mean"
    assert res["valid_px"] == [139] * len(DATES)
    assert np.allclose(res["values"], means, atol=1e-9)
    lin = _ok(env, "linear_trend", series=res["artifact"])
    ref = linregress(years, means)
    assert lin["slope_per_year"] == pytest.approx(ref.slope, rel=1e-9)
    assert lin["slope_per_year"] == pytest.approx(SLOPE_K, abs=0.15)  # the trend built into the data
    m = _ok(env, "mann_kendall", series=res["artifact"])
    want = mk.original_test(means)
    assert m["trend"] == want.trend == "increasing" and m["p_value"] == pytest.approx(want.p, rel=1e-9)
    assert m["sen_slope_per_year"] == pytest.approx(theilslopes(means, years)[0], rel=1e-9)


def test_series_of_artifacts_with_mask_and_median(lst):
    env, ids, arrays = lst
    arts = [_ok(env, "band_math", expr="a - 273.15", inputs={"a": f"{s}:LST"})["artifact"] for s in ids]
    mask = _ok(env, "threshold_mask", name=f"{ids[0]}:LST", op=">", value=290.0)["artifact"]
    res = _ok(env, "raster_series", rasters=arts, stat="median", mask=mask)
    sel = arrays[0] > 290.0
    want = [np.nanmedian(a.astype(np.float64)[sel] - 273.15) for a in arrays]
    assert res["dates"] == DATES and res["valid_px"] == [int(sel.sum())] * len(DATES)
    assert np.allclose(res["values"], want, atol=1e-4)
    lin = _ok(env, "linear_trend", series=res["artifact"])
    assert lin["slope_per_year"] == pytest.approx(linregress([_decimal_year(x) for x in DATES], want).slope, rel=1e-4)


def test_series_of_given_values_and_bad_calls(lst):
    env, ids, _ = lst
    vals = [0.31, 0.35, 0.30, 0.41, 0.44, 0.47]
    dates = ["2019-05-01", "2018-05-01", "2017-05-01", "2020-05-01", "2021-05-01", "2022-05-01"]
    res = _ok(env, "raster_series", date_values=vals, dates=dates, units="TVDI")
    order = np.argsort(dates)
    assert res["dates"] == sorted(dates) and res["values"] == [vals[i] for i in order]
    m = _ok(env, "mann_kendall", series=res["artifact"])
    assert m["sen_slope_per_step"] == pytest.approx(mk.original_test([vals[i] for i in order]).slope, rel=1e-9)
    bad = [({}, "not neither"), ({"rasters": [f"{ids[0]}:LST"], "date_values": [1.0], "dates": ["2020-01-01"]}, "not both"),
           ({"date_values": [1.0, 2.0], "dates": ["2020-01-01"]}, "1 dates for 2 date_values"),
           ({"date_values": [1.0], "dates": ["July"]}, "dates[0]: 'July' is not an ISO date"),
           ({"rasters": [f"{ids[0]}:LST", f"{ids[1]}:LST"], "dates": ["2020-01-01"]}, "1 dates for 2 rasters"),
           ({"rasters": ["nope_artifact"]}, "nope_artifact")]
    for arguments, text in bad:
        r = _step(env, "raster_series", **arguments)
        assert r.error and text in r.observation, (arguments, r.observation)
    cold = _ok(env, "band_math", expr="a * 0 + 0.5", inputs={"a": f"{ids[0]}:LST"})["artifact"]
    r = _step(env, "raster_series", rasters=[f"{ids[1]}:LST", cold])
    assert r.error and "units differ" in r.observation
