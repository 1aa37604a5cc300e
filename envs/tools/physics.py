"""Physical & GIS Analytics tools (SimCRAFT domain; HiRS family PRA): named spectral indices
(spyndex, through :func:`earthrl.envs.tools.mini.spectral_index`), fractional vegetation cover,
land-surface temperature (single-channel), TVDI, terrain (xarray-spatial slope/aspect/hillshade),
zonal statistics and areas per class.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.tools.registry import Args, ToolContext, ToolResult, register_tool
from earthrl.envs.tools.mini import IndexArgs, spectral_index
from earthrl.envs.tools.common import (align, fmt, load_layer, out_name, same_grid, valid_values,
                                       write_raster)
from earthrl.envs.tools.preprocess import to_dataarray

_PG = dict(domain="Physical & GIS Analytics")
_OPTICAL = ("sentinel-2", "landsat-5", "landsat-7", "landsat-8")

# ------------------------------------------------------------------------------- named indices

#: shortcut tool -> (spyndex index, description, skills)
NAMED_INDICES = {
    "ndvi": ("NDVI", "NDVI raster of a scene.", ["spectral_index", "vegetation_drought"]),
    "ndwi": ("NDWI", "NDWI (McFeeters, green/NIR) raster of a scene.", ["spectral_index", "water_flood"]),
    "mndwi": ("MNDWI", "MNDWI (green/SWIR1) raster of a scene.", ["spectral_index", "water_flood"]),
    "ndbi": ("NDBI", "NDBI built-up index raster of a scene.", ["spectral_index", "land_cover"]),
    "evi": ("EVI", "EVI raster of a scene.", ["spectral_index", "vegetation_drought"]),
    "savi": ("SAVI", "SAVI (L=0.5) raster of a scene.", ["spectral_index", "vegetation_drought"]),
    "nbr": ("NBR", "NBR burn ratio raster of a scene.", ["spectral_index", "change_trend"]),
    "ndsi": ("NDSI", "NDSI snow index raster of a scene.", ["spectral_index", "cloud_masking"]),
}


class SceneArgs(Args):
    scene: str = Field(description="scene id")


def _named(index: str):
    def fn(ctx: ToolContext, args: SceneArgs) -> ToolResult:
        return spectral_index(ctx, IndexArgs(scene=args.scene, index=index))

    fn.__doc__ = (f"{index} of a scene via :func:`earthrl.envs.tools.mini.spectral_index` (spyndex formula, "
                  f"bands as reflectance 0-1); writes float32 ``{index.lower()}_<scene>`` in [-1, 1] "
                  "(EVI may exceed it). Raises ToolError when the sensor lacks a band.")
    fn.__name__ = fn.__qualname__ = index.lower()
    return fn


for _tool, (_idx, _desc, _skills) in NAMED_INDICES.items():
    register_tool(_tool, args=SceneArgs, description=_desc, family="PRA", skills=_skills,
                  output_kind="raster", sensors=_OPTICAL,
                  valid_range=None if _idx == "EVI" else (-1.0, 1.0), **_PG)(_named(_idx))


# ------------------------------------------------------------------------------- FVC


class FvcArgs(Args):
    ndvi: str = Field(description="NDVI artifact")
    ndvi_soil: float = Field(0.05, ge=-1, le=1, description="bare-soil NDVI")
    ndvi_veg: float = Field(0.86, ge=-1, le=1, description="full-cover NDVI")


@register_tool("fvc", args=FvcArgs, description="Fractional vegetation cover from NDVI.",
               family="PRA", skills=["vegetation_drought"], output_kind="raster", valid_range=(0.0, 1.0), **_PG)
def fvc(ctx: ToolContext, args: FvcArgs) -> ToolResult:
    """FVC = (NDVI - NDVI_soil) / (NDVI_veg - NDVI_soil) clipped to [0, 1] (dimidiate pixel model,
    Gutman & Ignatov 1998); defaults NDVI_soil 0.05, NDVI_veg 0.86. Output ``fvc_<ndvi>``.

    Raises:
        ToolError: ``ndvi_veg`` <= ``ndvi_soil`` (field named).
    """
    if args.ndvi_veg <= args.ndvi_soil:
        raise ToolError("tool_error", f"ndvi_veg {args.ndvi_veg} must exceed ndvi_soil {args.ndvi_soil}")
    layer = load_layer(ctx.registry, args.ndvi)
    valid_values(layer, "ndvi")
    f = np.clip((layer.arr - np.float32(args.ndvi_soil)) / np.float32(args.ndvi_veg - args.ndvi_soil), 0, 1)
    return write_raster(ctx, out_name("fvc", layer.source), f.astype(np.float32), [layer],
                        kind="raster", units="fraction")


# ------------------------------------------------------------------------------- LST

#: effective wavelength (µm) of the thermal band used by :func:`land_surface_temperature`.
THERMAL_WAVELENGTH_UM = {"landsat-8": 10.895, "landsat-7": 11.45}
RHO_UM_K = 14388.0  # h·c/k_B in µm·K
EMISSIVITY_SOIL, EMISSIVITY_VEG = 0.97, 0.99
NDVI_SOIL, NDVI_VEG = 0.2, 0.5


def ndvi_emissivity(ndvi: np.ndarray) -> np.ndarray:
    """Land-surface emissivity by the NDVI threshold method (Sobrino et al. 2004, RSE 90):
    0.97 where NDVI < 0.2 (soil), 0.99 where NDVI > 0.5 (vegetation), else
    0.99·Pv + 0.97·(1-Pv) with Pv = ((NDVI-0.2)/(0.5-0.2))² (cavity term neglected). float32."""
    pv = np.clip((ndvi - NDVI_SOIL) / (NDVI_VEG - NDVI_SOIL), 0, 1) ** 2
    eps = EMISSIVITY_VEG * pv + EMISSIVITY_SOIL * (1 - pv)
    return np.where(np.isnan(ndvi), np.nan, eps).astype(np.float32)


class LstArgs(Args):
    scene: str = Field(description="Landsat 8/7 Level-1 scene id")


@register_tool("land_surface_temperature", args=LstArgs,
               description="LST (K) from the thermal band, single-channel method.",
               family="PRA", skills=["lst_inversion", "vegetation_drought"], output_kind="raster",
               sensors=["landsat-8", "landsat-7"], valid_range=(180.0, 350.0), **_PG)
def land_surface_temperature(ctx: ToolContext, args: LstArgs) -> ToolResult:
    """Single-channel LST: BT from the thermal band (Landsat 8 B10, Landsat 7 B6_VCID_1) via the
    MTL K1/K2 (:func:`earthrl.envs.data.calibration.brightness_temperature`), emissivity ε from the
    scene's TOA NDVI (:func:`ndvi_emissivity`), LST = BT / (1 + (λ·BT/ρ)·ln ε) with λ = 10.895 µm
    (L8 B10) / 11.45 µm (L7 B6), ρ = 14388 µm·K; no atmospheric correction. float32 K, output
    ``lst_<scene>``.

    Raises:
        ToolError: the scene has no MTL-calibrated thermal band (Landsat 5/7 lsts, Sentinel-2).
    """
    s = ctx.registry.scene(args.scene)
    if s.mtl is None or "T" not in s.symbols:
        raise ToolError("tool_error", f"scene: {s.id} ({s.sensor}) has no thermal band with MTL constants; "
                        "use a Landsat 8/7 Level-1 scene (e.g. LC08_...)")
    bt, red, nir = align([load_layer(ctx.registry, f"{s.id}:{s.symbols[k]}") for k in ("T", "R", "N")])
    with np.errstate(all="ignore"):
        ndvi = (nir.arr - red.arr) / (nir.arr + red.arr)
        lam = np.float32(THERMAL_WAVELENGTH_UM[s.sensor])
        lst = bt.arr / (1 + (lam * bt.arr / np.float32(RHO_UM_K)) * np.log(ndvi_emissivity(ndvi)))
    res = write_raster(ctx, out_name("lst", s.id), lst.astype(np.float32), [bt, red, nir],
                       kind="raster", units="K")
    res.text += f"; mean {fmt(float(np.nanmean(lst)))} K"
    return res


# ------------------------------------------------------------------------------- TVDI


class TvdiArgs(Args):
    ndvi: str = Field(description="NDVI artifact")
    lst: str = Field(description="LST artifact (K)")
    bins: int = Field(10, ge=3, le=100, description="NDVI bins for the edges")


def tvdi_edges(ndvi: np.ndarray, lst: np.ndarray, bins: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """Dry and wet edges ``((a_dry, b_dry), (a_wet, b_wet))`` of the NDVI-LST space (Sandholt
    et al. 2002): NDVI split into ``bins`` equal-width bins over its valid range; per non-empty
    bin the max (dry) and min (wet) LST; least-squares lines LST = a + b·NDVI through the bin
    centres' extremes (``scipy.stats.linregress``).

    Raises:
        ToolError: fewer than 3 non-empty bins (``empty_raster``).
    """
    from scipy.stats import linregress

    ok = np.isfinite(ndvi) & np.isfinite(lst)
    x, y = ndvi[ok].astype(np.float64), lst[ok].astype(np.float64)
    if x.size == 0 or x.min() == x.max():
        raise ToolError("empty_raster", "ndvi/lst: need valid pixels with varying NDVI; use a larger area")
    edges = np.linspace(x.min(), x.max(), bins + 1)
    idx = np.clip(np.digitize(x, edges) - 1, 0, bins - 1)
    cx, dry, wet = [], [], []
    for k in range(bins):
        sel = idx == k
        if sel.any():
            cx.append(0.5 * (edges[k] + edges[k + 1]))
            dry.append(y[sel].max())
            wet.append(y[sel].min())
    if len(cx) < 3:
        raise ToolError("empty_raster", f"bins: only {len(cx)} NDVI bins hold pixels; lower bins")
    d, w = linregress(cx, dry), linregress(cx, wet)
    return (float(d.intercept), float(d.slope)), (float(w.intercept), float(w.slope))


@register_tool("tvdi", args=TvdiArgs, description="Temperature-vegetation dryness index from NDVI and LST.",
               family="PRA", skills=["vegetation_drought", "lst_inversion"], output_kind="raster",
               valid_range=(0.0, 1.0), **_PG)
def tvdi(ctx: ToolContext, args: TvdiArgs) -> ToolResult:
    """TVDI = (LST - LST_wet(NDVI)) / (LST_dry(NDVI) - LST_wet(NDVI)) with the edges of
    :func:`tvdi_edges`, clipped to [0, 1] (0 wet, 1 dry). Output ``tvdi_<lst>``.

    Raises:
        ToolError: NDVI and LST on different grids; too few valid pixels.
    """
    n, t = load_layer(ctx.registry, args.ndvi), load_layer(ctx.registry, args.lst)
    same_grid([n, t])
    (ad, bd), (aw, bw) = tvdi_edges(n.arr, t.arr, args.bins)
    with np.errstate(all="ignore"):
        wet = aw + bw * n.arr
        out = np.clip((t.arr - wet) / (ad + bd * n.arr - wet), 0, 1).astype(np.float32)
    res = write_raster(ctx, out_name("tvdi", t.source), out, [n, t], kind="raster", units="index")
    res.data.update(dry_edge=[ad, bd], wet_edge=[aw, bw])
    res.text += f"; dry edge LST={fmt(ad)}+{fmt(bd)}*NDVI, wet edge LST={fmt(aw)}+{fmt(bw)}*NDVI"
    return res


# ------------------------------------------------------------------------------- terrain


class TerrainArgs(Args):
    name: str = Field(description="single-band raster (a DEM, e.g. scene:DEM)")


class HillshadeArgs(TerrainArgs):
    azimuth: float = Field(315, ge=0, le=360, description="sun azimuth, degrees")
    altitude: float = Field(45, ge=0, le=90, description="sun altitude, degrees")


def _terrain(ctx: ToolContext, name: str, fn, tag: str, units: str, **kw) -> ToolResult:
    layer = load_layer(ctx.registry, name)
    valid_values(layer, "name")
    out = np.asarray(fn(to_dataarray(layer), **kw).values, dtype=np.float32)
    return write_raster(ctx, out_name(tag, layer.source), out, [layer], kind="raster", units=units)


_TERRAIN_DOC = ("Works on any single-band raster (a DEM in m where the data has one, e.g. "
                "``<LC08 scene>:DEM``; otherwise the surface the agent passes); edge pixels are NaN.")


@register_tool("slope", args=TerrainArgs, description="Slope (degrees) of a surface raster.",
               family="PRA", skills=["land_cover", "water_flood"], output_kind="raster",
               valid_range=(0.0, 90.0), **_PG)
def slope(ctx: ToolContext, args: TerrainArgs) -> ToolResult:
    """Slope in degrees (xarray-spatial ``slope``, Horn's 3x3 method, pixel size from the grid). """
    import xrspatial

    return _terrain(ctx, args.name, xrspatial.slope, "slope", "degrees")


@register_tool("aspect", args=TerrainArgs, description="Aspect (degrees from north) of a surface raster.",
               family="PRA", skills=["land_cover"], output_kind="raster", valid_range=(-1.0, 360.0), **_PG)
def aspect(ctx: ToolContext, args: TerrainArgs) -> ToolResult:
    """Aspect in degrees clockwise from north, -1 on flat cells (xarray-spatial ``aspect``)."""
    import xrspatial

    return _terrain(ctx, args.name, xrspatial.aspect, "aspect", "degrees")


@register_tool("hillshade", args=HillshadeArgs, description="Hillshade of a surface raster.",
               family="PRA", skills=["land_cover"], output_kind="raster", valid_range=(0.0, 1.0), **_PG)
def hillshade(ctx: ToolContext, args: HillshadeArgs) -> ToolResult:
    """Hillshade 0-1 for a sun at ``azimuth``/``altitude`` degrees (xarray-spatial ``hillshade``)."""
    import xrspatial

    return _terrain(ctx, args.name, xrspatial.hillshade, f"hillshade{args.azimuth:g}-{args.altitude:g}",
                    "shade", azimuth=args.azimuth, angle_altitude=args.altitude)


for _f in (slope, aspect, hillshade):
    _f.__doc__ += "\n\n    " + _TERRAIN_DOC + "\n\n    Raises:\n        ToolError: all-NaN input."

# ------------------------------------------------------------------------------- zones and areas


class ZonalArgs(Args):
    values: str = Field(description="value raster")
    zones: str = Field(description="mask, classes or segments raster")


@register_tool("zonal_stats", args=ZonalArgs, description="Mean, std, min, max, count of values per zone.",
               family="SAA", skills=["land_cover", "vegetation_drought", "water_flood"],
               output_kind="table", **_PG)
def zonal_stats(ctx: ToolContext, args: ZonalArgs) -> ToolResult:
    """Statistics of ``values`` per integer zone of ``zones`` (xarray-spatial ``zonal.stats``;
    NaN values and nodata zones skipped). Writes a ``table`` artifact ``zonal_<values>_<zones>``
    ``{"zones": [...], "mean": [...], "std", "min", "max", "count"}``.

    Raises:
        ToolError: grids differ; no valid pixels.
    """
    import xarray as xr
    from xrspatial import zonal

    v, z = load_layer(ctx.registry, args.values), load_layer(ctx.registry, args.zones)
    same_grid([v, z])
    ok = np.isfinite(z.arr) & np.isfinite(v.arr)
    if not ok.any():
        raise ToolError("empty_raster", "values/zones: no pixel is valid in both; check the inputs")
    zones = np.where(ok, z.arr, -1).astype(np.int64)
    df = zonal.stats(zones=xr.DataArray(zones), values=xr.DataArray(np.where(ok, v.arr, np.nan)),
                     stats_funcs=["mean", "std", "min", "max", "count"], nodata_values=-1)
    df = df[df["zone"] >= 0].sort_values("zone")
    table = {"zones": [int(x) for x in df["zone"]]}
    table.update({k: [float(x) for x in df[k]] for k in ("mean", "std", "min", "max", "count")})
    art = ctx.registry.write_json(out_name("zonal", v.source, z.source), table, "table", units=v.units,
                                  parents=[v.source.split(":")[0], z.source.split(":")[0]], call=ctx.call)
    lines = [f"zone {zz}: mean {fmt(m)}, count {int(c)}" for zz, m, c in
             zip(table["zones"], table["mean"], table["count"])]
    return ToolResult(f"saved {art.name}\n" + "\n".join(lines[:20]), {"artifact": art.name, **table}, art.name)


class ClassAreaArgs(Args):
    name: str = Field(description="mask or classes raster")
    unit: Literal["km2", "m2"] = "km2"


@register_tool("class_area", args=ClassAreaArgs, description="Area of each class of a class raster.",
               family="SAA", skills=["land_cover", "water_flood"], output_kind="number", **_PG)
def class_area(ctx: ToolContext, args: ClassAreaArgs) -> ToolResult:
    """Area per class value: sum of pixel areas (projected CRS: |det(geotransform)| m²; lat/lon
    grids such as MODIS: spherical cell areas, :meth:`Layer.pixel_areas`), in km² (default) or
    m²; nodata skipped. Accepts masks, classes rasters and class bands (``<MODIS scene>:LC_Type1``).

    Raises:
        ToolError: not a mask/classes/segments raster (``wrong_kind``), no valid pixels.
    """
    layer = load_layer(ctx.registry, args.name)
    if layer.kind not in ("mask", "classes", "segments"):
        raise ToolError("wrong_kind", f"name: {layer.source} is a {layer.kind}; give a mask or classes raster "
                        "(threshold_mask, kmeans_classify)")
    vals = np.unique(valid_values(layer, "name").astype(np.int64))
    div = 1e6 if args.unit == "km2" else 1.0
    areas = {int(v): layer.area_m2(layer.arr == v) / div for v in vals}
    text = ", ".join(f"class {k}: {fmt(a)} {args.unit}" for k, a in list(areas.items())[:20])
    return ToolResult(f"{layer.source}: {text}", {"areas": areas, "unit": args.unit})
