"""Earth-Agent's thermal, water-vapour, cloud-mask, turbidity and TVDI tools computed on Earth-Bench's
files (``env.mode=execute``).

Source of each definition: Earth-Agent's ``Inversion`` server (``agent/tools/Inversion.py``: the LST
inversions, ``band_ratio``, ``ATI``, ``calculate_water_turbidity_ntu``, the NDVI-conditioned LST
statistics) and ``compute_tvdi`` (``Statistics``/``Index`` server) as carried by the public forks of
opendatalab/Earth-Agent (psvkaushik/Earth-Agent 338a45a, kulikrch/Earth-Agent b9fe374, which agree),
and ``apply_cloud_mask`` from opendatalab/Earth-Agent ``agent/tools/Statistics.py`` (commit ae155eab).
Earth-Bench's reference answers were produced with these definitions, so each tool here computes the
same formula with the same constants; each docstring names the published method the tool's name
refers to and where Earth-Agent's formula departs from it. Where EarthRL's own science convention
differs (TVDI), both are available (``compute_tvdi(edges=...)``).

Batches: Earth-Bench's reference calls often pass lists of files (one per date) and a list of output
paths; the tool then answers a JSON list with one ``Result save at benchmark/out/questionN/<file>``
per date, as recorded; a call with single paths answers that line alone. Files are resolved by
:mod:`earthrl.envs.tools.earthagent_files` (nodata and ±inf read as NaN). Earth-Agent writes
multi-band GeoTIFFs for ``band_ratio`` (PWV, T17, T18, T19), ``modis_day_night_lst`` (LST day,
LST night, BT day, BT night, emissivity day, night), ``temperature_emissivity_separation`` (LST,
emissivity, Δ) and ``ttm_lst`` (LST, ε, ε): EarthRL's episode rasters hold one band, so the first
band (the quantity the tool is named for) is written.

:data:`EXECUTE` maps tool name -> ``fn(ctx, args) -> ToolResult``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable

import numpy as np

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.tools.earthagent_files import Grid, artifact_name, read, write
from earthrl.envs.tools.earthagent_rasters import result
from earthrl.envs.tools.registry import ToolContext, ToolResult
from earthrl.envs.tools.tvdi_core import DEFAULTS, tvdi_edges, tvdi_index, tvdi_valid

EXECUTE: dict[str, Callable[[ToolContext, object], ToolResult]] = {}

#: second radiation constant h·c/k_B (µm·K), as Earth-Agent's inversions use it.
C2_UM_K = 1.43877e4
#: MODIS MOD11/MYD11 emissivity bands: emissivity = DN·0.002 + 0.49 (MODIS LST product user's guide).
EMIS_SCALE, EMIS_OFFSET = 0.002, 0.49
#: Landsat Collection 2 QA_PIXEL bits 0-4: fill, dilated cloud, cirrus, cloud, cloud shadow
#: (USGS LSDS-1619, Landsat 8-9 Collection 2 Level-2 Science Product Guide, Table 6-3).
QA_CLOUD_BITS = 0b11111


def _tool(name: str):
    def deco(fn):
        EXECUTE[name] = fn
        return fn
    return deco


def _same(arrs: dict[str, np.ndarray]) -> None:
    shapes = {a.shape for a in arrs.values()}
    if len(shapes) > 1:
        raise ToolError("tool_error", f"{', '.join(arrs)}: the rasters differ in size "
                                      f"({', '.join(f'{k} {a.shape}' for k, a in arrs.items())})")


def batch(ctx: ToolContext, args, fields: tuple[str, ...], compute, units: str,
          out_field: str = "output_path", inputs: list[str] = ()) -> ToolResult:
    """Run ``compute(ctx, {field: path}) -> (array, grid)`` for one call or for a batch and write each
    result to its output path.

    One call: every field of ``fields`` and ``out_field`` is one path; the observation is the
    ``Result save at …`` line. A batch (Earth-Bench's reference calls, one item per date): any of
    them is a list; then all are lists of one length (an item's inputs and output at the same
    position) and the observation is the JSON list of the lines.

    Raises:
        ToolError: ``schema_error`` naming the field that is missing or whose list length differs.

    A batch of one answers its line alone, as Earth-Bench records it.

    ``inputs`` are further files each item reads (its lineage), for tools whose inputs are one list.
    """
    values = {f: getattr(args, f, None) for f in (*fields, out_field)}
    for f, v in values.items():
        if v is None or (isinstance(v, list | str) and not v):
            raise ToolError("schema_error", f"{f}: give the {'output file path' if f == out_field else 'input raster path'}"
                                            " (a list of them, one per date, for a batch)")
    lists = {f: v for f, v in values.items() if isinstance(v, list)}
    if not lists:
        items = [values]
    else:
        n = max(len(v) for v in lists.values())
        bad = [f for f, v in values.items() if not isinstance(v, list) or len(v) != n]
        if bad:
            raise ToolError("schema_error", f"{', '.join(bad)}: a batch gives every path field as a list of "
                                            f"the same length ({n}: one item per date), output paths included")
        items = [{f: values[f][i] for f in values} for i in range(n)]
    texts, outs, art = [], [], None
    for item in items:
        arr, grid = compute(ctx, {f: str(item[f]) for f in fields})
        out = str(item[out_field])
        texts.append(write(ctx, out, arr, grid, [*(str(item[f]) for f in fields), *inputs], units))
        outs.append(out)
        art = artifact_name(out)
    if len(items) == 1:  # a batch of one answers its line, as recorded
        return ToolResult(texts[0], {"output_path": outs[0]}, art)
    return ToolResult(json.dumps(texts, ensure_ascii=False), {"output_path": outs}, art)


def _read(ctx: ToolContext, paths: dict[str, str]) -> tuple[dict[str, np.ndarray], Grid]:
    arrs, grid = {}, None
    for f, p in paths.items():
        arrs[f], g = read(ctx, p, f)
        grid = grid or g
    return arrs, grid


def emissivity_corrected(bt: np.ndarray, eps: np.ndarray, wavelength_um: float) -> np.ndarray:
    """Surface temperature (K) from brightness temperature ``bt`` (K) and emissivity ``eps``:
    T = BT / (1 + (λ·BT/c2)·ln ε), c2 = 14387.7 µm·K (Artis & Carnahan 1982, Remote Sensing of
    Environment 12:313-329)."""
    with np.errstate(all="ignore"):
        return bt / (1 + (wavelength_um * bt / C2_UM_K) * np.log(eps))


# -- cloud mask and turbidity -------------------------------------------------------------------

def _cloud_mask(ctx: ToolContext, paths: dict[str, str]):
    arrs, grid = _read(ctx, paths)
    _same(arrs)
    band, qa = arrs["sr_band_path"], arrs["qa_pixel_path"]
    qa_int = np.where(np.isfinite(qa), qa, 1).astype(np.int64)  # a nodata QA pixel is fill
    clear = (qa_int & QA_CLOUD_BITS) == 0
    return np.where(clear, band, np.nan), grid


@_tool("apply_cloud_mask")
def apply_cloud_mask(ctx: ToolContext, args) -> ToolResult:
    """Landsat Collection 2 cloud mask (Earth-Agent's ``apply_cloud_mask``): the surface reflectance
    band ``sr_band_path`` (values as stored) where QA_PIXEL ``qa_pixel_path`` has none of bits 0-4
    set (fill, dilated cloud, cirrus, cloud, cloud shadow; USGS LSDS-1619 Table 6-3), NaN elsewhere
    (a nodata QA pixel counts as fill). Written to ``output_path`` as float32.

    Raises:
        ToolError: ``schema_error`` without ``sr_band_path``/``qa_pixel_path`` (e.g. a call with
            ``calculate_ndwi``'s ``input_nir_path``); the rasters differ in size.
    """
    if getattr(args, "sr_band_path", None) is None and getattr(args, "input_nir_path", None) is not None:
        raise ToolError("schema_error", "sr_band_path, qa_pixel_path: apply_cloud_mask masks one reflectance band "
                                        "with its QA_PIXEL band; input_nir_path/input_swir_path are calculate_ndwi's "
                                        "arguments")
    return batch(ctx, args, ("sr_band_path", "qa_pixel_path"), _cloud_mask, "reflectance")


#: turbidity models of Earth-Agent's tool: method -> NTU from the red band value r.
TURBIDITY = {
    "linear": lambda r, a, b: a * r + b,
    "power": lambda r, a, b: a * np.maximum(r, 1e-6) ** 1.0 + b,
    "log": lambda r, a, b: a * np.log(np.maximum(r, 1e-6)) + b,
}


@_tool("calculate_water_turbidity_ntu")
def calculate_water_turbidity_ntu(ctx: ToolContext, args) -> ToolResult:
    """Water turbidity (NTU) from the red band ``input_red_path`` by an empirical single-band model
    (Earth-Agent's ``calculate_water_turbidity_ntu``): ``method`` "linear" a·R + b (default,
    a = 1, b = 0: the red band value itself), "power" a·max(R, 1e-6)^n + b (n = 1, the tool's
    default; the schema passes no n) or "log" a·ln(max(R, 1e-6)) + b, negative values set to 0.
    Red-band turbidity retrieval and its calibration of a, b: Nechad, Ruddick & Park (2010),
    Remote Sensing of Environment 114:854-866; Dogliotti et al. (2015), RSE 156:157-168.

    Raises:
        ToolError: ``out_of_range`` for another method; ``schema_error`` for a call with
            ``file_list`` instead of ``input_red_path``.
    """
    method = (getattr(args, "method", None) or "linear")
    if method not in TURBIDITY:
        raise ToolError("out_of_range", f"method={method!r}: one of {', '.join(TURBIDITY)}")
    if getattr(args, "input_red_path", None) is None and getattr(args, "file_list", None):
        raise ToolError("schema_error", "input_red_path: give the red band file (and output_path); this tool "
                                        "computes NTU from a red band, not from a file_list")
    a = 1.0 if getattr(args, "a", None) is None else float(args.a)
    b = 0.0 if getattr(args, "b", None) is None else float(args.b)

    def ntu(ctx, paths):
        red, grid = read(ctx, paths["input_red_path"], "input_red_path")
        with np.errstate(all="ignore"):
            return np.maximum(TURBIDITY[method](red, a, b), 0), grid

    return batch(ctx, args, ("input_red_path",), ntu, "NTU")


# -- land surface temperature ------------------------------------------------------------------

#: Earth-Agent's NDVI emissivity for lst_single_channel: NDVI > 0.7 vegetation, < 0.2 soil, between.
EMIS_VEG, EMIS_SOIL, EMIS_MIX = 0.99, 0.96, (0.97, 0.003)
LANDSAT_B10_UM = 10.9


def _single_channel(ctx: ToolContext, paths: dict[str, str]):
    arrs, grid = _read(ctx, paths)
    _same(arrs)
    bt, red, nir = (np.where(arrs[f] < 0, np.nan, arrs[f]) for f in ("bt_path", "red_path", "nir_path"))
    with np.errstate(all="ignore"):
        ndvi = (nir - red) / (nir + red + 1e-6)
    eps = np.where(ndvi > 0.7, EMIS_VEG, np.where(ndvi < 0.2, EMIS_SOIL, EMIS_MIX[0] + EMIS_MIX[1] * ndvi))
    return emissivity_corrected(bt, eps, LANDSAT_B10_UM), grid


@_tool("lst_single_channel")
def lst_single_channel(ctx: ToolContext, args) -> ToolResult:
    """LST (K) from one thermal band's brightness temperature ``bt_path`` (K) and an NDVI emissivity
    (Earth-Agent's ``lst_single_channel``): negative inputs NaN, NDVI = (NIR - red)/(NIR + red + 1e-6),
    ε = 0.99 (NDVI > 0.7), 0.96 (NDVI < 0.2), else 0.97 + 0.003·NDVI; LST = BT/(1 + (λ·BT/c2)·ln ε),
    λ = 10.9 µm (Landsat 8 band 10), :func:`emissivity_corrected`. This is the emissivity correction
    of the single-channel approach without its atmospheric functions (Jiménez-Muñoz & Sobrino 2003,
    JGR 108(D22):4688, add ψ1..ψ3 of the water vapour; EarthRL's ``land_surface_temperature`` tool
    offers them and the NDVI-threshold emissivity of Sobrino et al. 2004)."""
    return batch(ctx, args, ("bt_path", "red_path", "nir_path"), _single_channel, "K")


#: Earth-Agent's multi-channel LST = a·T31 + b·(T31 - T32) + c.
MULTI_CHANNEL = (1.022, 0.47, 0.43)


def _multi_channel(ctx: ToolContext, paths: dict[str, str]):
    arrs, grid = _read(ctx, paths)
    _same(arrs)
    t31, t32 = arrs["band31_path"], arrs["band32_path"]
    a, b, c = MULTI_CHANNEL
    return a * t31 + b * (t31 - t32) + c, grid


@_tool("lst_multi_channel")
def lst_multi_channel(ctx: ToolContext, args) -> ToolResult:
    """LST (K) from MODIS bands 31 and 32 brightness temperatures (K) by the linear split-window form
    LST = 1.022·T31 + 0.47·(T31 - T32) + 0.43 (Earth-Agent's ``lst_multi_channel`` coefficients; the
    form of Price 1984, JGR 89(D5):7231-7237, without emissivity terms)."""
    return batch(ctx, args, ("band31_path", "band32_path"), _multi_channel, "K")


#: Earth-Agent's split-window coefficients C0..C4.
SPLIT_WINDOW = (0.268, 1.378, 0.183, 54.3, -2.238)


def _split_window(parameter: str):
    def compute(ctx: ToolContext, paths: dict[str, str]):
        arrs, grid = _read(ctx, paths)
        _same(arrs)
        t31, t32 = arrs["band31_path"], arrs["band32_path"]
        e31, e32 = (arrs[f] * EMIS_SCALE + EMIS_OFFSET for f in ("emissivity31_path", "emissivity32_path"))
        dt, d_eps = t31 - t32, e31 - e32
        eps = np.clip((e31 + e32) / 2, 0.8, 1.0)
        if parameter == "PWV":
            with np.errstate(all="ignore"):
                return dt / (t31 * eps) * 100, grid
        c0, c1, c2, c3, c4 = SPLIT_WINDOW
        t = t31 - 273.15
        lst = c0 + c1 * t + c2 * t ** 2 / 1000 + (c3 + c4 * dt) * (1 - eps) + (c3 + c4 * dt) * d_eps + 273.15
        with np.errstate(invalid="ignore"):
            return np.where((lst < 200) | (lst > 350), np.nan, lst), grid
    return compute


@_tool("split_window")
def split_window(ctx: ToolContext, args) -> ToolResult:
    """Split-window LST (K) or a water-vapour proxy from MODIS bands 31/32 brightness temperatures (K)
    and their MOD11 emissivity bands (DN·0.002 + 0.49), Earth-Agent's ``split_window``: with
    T = T31 - 273.15, ΔT = T31 - T32, ε = clip((ε31 + ε32)/2, 0.8, 1), Δε = ε31 - ε32,
    ``parameter="LST"``: LST = 0.268 + 1.378·T + 0.183·T²/1000 + (54.3 - 2.238·ΔT)·(1 - ε)
    + (54.3 - 2.238·ΔT)·Δε + 273.15, NaN outside 200-350 K; ``"PWV"``: ΔT/(T31·ε)·100. The
    emissivity terms follow the generalised split-window form of Wan & Dozier (1996, IEEE TGRS
    34(4):892-905) and Jiménez-Muñoz & Sobrino (2008, IJRS 29(17-18)); the coefficients are
    Earth-Agent's, not fitted per water vapour class as in those papers.

    Raises:
        ToolError: ``out_of_range`` for a parameter other than LST or PWV.
    """
    parameter = str(args.parameter).strip().upper()
    if parameter not in ("LST", "PWV"):
        raise ToolError("out_of_range", f"parameter={args.parameter!r}: LST or PWV")
    return batch(ctx, args, ("band31_path", "band32_path", "emissivity31_path", "emissivity32_path"),
                 _split_window(parameter), "K" if parameter == "LST" else "index")


#: Earth-Agent's plausible BT/LST range for modis_day_night_lst (K).
DAY_NIGHT_RANGE = (270.0, 325.0)


def nearest_resize(arr: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """``arr`` resized to ``shape`` by nearest neighbour on the pixel index (row i of the output
    takes row min(floor(i·h/H), h - 1) of the input), as Earth-Agent's ``modis_day_night_lst``."""
    (h, w), (hh, ww) = arr.shape, shape
    rows = np.minimum((np.arange(hh) / (hh / h)).astype(np.int64), h - 1)
    cols = np.minimum((np.arange(ww) / (ww / w)).astype(np.int64), w - 1)
    return arr[np.ix_(rows, cols)]


def _day_night(ctx: ToolContext, paths: dict[str, str]):
    arrs, grid = _read(ctx, paths)
    lo, hi = DAY_NIGHT_RANGE
    shape = arrs["BT_day_path"].shape
    with np.errstate(invalid="ignore"):
        bt = np.where((arrs["BT_day_path"] > hi) | (arrs["BT_day_path"] < lo), np.nan, arrs["BT_day_path"])
        eps = np.clip(nearest_resize(arrs["Emis_day_path"] * EMIS_SCALE + EMIS_OFFSET, shape), 0.5, 1.0)
        lst = emissivity_corrected(bt, eps, 11.0)
        return np.where((lst > hi) | (lst < lo), np.nan, lst), grid


@_tool("modis_day_night_lst")
def modis_day_night_lst(ctx: ToolContext, args) -> ToolResult:
    """Daytime LST (K) from MODIS band 31 brightness temperature and MOD11 emissivity (Earth-Agent's
    ``modis_day_night_lst``, band 1 of its output): BT outside 270-325 K NaN, emissivity
    DN·0.002 + 0.49 resized to the BT grid (:func:`nearest_resize`) and clipped to [0.5, 1],
    LST = BT/(1 + (λ·BT/c2)·ln ε) with λ = 11.0 µm (:func:`emissivity_corrected`; Artis & Carnahan
    1982), NaN outside 270-325 K. The night files are read (a missing one is an error) but Earth-Agent
    writes night LST as band 2, which EarthRL's one-band rasters do not hold."""
    return batch(ctx, args, ("BT_day_path", "BT_night_path", "Emis_day_path", "Emis_night_path"), _day_night, "K")


def _tes(paths: list[str], rep: int):
    def compute(ctx: ToolContext, _):
        arrs = [read(ctx, p, "tir_band_paths") for p in paths]
        grid = arrs[0][1]
        stack = np.stack([a for a, _ in arrs])
        ref = stack[rep]
        with np.errstate(invalid="ignore"):
            valid = (ref > 0) & (ref < 1000)
        stack[:, ~valid] = np.nan
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN pixel stack is NaN
            spread = np.nanmax(stack, axis=0) - np.nanmin(stack, axis=0)
        eps = np.clip(0.982 - 0.072 * spread, 0.85, 0.999)
        lst = emissivity_corrected(stack[rep], eps, 10.6)
        return np.where(valid & np.isfinite(eps), lst, np.nan), grid
    return compute


def _bands(args, field: str, n: int | None = None) -> list[str]:
    paths = getattr(args, field)
    if isinstance(paths, str) or not paths or (n and len(paths) != n):
        raise ToolError("schema_error", f"{field}: give a list of {n or 'the'} thermal band files of one scene")
    return [str(p) for p in paths]


@_tool("temperature_emissivity_separation")
def temperature_emissivity_separation(ctx: ToolContext, args) -> ToolResult:
    """LST (K) from several thermal bands' brightness temperatures (K), e.g. ASTER bands 10-14, by
    Earth-Agent's simplified temperature-emissivity separation (band 1 of its output): pixels where
    the band ``representative_band_index`` (0-based) is outside (0, 1000) K are NaN; Δ = max - min
    brightness temperature over the bands; ε = clip(0.982 - 0.072·Δ, 0.85, 0.999);
    LST = BT_rep/(1 + (λ·BT_rep/c2)·ln ε), λ = 10.6 µm. Gillespie et al. (1998, IEEE TGRS
    36(4):1113-1126) separate emissivity spectra from radiances with the NEM, ratio and MMD modules
    (ε_min = 0.994 - 0.687·MMD^0.737); Earth-Agent's empirical spread-to-emissivity line stands in
    for them, and Earth-Bench's answers assume it.

    Raises:
        ToolError: ``out_of_range`` when the index is not a band of the list.
    """
    paths = _bands(args, "tir_band_paths")
    rep = int(args.representative_band_index)
    if not 0 <= rep < len(paths):
        raise ToolError("out_of_range", f"representative_band_index={rep}: 0 to {len(paths) - 1} "
                                        f"(an index into tir_band_paths)")
    return batch(ctx, args, (), _tes(paths, rep), "K", inputs=paths)


#: Earth-Agent's ttm_lst: weights of the three bands, offset (K), valid BT range (K).
TTM_WEIGHTS, TTM_OFFSET, TTM_RANGE = (0.3, 0.3, 0.4), 2.0, (240.0, 340.0)


def _ttm(paths: list[str]):
    def compute(ctx: ToolContext, _):
        arrs = {f"tir_band_paths[{i}]": read(ctx, p, "tir_band_paths")[0] for i, p in enumerate(paths)}
        _same(arrs)
        grid = read(ctx, paths[0], "tir_band_paths")[1]
        b = list(arrs.values())
        lo, hi = TTM_RANGE
        with np.errstate(invalid="ignore"):
            valid = np.logical_and.reduce([(x > lo) & (x < hi) for x in b])
        lst = sum(w * x for w, x in zip(TTM_WEIGHTS, b)) + TTM_OFFSET
        return np.where(valid, lst, np.nan), grid
    return compute


@_tool("ttm_lst")
def ttm_lst(ctx: ToolContext, args) -> ToolResult:
    """LST (K) from three thermal bands' brightness temperatures (K), e.g. ASTER bands 10-12, as
    Earth-Agent's ``ttm_lst`` computes it (band 1 of its output): 0.3·B1 + 0.3·B2 + 0.4·B3 + 2 K
    where all three lie in (240, 340) K, else NaN; ``wavelengths`` is accepted and, as in Earth-Agent's
    tool, unused. The three-temperature method of its name (Qiu et al. 1998/2006, a soil-plant
    model from surface, air and reference temperatures) is not what the tool computes; Earth-Bench's
    answers assume this weighted mean."""
    paths = _bands(args, "tir_band_paths", 3)
    return batch(ctx, args, (), _ttm(paths), "K", inputs=paths)


def bilinear_resize(arr: np.ndarray, grid: Grid, shape: tuple[int, int]) -> np.ndarray:
    """``arr`` (on ``grid``) resampled bilinearly to ``shape`` over the same extent (GDAL warp with a
    target width and height, as Earth-Agent's ``ATI`` resamples); unchanged when already that shape."""
    if arr.shape == tuple(shape):
        return arr
    from affine import Affine
    from rasterio.warp import Resampling, reproject

    crs = grid.crs or "EPSG:4326"
    dst_transform = grid.transform @ Affine.scale(arr.shape[1] / shape[1], arr.shape[0] / shape[0])
    out = np.full(shape, np.nan)
    reproject(arr, out, src_transform=grid.transform, src_crs=crs, dst_transform=dst_transform, dst_crs=crs,
              src_nodata=np.nan, dst_nodata=np.nan, resampling=Resampling.bilinear)
    return out


def _ati(ctx: ToolContext, paths: dict[str, str]):
    day, grid = read(ctx, paths["day_temp_path"], "day_temp_path")
    night = bilinear_resize(*read(ctx, paths["night_temp_path"], "night_temp_path"), day.shape)
    albedo = bilinear_resize(*read(ctx, paths["albedo_path"], "albedo_path"), day.shape)
    dt = day - night
    with np.errstate(all="ignore"):
        return np.clip((1 - albedo) / np.where(dt == 0, np.nan, dt), 0, 10), grid


@_tool("ATI")
def ati(ctx: ToolContext, args) -> ToolResult:
    """Apparent thermal inertia ATI = (1 - albedo)/(T_day - T_night) (Price 1977, JGR 82(18):2582-2590;
    Earth-Agent's ``ATI``): night temperature and albedo resampled to the day grid
    (:func:`bilinear_resize`), NaN where T_day = T_night, clipped to [0, 10] (K⁻¹)."""
    return batch(ctx, args, ("day_temp_path", "night_temp_path", "albedo_path"), _ati, "1/K")


# -- water vapour ------------------------------------------------------------------------------

#: band centres (µm) of MODIS bands 2, 5 (window) and 17, 18, 19 (water vapour absorption).
MODIS_WV_UM = {"b02": 0.865, "b05": 1.240, "b17": 0.905, "b18": 0.936, "b19": 0.940}
#: Earth-Agent's absorption coefficient k of PWV = -ln(T18)/k.
PWV_K = 0.03


def _band_ratio(ctx: ToolContext, paths: dict[str, str]):
    arrs, grid = _read(ctx, paths)
    _same(arrs)
    r = {k: arrs[f"sur_refl_{k}_path"] for k in MODIS_WV_UM}
    lam = MODIS_WV_UM
    slope = (r["b05"] - r["b02"]) / (lam["b05"] - lam["b02"])
    rho18 = slope * lam["b18"] + (r["b02"] - slope * lam["b02"])  # window reflectance at 0.936 µm
    nodata = ~np.isfinite(rho18) | ~np.isfinite(r["b18"])
    with np.errstate(all="ignore"):
        t18 = np.where(rho18 != 0, r["b18"] / np.where(rho18 != 0, rho18, 1), 0.0)
        pwv = -np.log(t18) / PWV_K
    pwv[np.isnan(pwv) | (pwv < 0)] = 0.0
    return np.where(nodata, np.nan, pwv), grid


@_tool("band_ratio")
def band_ratio(ctx: ToolContext, args) -> ToolResult:
    """Precipitable water vapour from MODIS near-infrared bands by the band ratio method (Kaufman &
    Gao 1992, IEEE TGRS 30(5):871-884), Earth-Agent's ``band_ratio`` (band 1, PWV, of its output):
    the window reflectance at 0.936 µm interpolated linearly between bands 2 (0.865 µm) and 5
    (1.240 µm), transmittance T18 = ρ18/ρ_window (0 where the window is 0), PWV = -ln(T18)/0.03
    with NaN and negative values set to 0 (Earth-Agent's single absorption coefficient, not Kaufman &
    Gao's fitted band-ratio curves); a pixel that is nodata in band 2, 5 or 18 is NaN. Bands 17 and
    19 are read (their transmittances are Earth-Agent's bands 2 and 4) but do not enter the PWV."""
    return batch(ctx, args, tuple(f"sur_refl_{k}_path" for k in MODIS_WV_UM), _band_ratio, "cm")


# -- TVDI --------------------------------------------------------------------------------------

#: Earth-Agent's compute_tvdi: MODIS scale factors applied to the inputs (NDVI·0.0001, LST·0.02), the
#: NDVI intervals over each date's NDVI range, and the fewest valid pixels for a fit.
TVDI_NDVI_SCALE, TVDI_LST_SCALE, TVDI_BINS, TVDI_MIN_VALID = 1e-4, 0.02, 100, 100
TVDI_EDGES = ("earth_agent", "earthrl")


def earth_agent_tvdi(ndvi: np.ndarray, lst: np.ndarray) -> np.ndarray:
    """TVDI (0 wet - 1 dry, float32) as Earth-Agent's ``compute_tvdi`` computes it (Sandholt et al.
    2002, RSE 79:213-224, with its own conventions): NDVI·0.0001 and LST·0.02 (the MODIS scale factors;
    on inputs already in NDVI units and K this only leaves NDVI >= 0 and LST > 0 valid, since TVDI is
    invariant to the LST scale); valid pixels 0 <= NDVI <= 1 and LST > 0; 100 equal NDVI intervals
    [lo, hi) over the date's valid NDVI range (the pixels at the maximum NDVI fall in none); every
    interval with a pixel gives its maximum and minimum LST at its centre; least-squares dry and wet
    edges (``scipy.stats.linregress``); TVDI = (LST - wet)/(dry - wet) with a zero denominator as 1e-6,
    clipped to [0, 1], NaN outside the valid pixels. All NaN when fewer than 100 pixels are valid or
    fewer than 2 intervals hold one."""
    from scipy.stats import linregress

    n, t = ndvi * TVDI_NDVI_SCALE, lst * TVDI_LST_SCALE
    with np.errstate(invalid="ignore"):
        valid = (n >= 0) & (n <= 1) & (t > 0)
    out = np.full(ndvi.shape, np.nan, dtype=np.float32)
    x, y = n[valid], t[valid]
    if x.size < TVDI_MIN_VALID:
        return out
    edges = np.linspace(x.min(), x.max(), TVDI_BINS + 1)
    idx = np.searchsorted(edges, x, side="right") - 1  # edges[i] <= x < edges[i + 1]
    inside = idx < TVDI_BINS
    used = np.unique(idx[inside])
    if used.size < 2:
        return out
    centres = (edges[used] + edges[used + 1]) / 2
    dry = np.array([y[inside & (idx == i)].max() for i in used])
    wet = np.array([y[inside & (idx == i)].min() for i in used])
    fd, fw = linregress(centres, dry), linregress(centres, wet)
    lst_max, lst_min = n * fd.slope + fd.intercept, n * fw.slope + fw.intercept
    den = lst_max - lst_min
    den = np.where(den == 0, 1e-6, den)
    with np.errstate(all="ignore"):
        tvdi = np.clip((t - lst_min) / den, 0, 1)
    out[valid] = tvdi[valid]
    return out


def _tvdi(edges: str):
    def compute(ctx: ToolContext, paths: dict[str, str]):
        arrs, grid = _read(ctx, paths)
        _same(arrs)
        ndvi, lst = arrs["ndvi_path"], arrs["lst_path"]
        if edges == "earth_agent":
            return earth_agent_tvdi(ndvi, lst), grid
        conv = {k: v for k, v in DEFAULTS.items() if k != "min_valid_share"}
        e = tvdi_edges(ndvi, lst, **conv)
        ok = np.isfinite(ndvi) & np.isfinite(lst) & tvdi_valid(
            ndvi, lst, conv["ndvi_min"], conv["ndvi_max"], conv["lst_min"], conv["lst_max"], conv["exclude_frozen"])
        return tvdi_index(ndvi, lst, e, ok)[0], grid
    return compute


@_tool("compute_tvdi")
def compute_tvdi(ctx: ToolContext, args) -> ToolResult:
    """Temperature-vegetation dryness index from NDVI and LST rasters (Sandholt, Rasmussen & Andersen
    2002, RSE 79:213-224). ``edges="earth_agent"`` (default; Earth-Bench's answers assume it):
    :func:`earth_agent_tvdi`. ``edges="earthrl"``: EarthRL's ``tvdi`` conventions
    (:data:`earthrl.envs.tools.tvdi_core.DEFAULTS`: NDVI intervals of 0.01 over the fixed [0, 1], LST
    200-350 K, a minimum count of pixels per interval, NaN where the edges cross), on NDVI in NDVI
    units and LST in K.

    Raises:
        ToolError: ``out_of_range`` for another ``edges``; with ``"earthrl"``, ``empty_raster`` when
            fewer than 3 NDVI intervals hold enough pixels.
    """
    edges = getattr(args, "edges", None) or "earth_agent"
    if edges not in TVDI_EDGES:
        raise ToolError("out_of_range", f"edges={edges!r}: earth_agent (Earth-Agent's binning, the default) or "
                                        "earthrl (EarthRL's tvdi conventions)")
    return batch(ctx, args, ("ndvi_path", "lst_path"), _tvdi(edges), "index")


# -- LST statistics over NDVI classes ----------------------------------------------------------

def _ndvi_lst(ctx: ToolContext, red: str, nir: str, lst: str, fields: tuple[str, str, str], threshold: float,
              mode: str) -> np.ndarray:
    """LST values of the pixels whose NDVI = (NIR - red)/(NIR + red) (NaN where the sum is 0) is
    >= ``threshold`` (``mode="above"``) or < it (``"below"``)."""
    arrs = {fields[0]: read(ctx, red, fields[0])[0], fields[1]: read(ctx, nir, fields[1])[0],
            fields[2]: read(ctx, lst, fields[2])[0]}
    _same(arrs)
    r, n, t = arrs.values()
    with np.errstate(all="ignore"):
        s = n + r
        ndvi = (n - r) / np.where(s == 0, np.nan, s)
        sel = ndvi < threshold if mode == "below" else ndvi >= threshold
    return t[sel]


def _mode(args) -> str:
    mode = getattr(args, "mode", None) or "above"
    if mode not in ("above", "below"):
        raise ToolError("out_of_range", f"mode={mode!r}: above (NDVI >= threshold) or below (NDVI < threshold)")
    return mode


@_tool("calculate_max_lst_by_ndvi")
def calculate_max_lst_by_ndvi(ctx: ToolContext, args) -> ToolResult:
    """Maximum LST (``np.nanmax``) over the pixels whose NDVI from ``red_path``/``nir_path`` is >=
    ``ndvi_threshold`` (``mode="above"``) or < it (``"below"``), Earth-Agent's
    ``calculate_max_lst_by_ndvi``; a number (``null`` when the selected LST is all NaN).

    Raises:
        ToolError: ``empty_raster`` when no pixel passes the NDVI condition.
    """
    mode = _mode(args)
    sel = _ndvi_lst(ctx, args.red_path, args.nir_path, args.lst_path, ("red_path", "nir_path", "lst_path"),
                    float(args.ndvi_threshold), mode)
    if sel.size == 0:
        raise ToolError("empty_raster", f"ndvi_threshold={args.ndvi_threshold}: no pixel has NDVI "
                                        f"{'below' if mode == 'below' else 'at or above'} it; change the threshold or mode")
    valid = sel[~np.isnan(sel)]
    return result(float(valid.max()) if valid.size else float("nan"))


@_tool("calculate_mean_lst_by_ndvi")
def calculate_mean_lst_by_ndvi(ctx: ToolContext, args) -> ToolResult:
    """Mean LST over the pixels of all image sets whose NDVI (from ``red_paths``/``nir_paths``) is >=
    ``ndvi_threshold`` (``mode="above"``) or < it (``"below"``) and whose LST is finite: the selected
    pixels of every set pooled (Earth-Agent's ``calculate_mean_lst_by_ndvi``); a number, ``null``
    when no pixel is selected.

    Raises:
        ToolError: ``schema_error`` when the three lists differ in length.
    """
    mode = _mode(args)
    lists = [[args.red_paths] if isinstance(args.red_paths, str) else list(args.red_paths),
             [args.nir_paths] if isinstance(args.nir_paths, str) else list(args.nir_paths),
             [args.lst_paths] if isinstance(args.lst_paths, str) else list(args.lst_paths)]
    if len({len(v) for v in lists}) > 1:
        raise ToolError("schema_error", f"red_paths, nir_paths, lst_paths: give lists of the same length "
                                        f"(one red, NIR and LST file per image), got {[len(v) for v in lists]}")
    fields = ("red_paths", "nir_paths", "lst_paths")
    sel = [_ndvi_lst(ctx, r, n, t, fields, float(args.ndvi_threshold), mode) for r, n, t in zip(*lists)]
    pooled = np.concatenate(sel) if sel else np.array([])
    pooled = pooled[np.isfinite(pooled)]
    return result(float(pooled.mean()) if pooled.size else float("nan"))
