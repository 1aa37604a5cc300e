"""The real RS tools of EarthRL (rasterio + numpy + spyndex), registered in :data:`TOOLS`.

This module holds the eleven tools of ``earthrl-mini`` (toolset ``"mini"``); the family modules
next to it hold the rest, and :data:`~earthrl.envs.tools.registry.TOOLS` imports them all on its
first read.

Tools take scene ids of the task (``S2_T33UUU_20170216``, ``LT50350322008110PAC01``), band
references ``<scene>:<band>`` (e.g. ``LT50350322008110PAC01:b4``) or names of artifacts that
earlier calls produced. Reflectance bands are read as reflectance 0-1 (stored value x 1/10000,
nodata -> NaN). Outputs are float32 GeoTIFFs (NaN nodata) or uint8 masks (0/1, 255 nodata)
written to the episode workspace and registered with their lineage
(:class:`~earthrl.envs.data.artifacts.ArtifactRegistry`). Output names are deterministic, derived from
the inputs, so the same workflow always yields the same names.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import operator
from typing import Literal

import numpy as np
from pydantic import Field

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.data.catalog import BQA_BITS, FMASK_CLASSES, IGBP_CLASSES, read_band
from earthrl.envs.data.scene import scene_line
from earthrl.envs.tools import band_math
from earthrl.envs.tools.common import ALL_SKILLS, Layer, fmt, load_layer, valid_values  # noqa: F401  (re-exported API)
from earthrl.envs.tools.common import align as _align
from earthrl.envs.tools.common import layer_source as _layer_source
from earthrl.envs.tools.common import out_name as _out_name
from earthrl.envs.tools.common import same_grid as _same_grid
from earthrl.envs.tools.common import write_raster as _write_raster
from earthrl.envs.tools.registry import (  # noqa: F401  (re-exported API)
    DOMAINS,
    FAMILIES,
    TOOLS,
    Args,
    Tool,
    ToolContext,
    ToolResult,
    openai_schema,
    register_tool,
)

OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
       "==": operator.eq, "!=": operator.ne}
_OP_NAMES = {">": "gt", ">=": "ge", "<": "lt", "<=": "le", "==": "eq", "!=": "ne"}


# ---------------------------------------------------------------------------------------------
# Data & Preprocessing


class NoArgs(Args):
    pass


@register_tool("list_files", args=NoArgs, description="List scenes and artifacts.",
               domain="Data & Preprocessing", family="SPA", skills=ALL_SKILLS,
               output_kind="catalogue")
def list_files(ctx: ToolContext, args: NoArgs) -> ToolResult:
    """Data manifest: the task's scenes (id, sensor, date, bands) and the artifacts made so far."""
    reg = ctx.registry
    lines = [scene_line(s) for s in reg.scenes.values()]
    lines += [f"{a.name} | {a.kind} | {a.units}" for a in reg.artifacts.values()]
    return ToolResult("\n".join(lines) or "no files",
                      {"scenes": list(reg.scenes), "artifacts": list(reg.artifacts)})


class NameArgs(Args):
    name: str


@register_tool("read_metadata", args=NameArgs,
               description="Bands, CRS, resolution, shape, date.",
               domain="Data & Preprocessing", family="SPA", skills=ALL_SKILLS,
               output_kind="metadata")
def read_metadata(ctx: ToolContext, args: NameArgs) -> ToolResult:
    """Metadata of a scene (bands grouped by resolution, CRS, date, dtype, scale, nodata) or of an
    artifact (kind, CRS, shape, resolution m, dtype, units, nodata, parents)."""
    reg = ctx.registry
    ref = args.name.strip()
    if ref in reg.artifacts or ref.removesuffix(".tif") in reg.artifacts:
        a = reg.get(ref)
        d = {"name": a.name, "kind": a.kind, "crs": a.crs, "shape": list(a.shape) if a.shape else None,
             "res_m": a.res[0] if a.res else None, "dtype": a.dtype, "units": a.units,
             "nodata": "NaN" if a.dtype == "float32" else a.nodata, "sensor": a.sensor,
             "date": a.date, "parents": a.parents}
        if a.shape is None:  # series / table / vector / image: no grid
            d = {k: v for k, v in d.items() if v is not None and k not in ("res_m", "nodata")}
            d["file"] = a.path.name if a.path else None
    else:
        s = reg.scene(ref)
        groups: dict[str, list[str]] = {}
        for b in s.bands:
            _, m = read_band(s, b)
            groups.setdefault(f"{m['res'][0]:g}m {m['shape'][0]}x{m['shape'][1]} {m['dtype']}",
                              []).append(b)
            crs = m["crs"]
        d = {"name": s.id, "kind": "scene", "sensor": s.sensor, "date": s.date, "crs": crs,
             "bands": {k: ",".join(v) for k, v in groups.items()}, "scale": s.scale,
             "nodata": s.nodata, "units": "reflectance x10000" if s.units == "reflectance" else s.units}
        if s.units == "IGBP class":
            d["classes"] = ", ".join(f"{k} {v}" for k, v in IGBP_CLASSES.items())
        if s.qa_kind == "fmask":
            d["qa"] = f"{s.qa_band}: " + ", ".join(f"{k} {v}" for k, v in FMASK_CLASSES.items())
        elif s.qa_kind == "bqa":
            d["qa"] = f"{s.qa_band} bits: " + ", ".join(f"{k} {b}" for k, (b, _) in BQA_BITS.items())
        if s.mtl is not None:
            d.update(scale=None, units="TOA reflectance (MTL), thermal K", mtl=s.mtl.name)
        if s.vectors:
            d["vectors"] = list(s.vectors)
    return ToolResult(json.dumps(d, separators=(",", ":")), d)


class QaArgs(Args):
    scene: str
    classes: list[int] = Field(description="0 clear,1 water,2 shadow,3 snow,4 cloud")


def qa_mask_name(ctx: ToolContext, args: QaArgs) -> str:
    """``qa<classes>_<scene>``, classes sorted and ``-``-joined (e.g. ``qa1_LT5...``)."""
    cls = "-".join(str(c) for c in sorted(set(args.classes)))
    return _out_name(f"qa{cls}", ctx.registry.scene(args.scene).id)


@register_tool("qa_mask", args=QaArgs, description="Mask of Fmask classes (Landsat).",
               domain="Data & Preprocessing", family="SPA", skills=["cloud_masking"],
               sensors=["landsat-5", "landsat-7"], output_kind="mask", output_name=qa_mask_name)
def qa_mask(ctx: ToolContext, args: QaArgs) -> ToolResult:
    """uint8 mask (1 where the Fmask code is in ``classes``, 0 elsewhere, 255 on fill) of a scene's
    QA band (CFmask codes, :data:`~earthrl.envs.data.catalog.FMASK_CLASSES`).

    Raises:
        ToolError: the scene has no Fmask band (Sentinel-2 L1C) or a class code is unknown.
    """
    s = ctx.registry.scene(args.scene)
    if s.qa_kind != "fmask":
        raise ToolError("tool_error", f"scene {s.id} ({s.sensor}) has no Fmask band; "
                        "qa_mask works on Landsat 5/7 lsts scenes; use cloud_mask otherwise")
    bad = [c for c in args.classes if c not in FMASK_CLASSES or c == 255]
    if bad or not args.classes:
        raise ToolError("tool_error", f"classes {args.classes}: use codes 0 clear land, 1 water, "
                        "2 cloud shadow, 3 snow, 4 cloud")
    raw, meta = read_band(s, s.qa_band)
    mask = np.isin(raw, args.classes).astype(np.uint8)
    mask[raw == 255] = 255
    layer = Layer(mask, meta["crs"], meta["transform"], "mask", f"{s.id}:{s.qa_band}", "band",
                  s.sensor, s.date)
    return _write_raster(ctx, qa_mask_name(ctx, args), mask, [layer], kind="mask", units="mask")


# ---------------------------------------------------------------------------------------------
# Physical & GIS Analytics


class IndexArgs(Args):
    scene: str
    index: str = Field(description="e.g. NDVI")


def _spyndex_index(name: str):
    import spyndex

    keys = {k.lower(): k for k in spyndex.indices}
    key = keys.get(name.strip().lower())
    if key is None:
        close = difflib.get_close_matches(name.upper(), list(spyndex.indices), n=4)
        raise ToolError("tool_error", f"unknown index {name!r}"
                        + (f"; did you mean {', '.join(close)}?" if close else "; try NDVI, NDWI"))
    return spyndex.indices[key]


#: Constants an index's own paper publishes where they differ from spyndex's catalogue-wide
#: default (``spyndex.constants[sym].default``; L = 1 there, EVI's canopy background term, which
#: the spyndex maintainers note is not SAVI's). Index -> {symbol: value}; every other index and
#: constant takes the spyndex default (EVI and EVI2: L = 1, g = 2.5, C1 = 6, C2 = 7.5).
PUBLISHED_CONSTANTS: dict[str, dict[str, float]] = {
    "SAVI": {"L": 0.5},   # Huete 1988, RSE 25:295, L = 0.5 for intermediate vegetation
    "GSAVI": {"L": 0.5},  # Sripada et al. 2006, Agron. J. 98:968, green SAVI with L = 0.5
    "SARVI": {"L": 0.5},  # Kaufman & Tanre 1992, IEEE TGRS 30:261, L = 0.5
    "MNLI": {"L": 0.5},   # Gong et al. 2003, IEEE TGRS 41:1355, L = 0.5
    "IBI": {"L": 0.5},    # Xu 2008, IJRS 29:4269, SAVI term with L = 0.5
}


#: Formulas of the index's own paper where the spyndex catalogue's differs. Index -> formula
#: over spyndex symbols (evaluated by :func:`earthrl.envs.tools.band_math.evaluate`).
PUBLISHED_FORMULAS: dict[str, str] = {
    # Feyisa et al. 2014, RSE 140:23, eq. 1: 4·(ρ2 − ρ5) − (0.25·ρ4 + 2.75·ρ7); spyndex 0.12 has
    # "4.0*(G-S1)-0.25*N+2.75*S2" (the SWIR2 term added instead of subtracted)
    "AWEInsh": "4.0 * (G - S1) - (0.25 * N + 2.75 * S2)",
}


def index_constant(idx, sym: str, given: dict[str, float] | None = None) -> float:
    """Value of constant ``sym`` in index ``idx`` (a ``spyndex.indices`` entry): the caller's
    ``given[sym]`` when present, else the index's published value (:data:`PUBLISHED_CONSTANTS`),
    else spyndex's default ``spyndex.constants[sym].default``.

    Raises:
        ToolError: the constant has no default (e.g. a central wavelength) and none was given.
    """
    import spyndex

    if given and sym in given:
        return float(given[sym])
    own = PUBLISHED_CONSTANTS.get(idx.short_name, {})
    if sym in own:
        return own[sym]
    default = spyndex.constants[sym].default
    if default is None:
        raise ToolError("tool_error", f"{idx.short_name} needs constant {sym!r} "
                        f"({spyndex.constants[sym].description}), which has no default; give it in constants")
    return float(default)


def compute_index(reg, s, index: str, constants: dict[str, float] | None = None):
    """``(arr, layers, idx)``: index ``index`` of scene ``s`` computed in float64 (spyndex formula,
    or the paper's where the catalogue's differs, :data:`PUBLISHED_FORMULAS`, over the scene's bands as float64 reflectance 0-1, i.e. the float64 nearest DN / 10000;
    constants by :func:`index_constant`; coarser bands replicated to the finest grid) and rounded
    once to float32, the stored precision, so a pixel whose exact index equals a decimal threshold
    is stored as that threshold rounded to float32 (see :func:`threshold_mask`); NaN where any
    input is nodata or x/0. Also returns the aligned input layers (float64) and the spyndex
    index object.

    Raises:
        ToolError: unknown index; a band symbol the sensor lacks; a constant the index does not
            use, or one without a default.
    """
    import spyndex

    idx = _spyndex_index(index)
    unused = sorted(set(constants or {}) - set(idx.bands))
    if unused:
        used = [b for b in idx.bands if b in spyndex.constants and b not in s.symbols]
        raise ToolError("tool_error", f"constants: {idx.short_name} ({idx.formula}) has no constant "
                        f"{', '.join(unused)}; its constants: {', '.join(used) or 'none'}")
    params, layers = {}, []
    for sym in idx.bands:
        if sym in s.symbols:
            layers.append(load_layer(reg, f"{s.id}:{s.symbols[sym]}", np.float64))
            params[sym] = None
        elif sym in spyndex.constants:
            params[sym] = index_constant(idx, sym, constants)
        else:
            raise ToolError("tool_error", (
                f"{idx.short_name} needs band {sym!r}, which {s.sensor} scene {s.id} lacks "
                f"(bands by symbol: {', '.join(f'{k}={v}' for k, v in s.symbols.items())}); "
                "pick another index or use band_math"))
    layers = _align(layers)
    for sym, layer in zip([k for k, v in params.items() if v is None], layers):
        params[sym] = layer.arr
    with np.errstate(all="ignore"):
        if idx.short_name in PUBLISHED_FORMULAS:
            arr = band_math.evaluate(PUBLISHED_FORMULAS[idx.short_name],
                                     {k: v if isinstance(v, np.ndarray) else np.float64(v) for k, v in params.items()})
        else:
            arr = np.asarray(spyndex.computeIndex(idx.short_name, params=params), dtype=np.float64)
        arr = arr.astype(np.float32)
    if not np.isfinite(arr.sum()):  # fast path (one SIMD reduction): no NaN/inf at all
        inf = np.isinf(arr)  # x/0 -> NaN (0/0 is NaN already)
        if inf.any():
            arr[inf] = np.nan
    return arr, layers, idx


def spectral_index_name(ctx: ToolContext, args: IndexArgs) -> str:
    """``<index>_<scene>``, the index as spyndex spells it, lower case (e.g. ``ndvi_S2_T33UUU_20170216``).

    Raises:
        ToolError: unknown index; HallucinatedPathError: unknown scene.
    """
    return _out_name(_spyndex_index(args.index).short_name.lower(), ctx.registry.scene(args.scene).id)


@register_tool("spectral_index", args=IndexArgs,
               description="Spectral index raster of a scene.",
               domain="Physical & GIS Analytics", family="PRA",
               skills=["spectral_index", "vegetation_drought", "water_flood"],
               sensors=["sentinel-2", "landsat-5", "landsat-7", "landsat-8"], output_kind="raster",
               valid_range=(-1.0, 1.0), output_name=spectral_index_name)
def spectral_index(ctx: ToolContext, args: IndexArgs) -> ToolResult:
    """Index ``args.index`` of ``args.scene`` from the Awesome Spectral Indices catalogue
    (``spyndex.indices[...]``, ``spyndex.computeIndex``): the index's band symbols (N, R, G, B,
    S1 ...) map to the scene's bands (:data:`~earthrl.envs.data.catalog.S2_SYMBOLS`,
    :data:`~earthrl.envs.data.catalog.LANDSAT_SYMBOLS`) read as reflectance 0-1; constants (L, g,
    C1, C2 ...) are the index's own published values (:func:`index_constant`; a caller of
    :func:`compute_index` may give its own, which win: spyndex's defaults, e.g. EVI2 L = 1 (Jiang et al. 2008), except
    :data:`PUBLISHED_CONSTANTS`, e.g. SAVI L = 0.5 (Huete 1988)); coarser S2 bands are replicated
    to the finest band's grid. Computed in float64, written as float32 ``<index>_<scene>``
    (NaN where any input is nodata by the one no-data
    rule, :func:`earthrl.envs.data.calibration.fill_mask` — e.g. Sentinel-2 DN 0 — or 0/0).

    Raises:
        ToolError: unknown index (suggests close names) or a band the sensor lacks.
    """
    s = ctx.registry.scene(args.scene)
    arr, layers, idx = compute_index(ctx.registry, s, args.index)
    res = _write_raster(ctx, spectral_index_name(ctx, args), arr, layers, kind="raster", units="index")
    res.text = f"{idx.short_name} of {s.id}: " + res.text
    return res


class MathArgs(Args):
    expr: str = Field(description="e.g. (a-b)/(a+b)")
    inputs: dict[str, str] = Field(description="var: artifact or scene:band")


def band_math_name(ctx: ToolContext, args: MathArgs) -> str:
    """``bm_<sha1 of [expr, sorted inputs]>[:8]``."""
    key = json.dumps([args.expr, sorted(args.inputs.items())])
    return "bm_" + hashlib.sha1(key.encode()).hexdigest()[:8]


@register_tool("band_math", args=MathArgs,
               description="Raster from an expression.",
               domain="Physical & GIS Analytics", family="PRA", skills=["spectral_index"],
               output_kind="raster", output_name=band_math_name)
def band_math_tool(ctx: ToolContext, args: MathArgs) -> ToolResult:
    """Evaluate ``args.expr`` with the safe AST evaluator (:func:`earthrl.envs.tools.band_math.evaluate`;
    no Python eval) over ``inputs`` (variable -> artifact name or ``scene:band``, bands as
    reflectance 0-1, NaN on no-data by :func:`earthrl.envs.data.calibration.fill_mask`, which
    stays NaN whatever the expression). Arithmetic in float64 (bands as the float64 nearest
    DN / 10000); comparisons round both sides to float32 first, the rule of
    :func:`threshold_mask`, so ``(s - n) / (s + n) > 0.15`` is 0 on a pixel exactly on 0.15.
    Writes float32 ``bm_<hash>``.

    Raises:
        ToolError: unsafe/invalid expression, bad variable name, inputs on different grids.
    """
    if not args.inputs:
        raise ToolError("tool_error", "inputs is empty; e.g. {\"a\": \"<scene>:B08\"}")
    bad = [k for k in args.inputs if not k.isidentifier() or k.startswith("_")]
    if bad:
        raise ToolError("tool_error", f"input names {bad} must be simple identifiers like a, nir")
    layers = _align([load_layer(ctx.registry, v, np.float64) for v in args.inputs.values()])
    try:
        arr = band_math.evaluate(args.expr, {k: l.arr for k, l in zip(args.inputs, layers)})
    except band_math.UnsafeExpressionError as e:
        raise ToolError("tool_error", f"expr: {e}") from None
    arr[~np.isfinite(arr)] = np.nan
    return _write_raster(ctx, band_math_name(ctx, args), arr, layers, kind="raster", units="expression")


# ---------------------------------------------------------------------------------------------
# AI Interpretation


class ThresholdArgs(Args):
    name: str
    op: Literal[">", ">=", "<", "<=", "==", "!="] = ">"
    value: float


def threshold_mask_name(ctx: ToolContext, args: ThresholdArgs) -> str:
    """``<name>_<gt|ge|lt|le|eq|ne><value>`` (a scene band ``S:B08`` as ``S_B08``)."""
    return _out_name(_layer_source(ctx.registry, args.name).replace(":", "_"), f"{_OP_NAMES[args.op]}{args.value:g}")


@register_tool("threshold_mask", args=ThresholdArgs,
               description="Mask where raster op value.",
               domain="AI Interpretation", family="SPA",
               skills=["water_flood", "vegetation_drought", "land_cover"], output_kind="mask",
               output_name=threshold_mask_name)
def threshold_mask(ctx: ToolContext, args: ThresholdArgs) -> ToolResult:
    """uint8 mask: 1 where ``raster <op> value``, 0 elsewhere, 255 (nodata) where the raster is
    NaN. Output ``<name>_<gt|ge|lt|le|eq|ne><value>``.

    Ties: a pixel exactly on ``value`` is in for ``>=``/``<=``, out for ``>``/``<`` (:func:`compare`).
    """
    layer = load_layer(ctx.registry, args.name)
    mask = compare(layer.arr, args.op, args.value)
    return _write_raster(ctx, threshold_mask_name(ctx, args), mask, [layer], kind="mask", units="mask")


def stored_threshold(value: float) -> np.float32:
    """``value`` rounded to float32, the precision rasters are stored in (IEEE round to nearest),
    so that it equals the stored value of a pixel lying exactly on it."""
    return np.float32(value)


def compare(arr: np.ndarray, op: str, value: float) -> np.ndarray:
    """uint8 mask of ``arr <op> value`` compared in float32 (:func:`stored_threshold`: both sides
    rounded to float32), 255 where ``arr`` is NaN.

    Ties: the comparison is exact on the stored values. Rasters are stored as float32 and every
    EarthRL index and band is the float32 nearest its exact value (computed in float64 from the
    DN, or DN / 10000 for a band, then rounded once), so ``value`` is rounded to float32 too and a
    pixel whose exact value equals ``value`` (e.g. NDBI 0.15 from DN 1150 and 850) counts as
    equal: in for ``>=``/``<=``/``==``, out for ``>``/``<``. Values within half a float32 step of
    ``value`` (6e-8 relative) count as equal as well.

    Raises:
        KeyError: ``op`` not one of ``> >= < <= == !=``.
    """
    a = arr if arr.dtype == np.float32 else arr.astype(np.float32)
    with np.errstate(invalid="ignore"):
        mask = OPS[op](a, stored_threshold(value)).astype(np.uint8)
    mask[np.isnan(a)] = 255
    return mask


# ---------------------------------------------------------------------------------------------
# Statistics (SAA)


def _mask_counts(ctx: ToolContext, ref: str) -> tuple[Layer, int, int]:
    layer = load_layer(ctx.registry, ref)
    if layer.kind != "mask":
        raise ToolError("tool_error", f"{ref} is a {layer.kind} ({layer.units}), not a mask; "
                        "make one with threshold_mask or qa_mask")
    valid = ~np.isnan(layer.arr)
    return layer, int((layer.arr == 1).sum()), int(valid.sum())


@register_tool("pixel_share", args=NameArgs, description="Percent of mask pixels that are 1.",
               domain="Physical & GIS Analytics", family="SAA",
               skills=["water_flood", "vegetation_drought", "cloud_masking", "land_cover"],
               output_kind="number",
               valid_range=(0.0, 100.0))
def pixel_share(ctx: ToolContext, args: NameArgs) -> ToolResult:
    """Share (percent, 0-100) of valid (non-255) pixels of a mask that are 1.

    Raises:
        ToolError: not a mask, or no valid pixels.
    """
    layer, ones, valid = _mask_counts(ctx, args.name)
    if valid == 0:
        raise ToolError("tool_error", f"{args.name} has no valid pixels")
    pct = 100.0 * ones / valid
    return ToolResult(f"{layer.source}: {fmt(pct)} % of valid pixels are 1 ({ones} of {valid})",
                      {"share_pct": pct, "ones_px": ones, "valid_px": valid})


class AreaArgs(Args):
    name: str
    unit: Literal["km2", "m2"] = "km2"


@register_tool("mask_area", args=AreaArgs, description="Area of mask pixels that are 1.",
               domain="Physical & GIS Analytics", family="SAA",
               skills=["water_flood", "land_cover"], output_kind="number")
def mask_area(ctx: ToolContext, args: AreaArgs) -> ToolResult:
    """Area of the 1-pixels, in km² (default) or m²: the sum of their true cell areas on the
    ellipsoid of the mask's CRS (:func:`earthrl.envs.tools.area.cell_areas`: cell corners mapped
    to the Lambert cylindrical equal-area projection on the file's datum; exact for lat/lon,
    Web-Mercator and UTM grids), not the nominal |pixel width x height| of the geotransform,
    which is 1/cos²(latitude) too large on Web-Mercator (EPSG:3857). ``pixel_m2`` is the cell
    area when all cells are equal, else None.

    Raises:
        ToolError: not a mask; the mask has no usable CRS / geotransform.
    """
    layer, ones, _ = _mask_counts(ctx, args.name)
    area = layer.area_m2(layer.arr == 1) / (1e6 if args.unit == "km2" else 1.0)
    px = layer.pixel_areas()
    px_m2 = float(px[0, 0]) if np.ptp(px) == 0 else None
    grid = "lat/lon" if _is_geographic(layer.crs) else "projected"
    how = (f"{ones} px x {fmt(px_m2)} m2" if px_m2 else
           f"{ones} px, true cell areas of the {grid} grid, mean {fmt(float(np.mean(px)))} m2")
    return ToolResult(f"{layer.source}: area {fmt(area)} {args.unit} ({how})",
                      {"area": area, "unit": args.unit, "ones_px": ones, "pixel_m2": px_m2})


def _is_geographic(crs) -> bool:
    from pyproj import CRS

    return CRS.from_user_input(crs).is_geographic


@register_tool("raster_stats", args=NameArgs,
               description="Mean, std, min, max, median of a raster.",
               domain="Spatio-Temporal Analysis", family="SAA",
               skills=["spectral_index", "vegetation_drought", "lst_inversion", "change_trend"],
               output_kind="number")
def raster_stats(ctx: ToolContext, args: NameArgs) -> ToolResult:
    """Statistics over valid (non-NaN) pixels of an artifact or ``scene:band`` (float64
    accumulation): mean, std (population), min, max, median, p10, p90, valid_px, nodata_px.

    Raises:
        ToolError: no valid pixels (kind ``empty_raster``).
    """
    layer = load_layer(ctx.registry, args.name)
    v = valid_values(layer, "name")
    p10, med, p90 = np.percentile(v, [10, 50, 90])
    d = {"mean": float(v.mean()), "std": float(v.std()), "min": float(v.min()),
         "max": float(v.max()), "median": float(med), "p10": float(p10), "p90": float(p90),
         "valid_px": int(v.size), "nodata_px": int(layer.arr.size - v.size)}
    text = ", ".join(f"{k} {fmt(x) if isinstance(x, float) else x}" for k, x in d.items())
    return ToolResult(f"{layer.source} ({layer.units}): {text}", d)


class DiffArgs(Args):
    a: str
    b: str


def raster_difference_name(ctx: ToolContext, args: DiffArgs) -> str:
    """``diff_<a>_<b>`` (scene bands ``S:B`` as ``S_B``)."""
    a, b = (_layer_source(ctx.registry, r).replace(":", "_") for r in (args.a, args.b))
    return _out_name("diff", a, b)


@register_tool("raster_difference", args=DiffArgs, description="Raster a minus raster b.",
               domain="Spatio-Temporal Analysis", family="SAA", skills=["change_trend"],
               output_kind="raster", output_name=raster_difference_name)
def raster_difference(ctx: ToolContext, args: DiffArgs) -> ToolResult:
    """float32 ``a - b`` (NaN where either is nodata), saved as ``diff_<a>_<b>``.

    Raises:
        ToolError: different CRS / shape / transform (the message names both rasters).
    """
    la, lb = load_layer(ctx.registry, args.a), load_layer(ctx.registry, args.b)
    _same_grid([la, lb])
    arr = (la.arr - lb.arr).astype(np.float32)
    return _write_raster(ctx, raster_difference_name(ctx, args), arr, [la, lb], kind="raster", units=f"{la.units} difference")


# ---------------------------------------------------------------------------------------------
# Final action


class AnswerArgs(Args):
    value: float | str
    unit: str = ""


@register_tool("answer", args=AnswerArgs, description="Final answer.",
               domain="Visualization", family="SAA", skills=ALL_SKILLS, output_kind="answer")
def answer(ctx: ToolContext, args: AnswerArgs) -> ToolResult:
    """Record the final answer ``{"value", "unit"}``; the env ends the episode."""
    return ToolResult(f"answer recorded: {args.value} {args.unit}".strip(),
                      {"value": args.value, "unit": args.unit})

