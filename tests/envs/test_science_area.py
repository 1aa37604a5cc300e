"""True areas on the file's ellipsoid against pyproj ``Geod`` geodesic polygon areas computed here, cell by
cell or row by row, on real rasters: a Sentinel-2 water mask reprojected to Web-Mercator
(EPSG:3857, a projected non-equal-area grid, with rasterio.warp), a Landsat UTM grid, and the
scene's vector polygons in UTM and in EPSG:3857."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from pyproj import CRS, Geod, Transformer
from rasterio.transform import array_bounds
from rasterio.warp import Resampling, calculate_default_transform, reproject

S2 = "S2_T33UUU_20170216"
LE7 = "LE70350322008118EDC00"


def _geod_cell(crs, t, r, c):
    """Geodesic area (m2) on the CRS's ellipsoid of the cell (r, c) of geotransform ``t``."""
    c_ = CRS.from_user_input(crs)
    e = c_.ellipsoid
    g = Geod(a=e.semi_major_metre, rf=e.inverse_flattening)
    corners = [t * (c, r), t * (c + 1, r), t * (c + 1, r + 1), t * (c, r + 1)]
    lon, lat = Transformer.from_crs(c_, c_.geodetic_crs, always_xy=True).transform(
        [p[0] for p in corners], [p[1] for p in corners])
    return abs(g.polygon_area_perimeter(lon, lat)[0])


@pytest.fixture(scope="module")
def mercator_mask(raw):
    """NDWI > 0 water mask of the real S2 scene, warped (nearest) from UTM 33N to EPSG:3857."""
    with rasterio.open(raw.root / "s2l1c/IMG_DATA/T33UUU_20170216T102101_B03.jp2") as src:
        crs, t = src.crs, src.transform
    g, n = raw.s2("B03"), raw.s2("B08")
    mask = ((g - n) / (g + n) > 0).astype(np.uint8)
    dt, w, h = calculate_default_transform(crs, "EPSG:3857", mask.shape[1], mask.shape[0],
                                           *array_bounds(*mask.shape, t))
    out = np.full((h, w), 255, np.uint8)
    reproject(mask, out, src_transform=t, src_crs=crs, dst_transform=dt, dst_crs="EPSG:3857",
              resampling=Resampling.nearest, dst_nodata=255)
    return out, dt


def test_mask_area_on_web_mercator_is_geodesic(make_env, run, mercator_mask):
    mask, t = mercator_mask
    env = make_env(S2, toolset="all")
    env.registry.write("water_3857", mask, kind="mask", crs="EPSG:3857", transform=t, units="mask",
                       parents=[], call=None)
    got = run(env, "mask_area", name="water_3857", unit="m2")
    assert not got.error, got.observation
    ones_per_row = (mask == 1).sum(axis=1)
    want = sum(n * _geod_cell("EPSG:3857", t, r, 0) for r, n in enumerate(ones_per_row) if n)
    assert got.result["area"] == pytest.approx(want, rel=1e-6)
    nominal = (mask == 1).sum() * abs(t.a * t.e)  # |det| rule: 1/cos²(52.5°) = 2.7x too large
    assert nominal / want == pytest.approx(2.69, abs=0.03)
    ca = run(env, "class_area", name="water_3857", unit="m2")
    assert ca.result["areas"][1] == pytest.approx(want, rel=1e-6)


def test_class_area_on_utm_is_geodesic_per_cell(make_env, run, raw):
    env = make_env(LE7, toolset="all")
    qa = run(env, "qa_mask", scene=LE7, classes=[0])
    with rasterio.open(raw.root / f"lsts/{LE7}/{LE7}_fmask.tif") as src:
        crs, t, fm = src.crs.to_wkt(), src.transform, src.read(1)
    want = sum(_geod_cell(crs, t, r, c) for r, c in zip(*np.nonzero(fm == 0)))
    ca = run(env, "class_area", name=qa.result["artifact"], unit="m2")
    assert ca.result["areas"][1] == pytest.approx(want, rel=1e-7)
    assert ca.result["areas"][1] != pytest.approx((fm == 0).sum() * 900.0, rel=1e-5)  # not nominal


def test_vector_area_geodesic_in_utm_and_web_mercator(make_env, run, raw):
    import geopandas as gpd

    ref = gpd.read_file(raw.root / "s2l1c/s2l1c_ref.gpkg")
    e = ref.crs.ellipsoid
    g = Geod(a=e.semi_major_metre, rf=e.inverse_flattening)
    want = sum(abs(g.geometry_area_perimeter(p)[0]) for p in ref.to_crs(ref.crs.geodetic_crs).geometry)
    env = make_env(S2, toolset="all")
    va = run(env, "vector_area", vector=f"{S2}:ref")
    assert va.result["area_m2"] == pytest.approx(want, rel=1e-5)  # UTM-straight vs geodesic edges
    merc = ref.to_crs("EPSG:3857")
    env.registry.register_file("ref_3857", "vector", units="polygons", parents=[], call=None,
                               writer=lambda p: merc.to_file(p, driver="GPKG"), crs="EPSG:3857")
    vm = run(env, "vector_area", vector="ref_3857")
    assert vm.result["area_m2"] == pytest.approx(want, rel=1e-5)
    assert merc.area.sum() / want > 2.5  # planar Web-Mercator area is ~1/cos² too large
