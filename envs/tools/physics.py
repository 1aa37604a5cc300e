"""Physical & GIS Analytics tools (SimCRAFT domain; HiRS family PRA): named spectral indices
(spyndex, through :func:`earthrl.envs.tools.mini_toolset.spectral_index`), fractional vegetation cover,
land-surface temperature (NDVI^THM emissivity, optional single-channel atmospheric correction),
TVDI (Sandholt et al. 2002; arithmetic in ``tvdi_core``), terrain (xarray-spatial slope/aspect, Horn hillshade),
zonal statistics and areas per class.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.data.calibration import parse_mtl
from earthrl.envs.tools.common import (
    align,
    call_hash,
    fmt,
    layer_source,
    load_layer,
    out_name,
    same_grid,
    valid_values,
    write_raster,
)
from earthrl.envs.tools.mini_toolset import IndexArgs, spectral_index, spectral_index_name
from earthrl.envs.tools.preprocess import to_dataarray
from earthrl.envs.tools.registry import Args, ToolContext, ToolResult, register_tool
from earthrl.envs.tools.tvdi_core import tvdi_edges, tvdi_index, tvdi_valid

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

    def name(ctx: ToolContext, args: SceneArgs) -> str:
        return spectral_index_name(ctx, IndexArgs(scene=args.scene, index=index))

    fn.output_name = name

    fn.__doc__ = (f"{index} of a scene via :func:`earthrl.envs.tools.mini_toolset.spectral_index` (spyndex formula, "
                  f"bands as reflectance 0-1); writes float32 ``{index.lower()}_<scene>`` in [-1, 1] "
                  "(EVI may exceed it). Raises ToolError when the sensor lacks a band.")
    fn.__name__ = fn.__qualname__ = index.lower()
    return fn


for _tool, (_idx, _desc, _skills) in NAMED_INDICES.items():
    _fn = _named(_idx)
    register_tool(_tool, args=SceneArgs, description=_desc, family="PRA", skills=_skills,
                  output_kind="raster", sensors=_OPTICAL,
                  valid_range=None if _idx == "EVI" else (-1.0, 1.0), output_name=_fn.output_name, **_PG)(_fn)


# ------------------------------------------------------------------------------- FVC


class FvcArgs(Args):
    ndvi: str = Field(description="NDVI artifact")
    ndvi_soil: float = Field(0.05, ge=-1, le=1, description="bare-soil NDVI")
    ndvi_veg: float = Field(0.86, ge=-1, le=1, description="full-cover NDVI")


def fvc_name(ctx: ToolContext, args: FvcArgs) -> str:
    """``fvc_<ndvi>``."""
    return out_name("fvc", layer_source(ctx.registry, args.ndvi))


@register_tool("fvc", args=FvcArgs, description="Fractional vegetation cover from NDVI.",
               family="PRA", skills=["vegetation_drought"], output_kind="raster", valid_range=(0.0, 1.0),
               output_name=fvc_name, **_PG)
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
    return write_raster(ctx, fvc_name(ctx, args), f.astype(np.float32), [layer],
                        kind="raster", units="fraction")


# ------------------------------------------------------------------------------- LST

#: effective wavelength (µm) of the thermal band used by :func:`land_surface_temperature`.
THERMAL_WAVELENGTH_UM = {"landsat-8": 10.895, "landsat-7": 11.45}
RHO_UM_K = 14388.0  # second radiation constant h·c/k_B in µm·K
#: NDVI thresholds of the NDVI^THM method (Sobrino et al. 2004): soil below, full vegetation above.
NDVI_SOIL, NDVI_VEG = 0.2, 0.5
#: Sobrino et al. (2004) NDVI^THM: bare soil ε = a + b·ρ_red; mixed ε = m·Pv + n (m, n from
#: εv = 0.99, εs = 0.97 and the cavity term dε = (1-εs)(1-Pv)·F·εv with F = 0.55); full cover εv.
SOBRINO_SOIL_A, SOBRINO_SOIL_B = 0.973, -0.047
SOBRINO_MIX_M, SOBRINO_MIX_N = 0.004, 0.986
EMISSIVITY_SOIL, EMISSIVITY_VEG = 0.97, 0.99
#: atmospheric functions ψk = ck1·w² + ck2·w + ck3 (w water vapour, g/cm²) of the generalised
#: single-channel algorithm: Landsat 8 TIRS B10 (Jiménez-Muñoz et al. 2014, IEEE GRSL 11(10)),
#: Landsat 7 ETM+ B6 (Jiménez-Muñoz et al. 2009, IEEE TGRS 47(1)).
PSI_COEFFS = {
    "landsat-8": ((0.04019, 0.02916, 1.01523), (-0.38333, -1.50294, 0.20324), (0.00918, 1.36072, -0.27514)),
    "landsat-7": ((0.07593, -0.07132, 1.08565), (-0.61438, -0.70916, -0.19379), (-0.02892, 1.46051, -0.43199)),
}
EmissivityMethod = Literal["sobrino2004", "mixture_no_cavity"]


def ndvi_emissivity(ndvi: np.ndarray, red: np.ndarray | None = None,
                    method: EmissivityMethod = "sobrino2004") -> np.ndarray:
    """Land-surface emissivity from NDVI, float32 (NaN where NDVI is NaN).

    ``"sobrino2004"`` — the NDVI thresholds method NDVI^THM of Sobrino, Jiménez-Muñoz & Paolini
    (2004, RSE 90:434-440): NDVI < 0.2 bare soil, ε = 0.973 - 0.047·ρ_red (needs ``red``, TOA
    reflectance 0-1); 0.2 <= NDVI <= 0.5 mixed, ε = 0.004·Pv + 0.986 with
    Pv = ((NDVI - 0.2)/(0.5 - 0.2))², i.e. εv·Pv + εs·(1-Pv) + dε with the cavity term
    dε = (1-εs)(1-Pv)·0.55·εv; NDVI > 0.5 full vegetation, ε = 0.99. Water (NDVI < 0) is
    treated as soil, as in the paper.
    ``"mixture_no_cavity"`` — two-component mixture without cavity term,
    ε = 0.99·Pv + 0.97·(1-Pv), Pv clipped to [0, 1] (EarthRL's former rule; up to 0.016
    lower than NDVI^THM, ~1.1 K lower LST at 300 K).

    Raises:
        ValueError: ``"sobrino2004"`` without ``red``, or an unknown method.
    """
    pv = np.clip((ndvi - NDVI_SOIL) / (NDVI_VEG - NDVI_SOIL), 0, 1) ** 2
    if method == "mixture_no_cavity":
        eps = EMISSIVITY_VEG * pv + EMISSIVITY_SOIL * (1 - pv)
    elif method == "sobrino2004":
        if red is None:
            raise ValueError("ndvi_emissivity: method 'sobrino2004' needs the red reflectance")
        eps = np.where(ndvi < NDVI_SOIL, SOBRINO_SOIL_A + SOBRINO_SOIL_B * red,
                       np.where(ndvi > NDVI_VEG, EMISSIVITY_VEG, SOBRINO_MIX_M * pv + SOBRINO_MIX_N))
    else:
        raise ValueError(f"ndvi_emissivity: unknown method {method!r}; use sobrino2004 or mixture_no_cavity")
    return np.where(np.isnan(ndvi), np.nan, eps).astype(np.float32)


class LstArgs(Args):
    scene: str = Field(description="Landsat 8/7 Level-1 scene id")
    emissivity: EmissivityMethod = Field(
        "sobrino2004", description="NDVI emissivity rule: sobrino2004 (NDVI^THM) or mixture_no_cavity")
    water_vapour: float | None = Field(
        None, ge=0, le=6.5, description="column water vapour g/cm2; given, the single-channel "
        "algorithm with atmospheric functions is used (else no atmospheric correction)")


def _single_channel(bt: np.ndarray, eps: np.ndarray, mtl: dict, band: str, sensor: str, w: float,
                    lam: float) -> np.ndarray:
    """Generalised single-channel LST (Jiménez-Muñoz & Sobrino 2003, JGR 108(D22); coefficients
    :data:`PSI_COEFFS`): Ts = γ·[(ψ1·L + ψ2)/ε + ψ3] + δ, γ = T²/(bγ·L), δ = T - T²/bγ,
    bγ = c2/λ, L the at-sensor radiance from T by the inverse Planck law with the MTL K1/K2."""
    k = band[1:]
    k1, k2 = float(mtl[f"K1_CONSTANT_BAND_{k}"]), float(mtl[f"K2_CONSTANT_BAND_{k}"])
    t = bt.astype(np.float64)
    rad = k1 / np.expm1(k2 / t)
    psi = [c1 * w * w + c2 * w + c3 for c1, c2, c3 in PSI_COEFFS[sensor]]
    b_gamma = RHO_UM_K / lam
    gamma, delta = t * t / (b_gamma * rad), t - t * t / b_gamma
    return gamma * ((psi[0] * rad + psi[1]) / eps + psi[2]) + delta


def land_surface_temperature_name(ctx: ToolContext, args: LstArgs) -> str:
    """``lst_<scene>``, plus ``_<emissivity method>`` and ``_w<water vapour>`` when not the defaults."""
    tags = ([] if args.emissivity == "sobrino2004" else [args.emissivity]) + \
        ([] if args.water_vapour is None else [f"w{args.water_vapour:g}"])
    return out_name("lst", ctx.registry.scene(args.scene).id, *tags)


@register_tool("land_surface_temperature", args=LstArgs,
               description="LST (K) from the thermal band, single-channel method.",
               family="PRA", skills=["lst_inversion", "vegetation_drought"], output_kind="raster",
               sensors=["landsat-8", "landsat-7"], valid_range=(180.0, 350.0),
               output_name=land_surface_temperature_name, **_PG)
def land_surface_temperature(ctx: ToolContext, args: LstArgs) -> ToolResult:
    """Land-surface temperature (K) of a Landsat 8/7 Level-1 scene.

    BT from the thermal band (Landsat 8 B10, Landsat 7 B6_VCID_1) via the MTL K1/K2
    (:func:`earthrl.envs.data.calibration.brightness_temperature`); emissivity ε from the
    scene's TOA NDVI and red reflectance (:func:`ndvi_emissivity`, default NDVI^THM of Sobrino
    et al. 2004). Without ``water_vapour``: emissivity-corrected BT,
    LST = BT / (1 + (λ·BT/ρ)·ln ε) (Artis & Carnahan 1982), λ = 10.895 µm (L8 B10) / 11.45 µm
    (L7 B6), ρ = 14388 µm·K, no atmospheric correction. With ``water_vapour`` w (g/cm²): the
    generalised single-channel algorithm with atmospheric functions ψ1..ψ3(w)
    (:func:`_single_channel`). float32 K, output ``lst_<scene>`` (plus ``_<method>``/``_w<w>``
    for non-default options).

    Raises:
        ToolError: the scene has no MTL-calibrated thermal band (Landsat 5/7 lsts, Sentinel-2).
    """
    s = ctx.registry.scene(args.scene)
    if s.mtl is None or "T" not in s.symbols:
        raise ToolError("tool_error", f"scene: {s.id} ({s.sensor}) has no thermal band with MTL constants; "
                        "use a Landsat 8/7 Level-1 scene (e.g. LC08_...)")
    bt, red, nir = align([load_layer(ctx.registry, f"{s.id}:{s.symbols[k]}") for k in ("T", "R", "N")])
    lam = THERMAL_WAVELENGTH_UM[s.sensor]
    with np.errstate(all="ignore"):
        ndvi = (nir.arr - red.arr) / (nir.arr + red.arr)
        eps = ndvi_emissivity(ndvi, red.arr, args.emissivity)
        if args.water_vapour is None:
            lst = bt.arr / (1 + (np.float32(lam) * bt.arr / np.float32(RHO_UM_K)) * np.log(eps))
        else:
            lst = _single_channel(bt.arr, eps.astype(np.float64), parse_mtl(s.mtl), s.symbols["T"],
                                  s.sensor, args.water_vapour, lam)
    res = write_raster(ctx, land_surface_temperature_name(ctx, args), lst.astype(np.float32), [bt, red, nir],
                       kind="raster", units="K")
    res.text += f"; mean {fmt(float(np.nanmean(lst)))} K"
    return res


# ------------------------------------------------------------------------------- TVDI


class TvdiArgs(Args):
    ndvi: str = Field(description="NDVI artifact")
    lst: str = Field(description="LST artifact (K)")
    ndvi_step: float = Field(0.01, ge=0.001, le=0.5, description="width of the NDVI intervals for the edges")
    bins: int | None = Field(None, ge=3, le=1000,
                             description="n equal-width NDVI intervals over [ndvi_min, ndvi_max] instead of ndvi_step")
    ndvi_min: float = Field(0.0, ge=-1, le=1, description="lowest valid NDVI (0 excludes water)")
    ndvi_max: float = Field(1.0, ge=-1, le=1, description="highest valid NDVI")
    lst_min: float = Field(200.0, ge=150, le=400, description="lowest plausible LST, K")
    lst_max: float = Field(350.0, ge=150, le=400, description="highest plausible LST, K")
    exclude_frozen: bool = Field(False, description="also leave out LST below 273.15 K (frozen or snow surfaces)")
    min_pixels: int | None = Field(
        None, ge=1, le=1000000,
        description="pixels an NDVI interval needs to enter the edge fits; default clip(0.2% of valid pixels, 5, 500)")
    fit: Literal["ols", "theil_sen"] = Field("ols", description="line fit of the per-interval extremes")
    wet_edge: Literal["fit", "min"] = Field(
        "fit", description="fit: line through the per-interval LST minima; min: horizontal at the lowest (Sandholt 2002)")
    min_valid_share: float = Field(
        0.0, ge=0, le=1, description="refuse the date when TVDI is defined on less than this share (0-1) of the "
                                      "pixels with data in both NDVI and LST")


#: the conventions of :func:`tvdi` and their defaults (:data:`earthrl.envs.tools.tvdi_core.DEFAULTS`).
TVDI_DEFAULTS = {k: f.default for k, f in TvdiArgs.model_fields.items() if k not in ("ndvi", "lst")}


def tvdi_name(ctx: ToolContext, args: TvdiArgs) -> str:
    """``tvdi_<lst>``, plus the call's hash when a convention other than ``bins`` is not its default."""
    custom = any(getattr(args, k) != v for k, v in TVDI_DEFAULTS.items() if k != "bins")
    return out_name("tvdi", layer_source(ctx.registry, args.lst), *([call_hash(ctx)] if custom else []))


@register_tool("tvdi", args=TvdiArgs, description="Temperature-vegetation dryness index from NDVI and LST.",
               family="PRA", skills=["vegetation_drought", "lst_inversion"], output_kind="raster",
               valid_range=(0.0, 1.0), output_name=tvdi_name, **_PG)
def tvdi(ctx: ToolContext, args: TvdiArgs) -> ToolResult:
    """TVDI = (LST - LST_min(NDVI)) / (LST_max(NDVI) - LST_min(NDVI)) after Sandholt et al. (2002,
    Remote Sensing of Environment 79:213-224), LST in K, NDVI unitless, with the edges of
    :func:`earthrl.envs.tools.tvdi_core.tvdi_edges`. Defaults (sources in
    :data:`earthrl.envs.tools.tvdi_core.DEFAULTS`): NDVI intervals of 0.01 over [0, 1], LST
    200-350 K, >= clip(0.2 % of the valid pixels, 5, 500) pixels per interval, least-squares dry
    AND wet edges (``wet_edge="min"``: Sandholt's horizontal Ts_min). Clipped to [0, 1] (0 wet,
    1 dry); NaN outside the valid masks and on each pixel where the wet edge is not below the dry
    edge at its NDVI (crossed edges). Output ``tvdi_<lst>`` (plus a hash of non-default
    conventions); the result reports the edges, the crossed pixels and the valid share.

    Raises:
        ToolError: NDVI and LST on different grids; too few valid pixels per interval
            (``empty_raster``); edges crossed on every valid pixel (``tvdi_edges_crossed``); TVDI
            defined on less than ``min_valid_share`` of the pixels with data (``tvdi_valid_share``).
    """
    n, t = load_layer(ctx.registry, args.ndvi), load_layer(ctx.registry, args.lst)
    same_grid([n, t])
    conv = {k: getattr(args, k) for k in TVDI_DEFAULTS}
    e = tvdi_edges(n.arr, t.arr, **{k: v for k, v in conv.items() if k != "min_valid_share"})
    ok = tvdi_valid(n.arr, t.arr, args.ndvi_min, args.ndvi_max, args.lst_min, args.lst_max, args.exclude_frozen)
    out, crossed = tvdi_index(n.arr, t.arr, e, ok)
    (ad, bd), (aw, bw) = e.dry, e.wet
    edges = f"dry edge LST={fmt(ad)}{bd:+.6g}*NDVI, wet edge LST={fmt(aw)}{bw:+.6g}*NDVI"
    defined = int(np.isfinite(out).sum())
    if defined == 0:
        raise ToolError("tvdi_edges_crossed", (
            f"the {edges} cross on every valid pixel ({int(crossed.sum())}), so TVDI is undefined; "
            "use wet_edge='min', a larger area, a larger ndvi_step or a higher min_pixels"))
    data = int((np.isfinite(n.arr) & np.isfinite(t.arr)).sum())
    share = defined / data
    if share < args.min_valid_share:
        raise ToolError("tvdi_valid_share", (
            f"min_valid_share: TVDI is defined on {share:.1%} of the {data} pixels with NDVI and LST "
            f"({int((~ok & np.isfinite(n.arr) & np.isfinite(t.arr)).sum())} outside the NDVI/LST ranges, "
            f"{int(crossed.sum())} where the edges cross), below {args.min_valid_share:.1%}; lower "
            "min_valid_share or widen ndvi_min/ndvi_max/lst_min/lst_max"))
    res = write_raster(ctx, tvdi_name(ctx, args), out, [n, t], kind="raster", units="index")
    res.data.update(dry_edge=[ad, bd], wet_edge=[aw, bw], ndvi_span=list(e.span), intervals=e.intervals,
                    min_pixels=e.min_pixels, crossed_pixels=int(crossed.sum()), valid_share=share)
    res.text += f"; {edges}; {e.intervals} of {e.total} NDVI intervals with >= {e.min_pixels} px"
    if crossed.any():
        res.text += f"; {int(crossed.sum())} px NaN where the edges cross"
    return res


# ------------------------------------------------------------------------------- terrain


class TerrainArgs(Args):
    name: str = Field(description="single-band raster (a DEM, e.g. scene:DEM)")


class HillshadeArgs(TerrainArgs):
    azimuth: float = Field(315, ge=0, le=360, description="sun azimuth, degrees")
    altitude: float = Field(45, ge=0, le=90, description="sun altitude, degrees")


def _terrain(ctx: ToolContext, args: TerrainArgs, fn, name: str, units: str, **kw) -> ToolResult:
    layer = load_layer(ctx.registry, args.name)
    valid_values(layer, "name")
    out = np.asarray(fn(to_dataarray(layer), **kw).values, dtype=np.float32)
    return write_raster(ctx, name, out, [layer], kind="raster", units=units)


def slope_name(ctx: ToolContext, args: TerrainArgs) -> str:
    """``slope_<name>``."""
    return out_name("slope", layer_source(ctx.registry, args.name))


def aspect_name(ctx: ToolContext, args: TerrainArgs) -> str:
    """``aspect_<name>``."""
    return out_name("aspect", layer_source(ctx.registry, args.name))


def hillshade_name(ctx: ToolContext, args: HillshadeArgs) -> str:
    """``hillshade<azimuth>-<altitude>_<name>``."""
    return out_name(f"hillshade{args.azimuth:g}-{args.altitude:g}", layer_source(ctx.registry, args.name))


_TERRAIN_DOC = ("Works on any single-band raster (a DEM in m where the data has one, e.g. "
                "``<LC08 scene>:DEM``; otherwise the surface the agent passes); edge pixels are NaN.")


@register_tool("slope", args=TerrainArgs, description="Slope (degrees) of a surface raster.",
               family="PRA", skills=["land_cover", "water_flood"], output_kind="raster",
               valid_range=(0.0, 90.0), output_name=slope_name, **_PG)
def slope(ctx: ToolContext, args: TerrainArgs) -> ToolResult:
    """Slope in degrees (xarray-spatial ``slope``, Horn's 3x3 method, pixel size from the grid). """
    import xrspatial

    return _terrain(ctx, args, xrspatial.slope, slope_name(ctx, args), "degrees")


@register_tool("aspect", args=TerrainArgs, description="Aspect (degrees from north) of a surface raster.",
               family="PRA", skills=["land_cover"], output_kind="raster", valid_range=(-1.0, 360.0),
               output_name=aspect_name, **_PG)
def aspect(ctx: ToolContext, args: TerrainArgs) -> ToolResult:
    """Aspect in degrees clockwise from north, -1 on flat cells (xarray-spatial ``aspect``)."""
    import xrspatial

    return _terrain(ctx, args, xrspatial.aspect, aspect_name(ctx, args), "degrees")


@register_tool("hillshade", args=HillshadeArgs, description="Hillshade of a surface raster.",
               family="PRA", skills=["land_cover"], output_kind="raster", valid_range=(0.0, 1.0),
               output_name=hillshade_name, **_PG)
def hillshade(ctx: ToolContext, args: HillshadeArgs) -> ToolResult:
    """Hillshade 0-1 for a sun at ``azimuth`` (clockwise from north) / ``altitude`` degrees:
    cos(incidence) = cos Z·cos S + sin Z·sin S·cos(A − aspect), negative (self-shadowed) -> 0, with
    Z = 90° − altitude, A = 90° − azimuth (math angle), slope S and aspect from Horn's (1981) 3x3
    gradients with the grid's cell size (Burrough & McDonnell 1998, *Principles of GIS*, §8; the
    formula of GDAL ``gdaldem hillshade`` and ESRI). xarray-spatial's ``hillshade`` is not used: it
    takes gradients per pixel, not per metre, and maps cos(incidence) to (1 + cos)/2."""
    return _terrain(ctx, args, _horn_hillshade, hillshade_name(ctx, args), "shade",
                    azimuth=args.azimuth, altitude=args.altitude)


def _horn_hillshade(da, azimuth: float, altitude: float):
    """Hillshade of a DataArray (:func:`hillshade`'s formula); edge cells NaN."""
    z = np.asarray(da.values, dtype=np.float64)
    rx, ry = (abs(float(v)) for v in da.rio.resolution())
    dzdx = ((z[:-2, 2:] + 2 * z[1:-1, 2:] + z[2:, 2:]) - (z[:-2, :-2] + 2 * z[1:-1, :-2] + z[2:, :-2])) / (8 * rx)
    dzdy = ((z[2:, :-2] + 2 * z[2:, 1:-1] + z[2:, 2:]) - (z[:-2, :-2] + 2 * z[:-2, 1:-1] + z[:-2, 2:])) / (8 * ry)
    s, asp = np.arctan(np.hypot(dzdx, dzdy)), np.arctan2(dzdy, -dzdx)
    zen, az = np.radians(90.0 - altitude), np.radians(90.0 - azimuth)
    out = np.full(z.shape, np.nan)
    out[1:-1, 1:-1] = np.clip(np.cos(zen) * np.cos(s) + np.sin(zen) * np.sin(s) * np.cos(az - asp), 0, 1)
    return da.copy(data=out)


for _f in (slope, aspect, hillshade):
    _f.__doc__ += "\n\n    " + _TERRAIN_DOC + "\n\n    Raises:\n        ToolError: all-NaN input."

# ------------------------------------------------------------------------------- zones and areas


class ZonalArgs(Args):
    values: str = Field(description="value raster")
    zones: str = Field(description="mask, classes or segments raster")


def zonal_stats_name(ctx: ToolContext, args: ZonalArgs) -> str:
    """``zonal_<values>_<zones>``."""
    return out_name("zonal", layer_source(ctx.registry, args.values), layer_source(ctx.registry, args.zones))


@register_tool("zonal_stats", args=ZonalArgs, description="Mean, std, min, max, count of values per zone.",
               family="SAA", skills=["land_cover", "vegetation_drought", "water_flood"],
               output_kind="table", output_name=zonal_stats_name, **_PG)
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
    art = ctx.registry.write_json(zonal_stats_name(ctx, args), table, "table", units=v.units,
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
    """Area per class value: sum of the true cell areas on the ellipsoid of the raster's CRS
    (:func:`earthrl.envs.tools.area.cell_areas`, exact for lat/lon grids such as MODIS on its
    Clarke 1866 datum, Web-Mercator and UTM), in km² (default) or m²; nodata skipped. Accepts masks, classes rasters and class bands (``<MODIS scene>:LC_Type1``).

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
