"""Data & Preprocessing tools (SimCRAFT domain; HiRS family SPA): catalogue search, reprojection,
cropping (bounding box or vector AOI), mosaicking, resampling, radiometric calibration and cloud
masking. Rasters are handled with rioxarray (GDAL warp); outputs are registered artifacts.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

import numpy as np
from affine import Affine
from pydantic import Field, model_validator

from earthrl.envs.data import calibration
from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.data.catalog import BQA_BITS, band_units, read_band, reflectance
from earthrl.envs.data.scene import scene_line
from earthrl.envs.tools.common import (
    ALL_SKILLS,
    MAX_RASTER_PIXELS,
    Layer,
    align,
    call_hash,
    check_raster_size,
    fmt,
    layer_source,
    load_layer,
    load_vector,
    out_name,
    write_raster,
)
from earthrl.envs.tools.registry import Args, ToolContext, ToolResult, register_tool

_DP = dict(domain="Data & Preprocessing", family="SPA")
_AOI_SKILLS = ("water_flood", "land_cover", "vegetation_drought", "change_trend")
RESAMPLING = Literal["nearest", "bilinear", "cubic", "average", "mode"]


def to_dataarray(layer: Layer):
    """The layer as a georeferenced ``xarray.DataArray`` (dims ``y, x``, CRS, transform, NaN nodata)."""
    import rioxarray  # noqa: F401  (registers .rio)
    import xarray as xr

    h, w = layer.arr.shape
    t = layer.transform
    da = xr.DataArray(layer.arr, dims=("y", "x"),
                      coords={"y": t.f + t.e * (np.arange(h) + 0.5), "x": t.c + t.a * (np.arange(w) + 0.5)})
    return da.rio.write_crs(layer.crs).rio.write_transform(t).rio.write_nodata(np.nan)


def extent(layer: Layer) -> tuple[float, float, float, float]:
    """``(left, bottom, right, top)`` of the layer's north-up grid in its CRS units."""
    h, w = layer.arr.shape
    t = layer.transform
    xs, ys = (t.c, t.c + t.a * w), (t.f, t.f + t.e * h)
    return min(xs), min(ys), max(xs), max(ys)


def write_da(ctx: ToolContext, name: str, da, like: list[Layer]) -> ToolResult:
    """Write a DataArray derived from ``like[0]`` keeping its kind (masks/classes back to uint8)."""
    arr = np.asarray(da.values, dtype=np.float32)
    kind = like[0].kind if like[0].kind in ("mask", "classes") else "raster"
    if kind != "raster":
        arr = np.where(np.isnan(arr), 255, arr).astype(np.uint8)
    return write_raster(ctx, name, arr, like, kind=kind, units=like[0].units,
                        transform=Affine(*tuple(da.rio.transform())[:6]), crs=da.rio.crs.to_string())


# ------------------------------------------------------------------------------------- catalogue


class SearchArgs(Args):
    sensor: str | None = Field(None, description="e.g. landsat-5, sentinel-2")
    start: str | None = Field(None, description="first date YYYY-MM-DD")
    end: str | None = Field(None, description="last date YYYY-MM-DD")
    band: str | None = Field(None, description="scenes having this band")


def _date(s: str | None, field: str) -> str | None:
    if s is None:
        return None
    try:
        return dt.date.fromisoformat(s.strip()[:10]).isoformat()
    except ValueError:
        raise ToolError("tool_error", f"{field}: {s!r} is not a date; use YYYY-MM-DD") from None


@register_tool("search_catalog", args=SearchArgs, description="Find task scenes by sensor, date range or band.",
               skills=ALL_SKILLS, output_kind="catalogue", **_DP)
def search_catalog(ctx: ToolContext, args: SearchArgs) -> ToolResult:
    """Scenes of the task matching every given filter: sensor (substring, case-insensitive),
    acquisition date in [start, end] (ISO dates, inclusive), having ``band``. Sorted by date.

    Raises:
        ToolError: a date is not ``YYYY-MM-DD``.
    """
    start, end = _date(args.start, "start"), _date(args.end, "end")
    hits = [s for s in ctx.registry.scenes.values()
            if (not args.sensor or args.sensor.lower().replace(" ", "-") in s.sensor)
            and (start is None or s.date >= start) and (end is None or s.date <= end)
            and (not args.band or any(b.lower() == args.band.lower() for b in s.bands))]
    hits.sort(key=lambda s: s.date)
    lines = [scene_line(s) for s in hits]
    return ToolResult(f"{len(hits)} scenes" + (":\n" + "\n".join(lines) if lines else ""),
                      {"scenes": [s.id for s in hits], "count": len(hits)})


# ------------------------------------------------------------------------------------- geometry


class ReprojectArgs(Args):
    name: str = Field(description="artifact or scene:band")
    crs: str = Field(description="target CRS, e.g. EPSG:4326")
    resampling: RESAMPLING = "nearest"


def _crs(text: str):
    from pyproj import CRS
    from pyproj.exceptions import CRSError

    try:
        return CRS.from_user_input(text.strip())
    except CRSError:
        raise ToolError("tool_error", f"crs: {text!r} is not a known CRS; give e.g. EPSG:4326") from None


def reproject_name(ctx: ToolContext, args: ReprojectArgs) -> str:
    """``<name>_<crs>``, the CRS as pyproj writes it, lower case, no colon (``..._epsg4326``).

    Raises:
        ToolError: unknown CRS.
    """
    tag = _crs(args.crs).to_string().replace(":", "").lower()
    return out_name(layer_source(ctx.registry, args.name), tag)


@register_tool("reproject", args=ReprojectArgs, description="Reproject a raster to another CRS.",
               skills=["change_trend", "land_cover"], output_kind="raster", output_name=reproject_name, **_DP)
def reproject(ctx: ToolContext, args: ReprojectArgs) -> ToolResult:
    """Warp a raster to ``crs`` (rioxarray ``rio.reproject``, GDAL warp; NaN/255 nodata kept).
    Masks stay uint8 masks. Output ``<name>_<epsg>``.

    Raises:
        ToolError: unknown CRS (field ``crs``; give ``EPSG:<code>``), a CRS the grid cannot be
            warped to, or an output above ``MAX_RASTER_PIXELS`` (``raster_too_large``).
    """
    from rasterio.enums import Resampling
    from rasterio.warp import calculate_default_transform

    layer = load_layer(ctx.registry, args.name)
    crs = _crs(args.crs)
    h, w = layer.arr.shape
    try:  # the size GDAL would choose (rio.reproject calls the same function)
        _, cols, rows = calculate_default_transform(layer.crs, crs, w, h, *extent(layer))
    except Exception as e:  # noqa: BLE001 - GDAL/PROJ refuse this pair of CRS
        raise ToolError("tool_error", f"crs: {layer.source} ({layer.crs}) cannot be warped to "
                        f"{args.crs!r} ({type(e).__name__}); give a projected or lon/lat CRS "
                        "such as EPSG:4326") from None
    check_raster_size("reproject", rows, cols, f"crs={args.crs!r}",
                      "give a CRS whose units fit the scene, e.g. its UTM zone or EPSG:4326")
    da = to_dataarray(layer).rio.reproject(crs, resampling=Resampling[args.resampling], nodata=np.nan)
    return write_da(ctx, reproject_name(ctx, args), da, [layer])


class ResampleArgs(Args):
    name: str = Field(description="artifact or scene:band")
    resolution: float = Field(gt=0, le=10000, description="pixel size in CRS units (m)")
    resampling: RESAMPLING = "average"


def resample_name(ctx: ToolContext, args: ResampleArgs) -> str:
    """``<name>_r<resolution>``."""
    return out_name(layer_source(ctx.registry, args.name), f"r{args.resolution:g}")


@register_tool("resample", args=ResampleArgs, description="Resample a raster to a pixel size.",
               skills=["change_trend", "land_cover"], output_kind="raster", output_name=resample_name, **_DP)
def resample(ctx: ToolContext, args: ResampleArgs) -> ToolResult:
    """Change the pixel size to ``resolution`` (CRS units, m for UTM) in the same CRS (rioxarray
    reproject; ``average`` aggregates, ``nearest`` replicates). Output ``<name>_r<res>``.

    Raises:
        ToolError: ``raster_too_large`` when the output would pass ``MAX_RASTER_PIXELS``
            (names the smallest ``resolution`` allowed).
    """
    from rasterio.enums import Resampling

    layer = load_layer(ctx.registry, args.name)
    left, bottom, right, top = extent(layer)
    smallest = float(f"{np.sqrt((right - left) * (top - bottom) / MAX_RASTER_PIXELS) * 1.01:.2g}")
    check_raster_size("resample", np.ceil((top - bottom) / args.resolution),
                      np.ceil((right - left) / args.resolution), f"resolution={args.resolution:g}",
                      f"use resolution >= {smallest:g}")
    da = to_dataarray(layer).rio.reproject(layer.crs, resolution=args.resolution,
                                           resampling=Resampling[args.resampling], nodata=np.nan)
    return write_da(ctx, resample_name(ctx, args), da, [layer])


class CropArgs(Args):
    """Arguments of ``crop_bbox``: finite numbers (the :class:`Args` rule); lon/lat boxes within
    [-180, 180] x [-90, 90] degrees."""

    name: str = Field(description="artifact or scene:band")
    bbox: list[float] = Field(min_length=4, max_length=4, description="[minx, miny, maxx, maxy]")
    bbox_crs: Literal["raster", "lonlat"] = Field("raster", description="raster CRS or lon/lat degrees")

    @model_validator(mode="after")
    def _lonlat_range(self):
        if self.bbox_crs == "lonlat":
            x0, y0, x1, y1 = self.bbox
            if not (all(-180 <= x <= 180 for x in (x0, x1)) and all(-90 <= y <= 90 for y in (y0, y1))):
                raise ValueError(f"bbox {self.bbox} is outside lon/lat; with bbox_crs='lonlat' "
                                 "give longitudes in [-180, 180] and latitudes in [-90, 90]")
        return self


def crop_bbox_name(ctx: ToolContext, args: CropArgs) -> str:
    """``<name>_crop_<call hash>``."""
    return out_name(layer_source(ctx.registry, args.name), "crop", call_hash(ctx))


@register_tool("crop_bbox", args=CropArgs, description="Crop a raster to a bounding box.",
               skills=_AOI_SKILLS, output_kind="raster", output_name=crop_bbox_name, **_DP)
def crop_bbox(ctx: ToolContext, args: CropArgs) -> ToolResult:
    """Clip to ``bbox`` = [minx, miny, maxx, maxy] in the raster's CRS (m for UTM) or in lon/lat
    degrees (EPSG:4326) (rioxarray ``rio.clip_box``; pixels touching the box are kept).

    A box in the raster's CRS is first cut to the raster's extent, so a box of any size (say
    ±1e300 m) crops exactly like the extent it covers.

    Raises:
        ToolError: ``empty_aoi`` when the box lies outside the raster extent (names the extent),
            ``tool_error`` when min >= max.
    """
    from rioxarray.exceptions import NoDataInBounds, OneDimensionalRaster

    layer = load_layer(ctx.registry, args.name)
    x0, y0, x1, y1 = args.bbox
    if x0 >= x1 or y0 >= y1:
        raise ToolError("tool_error", f"bbox: {args.bbox} needs minx < maxx and miny < maxy")
    da = to_dataarray(layer)
    b = da.rio.bounds()
    crs = "EPSG:4326" if args.bbox_crs == "lonlat" else None
    if crs is None:
        x0, y0, x1, y1 = max(x0, b[0]), max(y0, b[1]), min(x1, b[2]), min(y1, b[3])
    try:
        if x0 >= x1 or y0 >= y1:
            raise NoDataInBounds("the box and the raster do not overlap")
        out = da.rio.clip_box(x0, y0, x1, y1, crs=crs)
    except (NoDataInBounds, OneDimensionalRaster):
        raise ToolError("empty_aoi", f"bbox: {args.bbox} ({args.bbox_crs}) does not overlap {layer.source}, "
                        f"extent [{', '.join(fmt(v) for v in b)}] in {layer.crs}; give a bbox inside it") from None
    return write_da(ctx, crop_bbox_name(ctx, args), out, [layer])


class CropVectorArgs(Args):
    name: str = Field(description="artifact or scene:band")
    vector: str = Field(description="vector artifact or scene:vector")


def crop_vector_name(ctx: ToolContext, args: CropVectorArgs) -> str:
    """``<name>_clip_<call hash>``."""
    return out_name(layer_source(ctx.registry, args.name), "clip", call_hash(ctx))


@register_tool("crop_vector", args=CropVectorArgs, description="Crop a raster to vector polygons.",
               skills=_AOI_SKILLS, output_kind="raster", output_name=crop_vector_name, **_DP)
def crop_vector(ctx: ToolContext, args: CropVectorArgs) -> ToolResult:
    """Clip to the polygons of ``vector`` (reprojected to the raster CRS; rioxarray ``rio.clip``,
    pixel centres inside a polygon kept, the rest NaN/255, extent cut to the polygons' box).

    Raises:
        ToolError: ``empty_aoi`` when no polygon overlaps the raster.
    """
    from rioxarray.exceptions import NoDataInBounds

    layer = load_layer(ctx.registry, args.name)
    gdf, vparent = load_vector(ctx.registry, args.vector, "vector")
    gdf = gdf.to_crs(layer.crs)
    try:
        out = to_dataarray(layer).rio.clip(gdf.geometry.values, gdf.crs, drop=True)
    except NoDataInBounds:
        raise ToolError("empty_aoi", f"vector: no polygon of {args.vector} overlaps {layer.source}; "
                        "use a vector over the raster's extent") from None
    res = write_da(ctx, crop_vector_name(ctx, args), out, [layer])
    ctx.registry.get(res.artifact).parents.append(vparent)
    return res


class MosaicArgs(Args):
    names: list[str] = Field(min_length=2, max_length=20, description="rasters in one CRS")


def mosaic_name(ctx: ToolContext, args: MosaicArgs) -> str:
    """``mosaic_<call hash>``."""
    return out_name("mosaic", call_hash(ctx))


@register_tool("mosaic", args=MosaicArgs, description="Mosaic rasters into one.",
               skills=["change_trend", "land_cover"], output_kind="raster", output_name=mosaic_name, **_DP)
def mosaic(ctx: ToolContext, args: MosaicArgs) -> ToolResult:
    """Merge rasters of one CRS and pixel size onto their union extent (rioxarray
    ``merge_arrays``; where they overlap the first valid value wins).

    Raises:
        ToolError: different CRS (field ``names``; reproject first); a union extent above
            ``MAX_RASTER_PIXELS`` at the first raster's pixel size (``raster_too_large``).
    """
    from rioxarray.merge import merge_arrays

    layers = [load_layer(ctx.registry, n) for n in args.names]
    crs = {l.crs for l in layers}
    if len(crs) > 1:
        raise ToolError("tool_error", f"names: rasters are in different CRS ({', '.join(sorted(crs))}); "
                        "reproject them to one CRS first")
    boxes = np.array([extent(l) for l in layers])
    t = layers[0].transform
    check_raster_size("mosaic", (boxes[:, 3].max() - boxes[:, 1].min()) / abs(t.e),
                      (boxes[:, 2].max() - boxes[:, 0].min()) / abs(t.a), f"names={args.names}",
                      "mosaic rasters that lie close together, or resample the first one coarser")
    da = merge_arrays([to_dataarray(l) for l in layers], nodata=np.nan)
    return write_da(ctx, mosaic_name(ctx, args), da, layers)


# ------------------------------------------------------------------------------------- radiometry


class CalibArgs(Args):
    scene: str
    band: str = Field(description="e.g. B4, B10")
    product: Literal["toa_reflectance", "radiance", "brightness_temperature"] = "toa_reflectance"


def _calib_band(s, band: str) -> str:
    try:
        return s.band_name(band)
    except KeyError as e:
        raise ToolError("tool_error", f"band: {e.args[0]}") from None


def radiometric_calibration_name(ctx: ToolContext, args: CalibArgs) -> str:
    """``<toa|radiance|brightness>_<scene>_<band>``.

    Raises:
        ToolError: the scene has no such band.
    """
    s = ctx.registry.scene(args.scene)
    return out_name(args.product.split("_")[0], s.id, _calib_band(s, args.band))


@register_tool("radiometric_calibration", args=CalibArgs,
               description="DN to TOA reflectance, radiance or brightness temperature.",
               skills=["spectral_index", "lst_inversion"], output_kind="raster",
               sensors=["landsat-8", "landsat-7", "sentinel-2"], output_name=radiometric_calibration_name, **_DP)
def radiometric_calibration(ctx: ToolContext, args: CalibArgs) -> ToolResult:
    """Calibrate a Level-1 band (:mod:`earthrl.envs.data.calibration`): Landsat 8/7 from the MTL file —
    TOA reflectance (REFLECTANCE_MULT·DN + ADD) / sin(SUN_ELEVATION) (0-1), radiance
    W/(m²·sr·µm), brightness temperature K2/ln(K1/L+1) (K); Sentinel-2 L1C TOA reflectance =
    DN / 10000. Output ``<product>_<scene>_<band>`` float32, NaN on fill.

    Raises:
        ToolError: surface-reflectance scenes (Landsat lsts) have no DN to calibrate; the band
            lacks the product's constants (e.g. brightness temperature of a reflective band).
    """
    s = ctx.registry.scene(args.scene)
    b = _calib_band(s, args.band)
    raw, meta = read_band(s, b)
    units = {"toa_reflectance": "reflectance", "radiance": "W/(m2 sr um)", "brightness_temperature": "K"}
    if s.mtl is not None and b not in (s.qa_band, "DEM"):
        fn = {"toa_reflectance": calibration.toa_reflectance, "radiance": calibration.toa_radiance,
              "brightness_temperature": calibration.brightness_temperature}[args.product]
        try:
            arr = fn(raw, calibration.parse_mtl(s.mtl), b, s.nodata)
        except KeyError as e:
            raise ToolError("tool_error", f"product: {e.args[0]}; use toa_reflectance for B1-B9, "
                            "brightness_temperature for thermal bands") from None
    elif s.sensor == "sentinel-2" and args.product == "toa_reflectance":
        arr = calibration.s2_toa_reflectance(raw)
    else:
        raise ToolError("tool_error", f"scene: {s.id} ({s.sensor}, band {b}) has no DN calibration for "
                        f"{args.product}; Landsat 8/7 Level-1 bands take all products, Sentinel-2 L1C "
                        "only toa_reflectance")
    layer = Layer(arr, meta["crs"], meta["transform"], units[args.product], f"{s.id}:{b}", "band",
                  s.sensor, s.date)
    return write_raster(ctx, radiometric_calibration_name(ctx, args), arr, [layer],
                        kind="raster", units=units[args.product])


def bqa_field(qa: np.ndarray, name: str) -> np.ndarray:
    """Value of the Landsat Collection 1 BQA bit field ``name`` (:data:`BQA_BITS`) per pixel."""
    bit, width = BQA_BITS[name]
    return (qa.astype(np.int64) >> bit) & ((1 << width) - 1)


def _s2_cloud(s) -> tuple[np.ndarray, Layer]:
    names = {"blue": "B02", "green": "B03", "swir": "B11", "cirrus": "B10"}
    ls = align([load_layer_scene(s, b) for b in names.values()])
    blue, green, swir, cirrus = (l.arr for l in ls)
    with np.errstate(all="ignore"):
        ndsi = (green - swir) / (green + swir)
        cloud = ((blue > 0.2) & (ndsi < 0.4)) | (cirrus > 0.012)
    cloud = cloud.astype(np.uint8)
    cloud[np.isnan(blue)] = 255
    return cloud, ls[0]


def load_layer_scene(s, band: str) -> Layer:
    """A band of scene ``s`` as a :class:`Layer` (no registry lookup; the caller checked ``s``)."""
    arr, meta = reflectance(s, band)
    return Layer(arr, meta["crs"], meta["transform"], band_units(s, band), f"{s.id}:{band}", "band",
                 s.sensor, s.date)


class CloudArgs(Args):
    scene: str
    include_shadow: bool = Field(True, description="also mask cloud shadow (Landsat)")


def cloud_mask_name(ctx: ToolContext, args: CloudArgs) -> str:
    """``cloud_<scene>``, or ``cloudshadow_<scene>`` with shadow on a Landsat scene."""
    s = ctx.registry.scene(args.scene)
    prefix = "cloudshadow" if args.include_shadow and s.sensor != "sentinel-2" else "cloud"
    return out_name(prefix, s.id)


@register_tool("cloud_mask", args=CloudArgs, description="Cloud (and shadow) mask of a scene.",
               skills=["cloud_masking"], output_kind="mask",
               sensors=["landsat-5", "landsat-7", "landsat-8", "sentinel-2"], output_name=cloud_mask_name, **_DP)
def cloud_mask(ctx: ToolContext, args: CloudArgs) -> ToolResult:
    """uint8 mask (1 cloud[/shadow], 0 clear, 255 fill) by the scene's QA:

    - Landsat 5/7 lsts: CFmask codes 4 cloud (+ 2 cloud shadow).
    - Landsat 8/7 Level-1 BQA (USGS Collection 1 bits, :data:`BQA_BITS`): cloud bit 4 set, or
      cloud confidence (bits 5-6) high (3), or cirrus confidence (bits 11-12) high
      (+ cloud-shadow confidence bits 7-8 high); fill bit 0 -> 255.
    - Sentinel-2 L1C (no QA band here), band tests on TOA reflectance: cloud where blue B02 > 0.2
      and NDSI (B03-B11)/(B03+B11) < 0.4 (bright, not snow; Fmask "basic test" spirit), or cirrus
      B10 > 0.012 (Sen2Cor cirrus threshold); at 10 m (B11/B10 replicated).

    Output ``cloud_<scene>`` (``cloudshadow_<scene>`` with shadow).
    """
    s = ctx.registry.scene(args.scene)
    if s.qa_kind == "fmask":
        raw, meta = read_band(s, s.qa_band)
        m = np.isin(raw, [4, 2] if args.include_shadow else [4]).astype(np.uint8)
        m[raw == 255] = 255
        like = Layer(m, meta["crs"], meta["transform"], "mask", f"{s.id}:{s.qa_band}", "band", s.sensor, s.date)
    elif s.qa_kind == "bqa":
        raw, meta = read_band(s, s.qa_band)
        m = (bqa_field(raw, "cloud") == 1) | (bqa_field(raw, "cloud_confidence") == 3) \
            | (bqa_field(raw, "cirrus_confidence") == 3)
        if args.include_shadow:
            m |= bqa_field(raw, "cloud_shadow_confidence") == 3
        m = m.astype(np.uint8)
        m[bqa_field(raw, "fill") == 1] = 255
        like = Layer(m, meta["crs"], meta["transform"], "mask", f"{s.id}:{s.qa_band}", "band", s.sensor, s.date)
    elif s.sensor == "sentinel-2":
        m, like = _s2_cloud(s)
    else:
        raise ToolError("tool_error", f"scene: {s.id} ({s.sensor}) has no QA band or cloud test")
    res = write_raster(ctx, cloud_mask_name(ctx, args), m, [like], kind="mask", units="mask")
    valid = m != 255
    pct = 100.0 * float((m[valid] == 1).mean()) if valid.any() else float("nan")
    res.text += f"; cloud {fmt(pct)} % of valid px"
    res.data["cloud_pct"] = pct
    return res
