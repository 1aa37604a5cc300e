"""raster_series over a long multi-year series of dated GeoTIFFs (user scenes): yearly and seasonal
aggregation checked against pandas groupby computed in the test, and the artifacts of the series
kept on disk (the registry's in-memory arrays stay under its byte budget)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import rasterio
from affine import Affine

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import TaskSpec
from earthrl.launch.catalog_cmd import main as catalog_main

SHAPE = (200, 250)  # 200 kB per float32 raster
# 3 years, every ~30 days from mid-December 2017: every month and the DJF year boundary
DATES = [d.date().isoformat() for d in pd.date_range("2017-12-15", "2020-12-31", freq="30D")]


@pytest.fixture
def series(home, tmp_path, monkeypatch, capsys):
    """Dated LST GeoTIFFs (K, seasonal cycle + trend + noise) indexed as user scenes, an env over
    them with a 1 MiB artifact memory budget; yields (env, scene ids, arrays with NaN fill)."""
    monkeypatch.setenv("EARTHRL_ARTIFACT_CACHE_MB", "1")
    d = tmp_path / "lst"
    d.mkdir()
    rng = np.random.default_rng(5)
    arrays = []
    for date in DATES:
        doy = pd.Timestamp(date).day_of_year
        a = 290 + 10 * np.sin(2 * np.pi * (doy - 100) / 365) + 0.3 * (int(date[:4]) - 2018) \
            + rng.normal(0, 1.5, SHAPE)
        a[:3, :3] = -9999
        arrays.append(a.astype("float32"))
        with rasterio.open(d / f"lst_{date}.tif", "w", driver="GTiff", height=SHAPE[0], width=SHAPE[1], count=1,
                           dtype="float32", nodata=-9999, crs="EPSG:3857",
                           transform=Affine(1000, 0, 1e6, 0, -1000, 4e6)) as dst:
            dst.write(arrays[-1], 1)
            dst.update_tags(1, UNITS="K")
            dst.descriptions = ("LST",)
    assert catalog_main(["add", str(d), "--pattern", "lst_{date}.tif"]) == 0
    capsys.readouterr()
    ids = [f"lst_unknown_{x.replace('-', '')}" for x in DATES]
    env = RSEnv(tmp_path / "empty", tmp_path / "ws", toolset="all")
    env.reset(TaskSpec(id="byo/lst-years", question={"IF": "yearly LST"}, data=ids, reference=[],
                       answer={"value": 0.0}, skill="change_trend"))
    yield env, ids, [np.where(a == -9999, np.nan, a).astype(np.float64) for a in arrays]
    env.close()


def _ok(env, tool, **arguments):
    r = env.step("<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>")
    assert not r.error, r.observation
    return r.result


def _season(ts: pd.Timestamp) -> str:
    name = {12: "DJF", 1: "DJF", 2: "DJF", 3: "MAM", 4: "MAM", 5: "MAM", 6: "JJA", 7: "JJA", 8: "JJA"}.get(ts.month, "SON")
    return f"{ts.year + (ts.month == 12)}-{name}"


def test_yearly_aggregation_of_a_long_series_matches_pandas_and_stays_on_disk(series):
    env, ids, arrays = series
    arts = [_ok(env, "band_math", expr="a - 273.15", inputs={"a": f"{s}:LST"})["artifact"] for s in ids]
    reg = env.registry
    held = reg.in_memory()
    assert sum(held.values()) <= 1 << 20 and len(held) < len(arts) // 4  # 36 x 200 kB: most are on disk only
    assert all(reg.get(a).path.is_file() for a in arts)
    res = _ok(env, "raster_series", rasters=arts, aggregate="year")
    per_date = pd.Series([np.nanmean(a) - 273.15 for a in arrays], index=pd.to_datetime(DATES))
    want = per_date.groupby(per_date.index.year).mean()
    assert res["periods"] == [str(y) for y in want.index] == ["2017", "2018", "2019", "2020"]
    assert res["dates"] == [f"{y}-01-01" for y in want.index]
    assert np.allclose(res["values"], want.to_numpy(), atol=1e-4)
    assert res["n_dates"] == per_date.groupby(per_date.index.year).size().tolist()
    assert res["per_date"]["dates"] == DATES and np.allclose(res["per_date"]["values"], per_date, atol=1e-4)
    assert sum(reg.in_memory().values()) <= 1 << 20  # reading them all back did not fill memory
    mx = _ok(env, "raster_series", rasters=[f"{s}:LST" for s in ids], aggregate="year", aggregate_stat="max")
    assert np.allclose(mx["values"], per_date.groupby(per_date.index.year).max().to_numpy() + 273.15, atol=1e-4)
    lin = _ok(env, "linear_trend", series=res["artifact"])
    assert lin["n"] == 4


def test_seasonal_aggregation_of_date_values_matches_pandas(series):
    env, _, _ = series
    rng = np.random.default_rng(1)
    vals = rng.normal(0.4, 0.1, len(DATES)).round(4)
    res = _ok(env, "raster_series", date_values=vals.tolist(), dates=DATES, units="NDVI", aggregate="season",
              aggregate_stat="median")
    s = pd.Series(vals, index=pd.to_datetime(DATES))
    labels = [_season(t) for t in s.index]
    want = s.groupby(labels, sort=False).median()
    assert res["periods"] == list(want.index)
    assert res["periods"][:3] == ["2018-DJF", "2018-MAM", "2018-JJA"]  # 2017-12-15 falls in DJF 2018
    assert res["dates"][:2] == ["2017-12-01", "2018-03-01"]
    assert np.allclose(res["values"], want.to_numpy(), atol=1e-12)
    assert res["n_dates"] == s.groupby(labels, sort=False).size().tolist()
    r = env.step('<tool_call>{"name": "raster_series", "arguments": {"date_values": [1.0], "dates": ["2020-01-01"], '
                 '"aggregate": "month"}}</tool_call>')
    assert r.error and "aggregate" in r.observation
