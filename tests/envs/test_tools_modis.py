"""MODIS MCD12C1 2019 IGBP land cover (lat/lon grid): crop by lon/lat, class areas on the
file's ellipsoid (Clarke 1866), water mask area — against hand computations on the raw GeoTIFF
(closed-form ellipsoidal zone areas, independent of EarthRL's code)."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio

MODIS = "MODIS_MCD12C1_2019"


@pytest.fixture(scope="session")
def modis_tif():
    from earthrl.models.fetch import MCD12C1_TIF, FetchError, fetch_data

    try:
        return fetch_data("mcd12c1") / MCD12C1_TIF
    except FetchError as e:
        pytest.fail(f"MODIS land cover missing ({e}): run `earthrl fetch data mcd12c1`", pytrace=False)



def _zone(lat_deg, dlon_deg, a, rf):
    """Area (m2) on the ellipsoid (a, 1/f) from the equator to ``lat_deg`` over ``dlon_deg`` of
    longitude: (b²·Δλ/2)·[sinφ/(1-e²sin²φ) + ln((1+e·sinφ)/(1-e·sinφ))/(2e)]."""
    f = 1 / rf
    e2 = f * (2 - f)
    e, b2 = np.sqrt(e2), (a * (1 - f)) ** 2
    s = np.sin(np.deg2rad(lat_deg))
    return b2 * np.deg2rad(dlon_deg) / 2 * (s / (1 - e2 * s * s) + np.log((1 + e * s) / (1 - e * s)) / (2 * e))


def _ellipsoid(tif):
    """(a, 1/f) of the file's own ellipsoid (Clarke 1866 for MCD12C1)."""
    from pyproj import CRS

    with rasterio.open(tif) as src:
        ell = CRS.from_wkt(src.crs.to_wkt()).ellipsoid
    assert ell.name == "Clarke 1866"
    return ell.semi_major_metre, ell.inverse_flattening


def _cell_area(lat_top, rows, tif):
    """Ellipsoidal area (m2) of 0.05 deg cells in each of ``rows`` rows starting at ``lat_top``."""
    a, rf = _ellipsoid(tif)
    return np.abs(np.diff(_zone(lat_top - 0.05 * np.arange(rows + 1), 0.05, a, rf)))


def test_crop_lonlat_and_class_areas_on_the_ellipsoid(make_env, run, modis_tif):
    env = make_env(MODIS, toolset="all")
    md = run(env, "read_metadata", name=MODIS).result
    assert md["sensor"] == "modis" and md["date"] == "2019-01-01" and md["units"] == "IGBP class"
    assert "12 croplands" in md["classes"] and "0.05m 3600x7200 uint8" in md["bands"]
    r = run(env, "crop_bbox", name=f"{MODIS}:LC_Type1", bbox=[5.0, 47.0, 15.0, 55.0], bbox_crs="lonlat")
    assert not r.error, r.observation
    art = env.registry.get(r.result["artifact"])
    assert art.kind == "classes" and art.dtype == "uint8"
    with rasterio.open(modis_tif) as src:
        full = src.read(1)
    # Germany box: rows of lat 55..47 and cols of lon 5..15 on the 0.05 deg grid from (-180, 90)
    r0, c0 = int(round((90 - 55) / 0.05)), int(round((5 + 180) / 0.05))
    with rasterio.open(art.path) as src:
        got, t = src.read(1), src.transform
    assert got.shape == (160, 200) and t.c == pytest.approx(5.0) and t.f == pytest.approx(55.0)
    np.testing.assert_array_equal(got, full[r0:r0 + 160, c0:c0 + 200])
    ca = run(env, "class_area", name=r.result["artifact"])
    assert not ca.error, ca.observation
    rows = _cell_area(55.0, 160, modis_tif)[:, None]
    for cls in (0, 12, 4):  # water, croplands, deciduous broadleaf forest
        assert ca.result["areas"][cls] == pytest.approx(((got == cls) * rows).sum() / 1e6, rel=1e-9)
    total = sum(ca.result["areas"].values())
    box = (_zone(55.0, 10, *_ellipsoid(modis_tif)) - _zone(47.0, 10, *_ellipsoid(modis_tif))) / 1e6
    assert total == pytest.approx(box, rel=1e-9)  # ~ 7.6e5 km2
    assert 6e5 < total < 9e5


def test_water_mask_area_globally(make_env, run, modis_tif):
    env = make_env(MODIS, toolset="all")
    m = run(env, "threshold_mask", name=f"{MODIS}:LC_Type1", op="==", value=0)
    assert not m.error, m.observation
    a = run(env, "mask_area", name=m.result["artifact"])
    with rasterio.open(modis_tif) as src:
        full = src.read(1)
    rows = _cell_area(90.0, 3600, modis_tif)[:, None]
    want = ((full == 0) * rows).sum() / 1e6
    assert a.result["area"] == pytest.approx(want, rel=1e-9)
    assert 3.4e8 < want < 3.8e8  # water ~ 70 % of Earth's 5.1e8 km2
    assert a.result["pixel_m2"] is None and "lat/lon" in a.observation
