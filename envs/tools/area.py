"""True area on the data's own ellipsoid, for raster cells and vector geometries on any CRS.

One rule for every area EarthRL reports (``mask_area``, ``class_area``, ``change_detection``,
``vector_area`` and the total area of every vector artifact): coordinates are mapped with pyproj
from the data's CRS to the Lambert cylindrical equal-area projection on that CRS's *own*
geodetic datum (so no datum shift, and the file's ellipsoid: WGS 84, GRS 80, Clarke 1866 ...),
and areas are measured there. The projection is equal-area on the ellipsoid (Snyder 1987, *Map
Projections — A Working Manual*, USGS PP 1395, §10, ellipsoidal form with q(φ)), so a planar
area in it is the area on the ellipsoid.

Raster cells (:func:`cell_areas`): each cell is the quadrilateral of its four corners (from the
geotransform, rotated grids included), the corners mapped as above and its area taken by the
shoelace formula. For a north-up grid whose CRS is geographic or a cylindrical projection
(:data:`ROW_CONSTANT_METHODS`: Web-Mercator EPSG:3857, Mercator, Equidistant Cylindrical ...)
cell edges are parallels and meridians, which are straight in the equal-area map, so the areas
are exact and one cell per row is computed; for other projections (UTM, conic, rotated grids)
every cell is computed, exact to second order in cell size / Earth radius (≈1e-12 relative for
10-30 m cells). A cell containing a pole is not supported.

Vectors (:func:`geometry_areas`): edges are straight lines in the data's own CRS (as drawn, and
as raster cells are), densified every :data:`DENSIFY_M` m (or :data:`DENSIFY_DEG`° on a
geographic CRS) before mapping, so a polygon traced from a mask has the area of its cells.
Geodesic-edge polygon areas (pyproj ``Geod``, Karney 2013) agree with this to ~1e-6 for
polygons of edges under a few km.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from affine import Affine

from earthrl.envs.data.artifacts import ToolError

#: projection methods (PROJ/EPSG names) of cylindrical maps: on a north-up grid, every cell of a
#: row has the same area, so :func:`cell_areas` computes one per row.
ROW_CONSTANT_METHODS = frozenset({
    "Popular Visualisation Pseudo Mercator", "Mercator (variant A)", "Mercator (variant B)",
    "Mercator (Spherical)", "Equidistant Cylindrical", "Equidistant Cylindrical (Spherical)",
    "Lambert Cylindrical Equal Area", "Lambert Cylindrical Equal Area (Spherical)"})
#: vertex spacing (CRS units: m) and (degrees on a geographic CRS) to which vector edges are
#: densified before they are mapped to the equal-area projection.
DENSIFY_M, DENSIFY_DEG = 1000.0, 0.01
_ROWS_PER_CHUNK = 512


def _crs(crs, field: str):
    from pyproj import CRS
    from pyproj.exceptions import CRSError

    if crs is None:
        raise ToolError("tool_error", f"{field}: the data has no CRS, so its area cannot be measured; "
                        "use a georeferenced raster/vector")
    try:
        c = CRS.from_user_input(crs if isinstance(crs, (str, CRS)) else str(crs))
    except CRSError as e:
        raise ToolError("tool_error", f"{field}: CRS {str(crs)[:60]!r} is not understood ({e}); "
                        "use data with an EPSG/WKT CRS") from None
    if c.geodetic_crs is None:
        raise ToolError("tool_error", f"{field}: CRS {c.name!r} has no geodetic datum (ellipsoid), so "
                        "areas on the Earth cannot be measured; use data in a geographic or projected CRS")
    return c


@lru_cache(maxsize=32)
def _to_equal_area(crs_wkt: str, lon_0: float):
    from pyproj import CRS, Transformer
    from pyproj.crs import ProjectedCRS
    from pyproj.crs.coordinate_operation import LambertCylindricalEqualAreaConversion

    src = CRS.from_wkt(crs_wkt)
    cea = ProjectedCRS(LambertCylindricalEqualAreaConversion(0.0, lon_0), geodetic_crs=src.geodetic_crs)
    return Transformer.from_crs(src, cea, always_xy=True)


def equal_area_transformer(crs, lon_0: float = 0.0, field: str = "name"):
    """pyproj ``Transformer`` (``always_xy``) from ``crs`` to the Lambert cylindrical equal-area
    projection (standard parallel 0°, central meridian ``lon_0``°) on ``crs``'s own geodetic
    datum; planar areas of its output, in m², are areas on that datum's ellipsoid.

    Raises:
        ToolError: ``crs`` is missing, unreadable or has no geodetic datum (``field`` named).
    """
    return _to_equal_area(_crs(crs, field).to_wkt(), float(lon_0))


def _centre_lon(c, x: float, y: float) -> float:
    from pyproj import Transformer

    if c.is_geographic:
        return float(x) if abs(x) <= 180 else 0.0
    lon, _ = Transformer.from_crs(c, c.geodetic_crs, always_xy=True).transform(x, y)
    return float(lon) if np.isfinite(lon) else 0.0


def _quad_areas(x: np.ndarray, y: np.ndarray, half_turn: float) -> np.ndarray:
    """Shoelace areas of the cells of a corner grid ``(r+1, c+1)`` -> ``(r, c)``; x differences
    are wrapped into ±half_turn (a cell across the map's antimeridian)."""
    def rel(a):
        return (a - x[:-1, :-1] + half_turn) % (2 * half_turn) - half_turn

    x1, x2, x3 = rel(x[:-1, 1:]), rel(x[1:, 1:]), rel(x[1:, :-1])
    y0 = y[:-1, :-1]
    y1, y2, y3 = y[:-1, 1:] - y0, y[1:, 1:] - y0, y[1:, :-1] - y0
    return 0.5 * np.abs(x1 * y2 - x2 * y1 + x2 * y3 - x3 * y2)


@lru_cache(maxsize=32)
def _cell_areas(crs_wkt: str, t: tuple, rows: int, cols: int) -> np.ndarray:
    from pyproj import CRS

    c = CRS.from_wkt(crs_wkt)
    tr = Affine(*t[:6])
    north_up = tr.b == 0 and tr.d == 0
    method = c.coordinate_operation.method_name if c.coordinate_operation is not None else ""
    per_row = north_up and (c.is_geographic or method in ROW_CONSTANT_METHODS)
    ncols = 1 if per_row else cols
    cx, cy = tr.c + tr.a * ncols / 2 + tr.b * rows / 2, tr.f + tr.d * ncols / 2 + tr.e * rows / 2
    fwd = _to_equal_area(crs_wkt, _centre_lon(c, cx, cy))
    half_turn = np.pi * c.ellipsoid.semi_major_metre
    out = np.empty((rows, ncols), dtype=np.float64)
    jj = np.arange(ncols + 1, dtype=np.float64)
    for r0 in range(0, rows, _ROWS_PER_CHUNK):
        r1 = min(rows, r0 + _ROWS_PER_CHUNK)
        ii, jg = np.meshgrid(np.arange(r0, r1 + 1, dtype=np.float64), jj, indexing="ij")
        x, y = fwd.transform(tr.c + tr.a * jg + tr.b * ii, tr.f + tr.d * jg + tr.e * ii)
        out[r0:r1] = _quad_areas(np.asarray(x), np.asarray(y), half_turn)
    if not np.isfinite(out).all():
        raise ToolError("tool_error", "name: some cells of the grid fall outside the valid area of its "
                        f"CRS {c.name!r} (their area cannot be computed); crop the raster to its valid extent")
    out.setflags(write=False)
    return out


def cell_areas(crs, transform: Affine, shape: tuple[int, int], field: str = "name") -> np.ndarray:
    """Area of every cell of a grid on the CRS's ellipsoid, m², float64 (read-only, cached per
    grid): shape ``(rows, 1)`` (broadcasts over columns) for a north-up geographic or cylindrical
    grid, else ``(rows, cols)``. Method in the module docstring.

    Raises:
        ToolError: no/unknown CRS or no geodetic datum; a singular transform; cells outside the
            CRS's valid area (``field`` named).
    """
    c = _crs(crs, field)
    t = Affine(*tuple(transform)[:6])
    if t.determinant == 0:
        raise ToolError("tool_error", f"{field}: the grid's geotransform is singular (zero pixel size); "
                        "fix the raster's georeferencing")
    return _cell_areas(c.to_wkt(), tuple(t)[:6], int(shape[0]), int(shape[1]))


def geometry_areas(gdf, field: str = "vector") -> np.ndarray:
    """Area in m² of each geometry of a GeoDataFrame on its CRS's ellipsoid (float64, one per row;
    0 for points/lines and empty geometries): edges densified in the data's CRS
    (:data:`DENSIFY_M` / :data:`DENSIFY_DEG`), mapped by :func:`equal_area_transformer`.

    Raises:
        ToolError: the vector has no CRS, or it is unreadable / has no geodetic datum.
    """
    import shapely

    c = _crs(gdf.crs, field)
    if len(gdf) == 0:
        return np.zeros(0)
    geoms = gdf.geometry.values
    x0, y0, x1, y1 = (float(v) for v in gdf.total_bounds)
    fwd = equal_area_transformer(c, _centre_lon(c, 0.5 * (x0 + x1), 0.5 * (y0 + y1)), field)
    dense = shapely.segmentize(np.asarray(geoms), DENSIFY_DEG if c.is_geographic else DENSIFY_M)
    mapped = shapely.transform(dense, lambda xy: np.column_stack(fwd.transform(xy[:, 0], xy[:, 1])))
    return np.asarray(shapely.area(mapped), dtype=np.float64)


__all__ = ["DENSIFY_DEG", "DENSIFY_M", "ROW_CONSTANT_METHODS", "cell_areas", "equal_area_transformer",
           "geometry_areas"]
