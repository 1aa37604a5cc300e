"""Physical & GIS Analytics tools (SimCRAFT domain; HiRS family PRA): named spectral indices
(spyndex, through :func:`earthrl.envs.tools.mini.spectral_index`), fractional vegetation cover,
land-surface temperature (NDVI^THM emissivity, optional single-channel atmospheric correction),
TVDI (Sandholt et al. 2002, documented conventions), terrain (xarray-spatial slope/aspect, Horn hillshade),
zonal statistics and areas per class.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.data.calibration import parse_mtl
from earthrl.envs.tools.registry import Args, ToolContext, ToolResult, register_tool
from earthrl.envs.tools.mini import IndexArgs, spectral_index
from earthrl.envs.tools.common import (align, call_hash, fmt, load_layer, out_name, same_grid, valid_values,
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
    ε = 0.99·Pv + 0.97·(1-Pv), Pv clipped to [0, 1] (EarthRL's rule before issue 13; up to 0.016
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


@register_tool("land_surface_temperature", args=LstArgs,
               description="LST (K) from the thermal band, single-channel method.",
               family="PRA", skills=["lst_inversion", "vegetation_drought"], output_kind="raster",
               sensors=["landsat-8", "landsat-7"], valid_range=(180.0, 350.0), **_PG)
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
    tags = ([] if args.emissivity == "sobrino2004" else [args.emissivity]) + \
        ([] if args.water_vapour is None else [f"w{args.water_vapour:g}"])
    res = write_raster(ctx, out_name("lst", s.id, *tags), lst.astype(np.float32), [bt, red, nir],
                       kind="raster", units="K")
    res.text += f"; mean {fmt(float(np.nanmean(lst)))} K"
    return res


# ------------------------------------------------------------------------------- TVDI


class TvdiArgs(Args):
    ndvi: str = Field(description="NDVI artifact")
    lst: str = Field(description="LST artifact (K)")
    bins: int = Field(10, ge=3, le=100, description="equal-width NDVI bins over [ndvi_min, ndvi_max]")
    ndvi_min: float = Field(0.0, ge=-1, le=1, description="lowest valid NDVI (0 excludes water)")
    ndvi_max: float = Field(1.0, ge=-1, le=1, description="highest valid NDVI")
    lst_min: float = Field(273.15, ge=150, le=400, description="lowest valid LST, K (excludes frozen/snow)")
    lst_max: float = Field(343.15, ge=150, le=400, description="highest valid LST, K")
    min_pixels: int = Field(5, ge=1, le=100000, description="pixels a bin needs to enter the edge fits")
    fit: Literal["ols", "theil_sen"] = Field("ols", description="line fit of the per-bin extremes")
    wet_edge: Literal["min", "fit"] = Field(
        "min", description="min: horizontal at the lowest bin minimum (Sandholt 2002); fit: a fitted line")


#: the conventions of :func:`tvdi_edges` and their defaults (the documented TVDI rule).
TVDI_DEFAULTS = {k: f.default for k, f in TvdiArgs.model_fields.items() if k not in ("ndvi", "lst")}


def tvdi_valid(ndvi: np.ndarray, lst: np.ndarray, ndvi_min: float = 0.0, ndvi_max: float = 1.0,
               lst_min: float = 273.15, lst_max: float = 343.15) -> np.ndarray:
    """Boolean mask of the pixels TVDI uses: finite, ndvi_min <= NDVI <= ndvi_max and
    lst_min <= LST <= lst_max (defaults exclude water, NDVI < 0, and frozen or snow surfaces,
    LST < 0 °C, and implausibly hot pixels, > 70 °C)."""
    with np.errstate(invalid="ignore"):
        return ((ndvi >= ndvi_min) & (ndvi <= ndvi_max) & (lst >= lst_min) & (lst <= lst_max))


def tvdi_edges(ndvi: np.ndarray, lst: np.ndarray, bins: int = 10, *, ndvi_min: float = 0.0,
               ndvi_max: float = 1.0, lst_min: float = 273.15, lst_max: float = 343.15,
               min_pixels: int = 5, fit: str = "ols", wet_edge: str = "min"
               ) -> tuple[tuple[float, float], tuple[float, float], tuple[float, float]]:
    """Dry and wet edges of the NDVI-LST triangle after Sandholt, Rasmussen & Andersen (2002,
    RSE 79:213-224): ``((a_dry, b_dry), (a_wet, b_wet), (x_lo, x_hi))`` with LST = a + b·NDVI
    and ``x_lo..x_hi`` the NDVI span of the bins used.

    Conventions (defaults = :data:`TVDI_DEFAULTS`): pixels outside :func:`tvdi_valid` are left
    out; ``bins`` equal-width NDVI bins over the *fixed* range [ndvi_min, ndvi_max] (not each
    scene's own range, so edges of different dates are comparable); a bin enters the fits only
    with >= ``min_pixels`` pixels; dry edge: line fit (``fit``: ``"ols"`` least squares,
    ``scipy.stats.linregress``, or ``"theil_sen"``, ``scipy.stats.theilslopes``) of the per-bin
    maximum LST against the bin centres; wet edge ``"min"``: horizontal at the lowest per-bin
    minimum (Sandholt's Ts_min), or ``"fit"``: the same line fit of the per-bin minima.

    Raises:
        ToolError: ``empty_raster`` — fewer than 3 bins hold ``min_pixels`` valid pixels (names
            the counts and what to relax); ``tool_error`` — ndvi_min >= ndvi_max or
            lst_min >= lst_max; ``tvdi_edges_crossed`` — the dry edge is not above the wet edge
            everywhere on [x_lo, x_hi] (TVDI would be undefined).
    """
    from scipy.stats import linregress, theilslopes

    if ndvi_min >= ndvi_max or lst_min >= lst_max:
        raise ToolError("tool_error", f"ndvi_min {ndvi_min} / lst_min {lst_min} must be below ndvi_max "
                        f"{ndvi_max} / lst_max {lst_max}")
    ok = np.isfinite(ndvi) & np.isfinite(lst) & tvdi_valid(ndvi, lst, ndvi_min, ndvi_max, lst_min, lst_max)
    x, y = ndvi[ok].astype(np.float64), lst[ok].astype(np.float64)
    edges = np.linspace(ndvi_min, ndvi_max, bins + 1)
    idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, bins - 1)
    counts = np.bincount(idx, minlength=bins)
    keep = np.flatnonzero(counts >= min_pixels)
    if keep.size < 3:
        raise ToolError("empty_raster", (
            f"bins: only {keep.size} of {bins} NDVI bins over [{ndvi_min:g}, {ndvi_max:g}] hold >= "
            f"{min_pixels} valid pixels ({ok.sum()} valid pixels with NDVI in range and LST in "
            f"[{lst_min:g}, {lst_max:g}] K); use fewer bins, a lower min_pixels, wider ranges or a larger area"))
    cx = 0.5 * (edges[keep] + edges[keep + 1])
    dry = np.array([y[idx == k].max() for k in keep])
    wet = np.array([y[idx == k].min() for k in keep])

    def line(v):
        if fit == "theil_sen":
            slope, icpt = theilslopes(v, cx)[:2]
            return float(icpt), float(slope)
        r = linregress(cx, v)
        return float(r.intercept), float(r.slope)

    d = line(dry)
    w = line(wet) if wet_edge == "fit" else (float(wet.min()), 0.0)
    lo, hi = float(edges[keep[0]]), float(edges[keep[-1] + 1])
    gaps = [d[0] + d[1] * v - (w[0] + w[1] * v) for v in (lo, hi)]
    if min(gaps) <= 0:
        db = d[1] - w[1]
        cross = f"at NDVI {(w[0] - d[0]) / db:.3f}" if db else "everywhere"
        raise ToolError("tvdi_edges_crossed", (
            f"the dry edge LST={fmt(d[0])}{d[1]:+.6g}*NDVI and the wet edge LST={fmt(w[0])}{w[1]:+.6g}*NDVI "
            f"cross {cross}, inside the NDVI span [{lo:.3g}, {hi:.3g}] of the bins, so TVDI is undefined; "
            "use a larger area, fewer bins, a higher min_pixels or wet_edge='min'"))
    return d, w, (lo, hi)


@register_tool("tvdi", args=TvdiArgs, description="Temperature-vegetation dryness index from NDVI and LST.",
               family="PRA", skills=["vegetation_drought", "lst_inversion"], output_kind="raster",
               valid_range=(0.0, 1.0), **_PG)
def tvdi(ctx: ToolContext, args: TvdiArgs) -> ToolResult:
    """TVDI = (LST - LST_wet(NDVI)) / (LST_dry(NDVI) - LST_wet(NDVI)) (Sandholt et al. 2002),
    with the edges of :func:`tvdi_edges` under the conventions of the arguments (defaults
    :data:`TVDI_DEFAULTS`: 10 bins over NDVI [0, 1], LST [273.15, 343.15] K, >= 5 pixels per
    bin, OLS dry edge, horizontal wet edge at Ts_min), clipped to [0, 1] (0 wet, 1 dry); NaN
    outside the valid masks. Output ``tvdi_<lst>`` (plus a hash of non-default conventions).

    Raises:
        ToolError: NDVI and LST on different grids; too few valid pixels per bin
            (``empty_raster``); crossing edges (``tvdi_edges_crossed``).
    """
    n, t = load_layer(ctx.registry, args.ndvi), load_layer(ctx.registry, args.lst)
    same_grid([n, t])
    conv = {k: getattr(args, k) for k in TVDI_DEFAULTS}
    (ad, bd), (aw, bw), span = tvdi_edges(n.arr, t.arr, **conv)
    ok = tvdi_valid(n.arr, t.arr, args.ndvi_min, args.ndvi_max, args.lst_min, args.lst_max)
    with np.errstate(all="ignore"):
        wet = aw + bw * n.arr
        out = np.clip((t.arr - wet) / (ad + bd * n.arr - wet), 0, 1)
    out = np.where(ok, out, np.nan).astype(np.float32)
    custom = {k: v for k, v in conv.items() if k != "bins" and v != TVDI_DEFAULTS[k]}
    tag = [call_hash(ctx)] if custom else []
    res = write_raster(ctx, out_name("tvdi", t.source, *tag), out, [n, t], kind="raster", units="index")
    res.data.update(dry_edge=[ad, bd], wet_edge=[aw, bw], ndvi_span=list(span))
    res.text += f"; dry edge LST={fmt(ad)}{bd:+.6g}*NDVI, wet edge LST={fmt(aw)}{bw:+.6g}*NDVI"
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
    """Hillshade 0-1 for a sun at ``azimuth`` (clockwise from north) / ``altitude`` degrees:
    cos(incidence) = cos Z·cos S + sin Z·sin S·cos(A − aspect), negative (self-shadowed) -> 0, with
    Z = 90° − altitude, A = 90° − azimuth (math angle), slope S and aspect from Horn's (1981) 3x3
    gradients with the grid's cell size (Burrough & McDonnell 1998, *Principles of GIS*, §8; the
    formula of GDAL ``gdaldem hillshade`` and ESRI). xarray-spatial's ``hillshade`` is not used: it
    takes gradients per pixel, not per metre, and maps cos(incidence) to (1 + cos)/2."""
    return _terrain(ctx, args.name, _horn_hillshade, f"hillshade{args.azimuth:g}-{args.altitude:g}",
                    "shade", azimuth=args.azimuth, altitude=args.altitude)


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
