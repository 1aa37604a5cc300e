"""Earth-Agent's raster tools computed on Earth-Bench's files (``env.mode=execute``).

Each function has Earth-Agent's arguments and semantics (``agent/tools/Statistics.py``, commit
ae155eab; the index tools from the formulas their names state) and answers as Earth-Bench's
recorded outputs show: a statistic of a batch is a JSON list with one number per file, a single
statistic a number, a tool writing a raster ``Result save at benchmark/out/questionN/<file>``.
Files are resolved by :mod:`earthrl.envs.tools.earthagent_files`. ``data["output"]`` holds the
value at full precision, as replay mode's ``data["output"]`` holds the recorded one.

:data:`EXECUTE` maps tool name -> ``fn(ctx, args) -> ToolResult``; the tool surface
(:mod:`earthrl.envs.tools.earthagent`) registers these instead of the replay-only answer.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable

import numpy as np

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.tools.earthagent_files import artifact_name, data_folder, listing, read, write
from earthrl.envs.tools.registry import ToolContext, ToolResult

EXECUTE: dict[str, Callable[[ToolContext, object], ToolResult]] = {}


def _tool(*names: str):
    def deco(fn):
        for n in names:
            EXECUTE[n] = fn
        return fn
    return deco


def result(value) -> ToolResult:
    """The observation of ``value`` as Earth-Bench records it (a string as is, anything else as JSON; a NaN, e.g. the mean of an image without valid pixels, as ``null``), with ``data["output"] = value``."""
    if isinstance(value, float) and math.isnan(value):
        value = None
    elif isinstance(value, list):
        value = [None if isinstance(v, float) and math.isnan(v) else v for v in value]
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return ToolResult(text, {"output": value})


def written(ctx: ToolContext, output_path: str | None, arr: np.ndarray, grid, inputs: list[str],
            units: str = "value") -> ToolResult:
    """Write ``arr`` to ``output_path`` (:func:`~earthrl.envs.tools.earthagent_files.write`): Earth-Agent's
    ``Result save at …`` observation, the artifact named, ``data["output_path"]`` as given."""
    text = write(ctx, output_path, arr, grid, inputs, units)
    return ToolResult(text, {"output_path": output_path}, artifact_name(output_path))


def _files(args, field: str = "file_list") -> list[str]:
    value = getattr(args, field, None)
    if isinstance(value, str):
        value = [value]
    if not value:
        raise ToolError("schema_error", f"{field}: give the list of image paths to read")
    return [str(v) for v in value]


def _no_uint8(args) -> None:
    if getattr(args, "uint8", False):
        raise ToolError("tool_error", "uint8=true (Earth-Agent's 8-bit conversion) is not reproduced in execute "
                                      "mode; call with uint8=false")


def _valid(arr: np.ndarray) -> np.ndarray:
    return arr[~np.isnan(arr)]


@_tool("get_filelist", "mcp-base_get_filelist")
def get_filelist(ctx: ToolContext, args) -> ToolResult:
    """The file names of the task's data folder, sorted (``dir_path``'s last component must name it)."""
    folder = data_folder(ctx)
    name = str(args.dir_path).strip().rstrip("/\\").replace("\\", "/").split("/")[-1]
    if name != folder.name:
        raise ToolError("hallucinated_path", f"dir_path: {args.dir_path!r} is not this task's data folder; "
                                             f"list benchmark/data/{folder.name}")
    return result(listing(folder))


def _stat(fn: Callable[[np.ndarray], float]):
    def per_file(ctx: ToolContext, path: str, field: str) -> float:
        arr, _ = read(ctx, path, field)
        valid = _valid(arr)
        return float(fn(valid)) if valid.size else float("nan")
    return per_file


_mean, _max, _sum = _stat(np.mean), _stat(np.max), _stat(np.sum)


@_tool("calc_single_image_mean")
def calc_single_image_mean(ctx: ToolContext, args) -> ToolResult:
    """Mean of the valid pixels of ``file_path`` (NaN, nodata and ±inf left out: ``np.nanmean``)."""
    _no_uint8(args)
    return result(_mean(ctx, args.file_path, "file_path"))


@_tool("calc_batch_image_mean")
def calc_batch_image_mean(ctx: ToolContext, args) -> ToolResult:
    """``[mean of the valid pixels of each file of file_list]`` (Earth-Agent: one ``np.nanmean`` per file)."""
    _no_uint8(args)
    return result([_mean(ctx, f, "file_list") for f in _files(args)])


@_tool("calc_batch_image_max")
def calc_batch_image_max(ctx: ToolContext, args) -> ToolResult:
    """``[maximum valid pixel of each file]`` (``np.nanmax``)."""
    _no_uint8(args)
    return result([_max(ctx, f, "file_list") for f in _files(args)])


@_tool("calc_batch_image_sum")
def calc_batch_image_sum(ctx: ToolContext, args) -> ToolResult:
    """``[sum of the valid pixels of each file]`` (``np.nansum``)."""
    _no_uint8(args)
    return result([_sum(ctx, f, "file_list") for f in _files(args)])


@_tool("calc_batch_image_mean_mean")
def calc_batch_image_mean_mean(ctx: ToolContext, args) -> ToolResult:
    """Mean over the files of each file's mean (a number)."""
    _no_uint8(args)
    return result(float(np.nanmean([_mean(ctx, f, "file_list") for f in _files(args)])))


def _share(ctx: ToolContext, path: str, field: str, threshold: float, mode: str, band_index: int = 0) -> float:
    """Percentage (0–100) of the valid pixels of band ``band_index`` passing ``mode`` against ``threshold``."""
    ops = {"above": np.greater, "below": np.less, "equal": np.equal, "above_equal": np.greater_equal,
           "below_equal": np.less_equal}
    if mode not in ops:
        raise ToolError("out_of_range", f"mode={mode!r}: one of {', '.join(ops)}")
    arr, _ = read(ctx, path, field, band_index)
    valid = _valid(arr)
    return float(100.0 * np.count_nonzero(ops[mode](valid, threshold)) / valid.size) if valid.size else 0.0


@_tool("calculate_threshold_ratio")
def calculate_threshold_ratio(ctx: ToolContext, args) -> ToolResult:
    """Mean over ``image_paths`` of the percentage (0–100) of valid pixels of band ``band_index`` that are
    ``mode`` (above: >, below: <, equal, above_equal: >=, below_equal: <=) ``threshold``; 0 for an image
    without valid pixels (Earth-Agent's definition)."""
    files = _files(args, "image_paths")
    return result(float(np.mean([_share(ctx, f, "image_paths", args.threshold, args.mode, args.band_index)
                                 for f in files])))


@_tool("calc_batch_image_hotspot_percentage")
def calc_batch_image_hotspot_percentage(ctx: ToolContext, args) -> ToolResult:
    """``[fraction (0–1) of the valid pixels of each file above threshold]`` (strictly greater)."""
    _no_uint8(args)
    try:
        threshold = float(args.threshold)
    except (TypeError, ValueError):
        raise ToolError("schema_error", f"threshold: give a number, got {args.threshold!r}") from None
    return result([_share(ctx, f, "file_list", threshold, "above") / 100.0 for f in _files(args)])


@_tool("calc_batch_fire_pixels")
def calc_batch_fire_pixels(ctx: ToolContext, args) -> ToolResult:
    """``[number of pixels above fire_threshold in each file]`` (fire radiative power > threshold)."""
    out = []
    for f in _files(args):
        arr, _ = read(ctx, f, "file_list")
        out.append(int(np.count_nonzero(_valid(arr) > args.fire_threshold)))
    return result(out)


# -- normalized-difference indices (spyndex formulas) -------------------------------------------

#: tool -> (spyndex index, {spyndex band symbol: argument}); each is (a - b) / (a + b).
INDICES = {
    "calculate_ndvi": ("NDVI", {"N": "nir_band_file", "R": "red_band_file"}),
    # Gao 1996 NDWI (NIR, SWIR), spyndex's NDMI
    "calculate_ndwi": ("NDMI", {"N": "input_nir_path", "S1": "input_swir_path"}),
    "calculate_nbr": ("NBR", {"N": "input_nir_path", "S2": "input_swir_path"}),
    "calculate_ndti": ("NDTI", {"R": "input_red_path", "G": "input_green_path"}),
    "calculate_ndsi": ("NDSI", {"G": "input_green_path", "S1": "input_swir_path"}),
}
_OUTPUT = {"calculate_ndvi": "output_file", "calculate_ndsi": "output_filename"}


def normalized_difference(ctx: ToolContext, index: str, bands: dict[str, tuple[str, object]]):
    """spyndex's ``index`` (a normalized difference of two bands) of band files ``bands`` (spyndex band
    symbol -> (argument name, path)), NaN where an input is nodata or both are 0.

    Returns:
        ``(float64 array, grid of the first file, [paths read])``.

    Raises:
        ToolError: ``schema_error`` when a path is not one string; ``tool_error`` when the files differ in size.
    """
    import spyndex

    params, grid, paths = {}, None, []
    for sym, (field, path) in bands.items():
        if not isinstance(path, str):
            raise ToolError("schema_error", f"{field}: give one band file path (this tool computes one image "
                                            "per call)")
        params[sym], g = read(ctx, path, field)
        grid, paths = grid or g, paths + [path]
    shapes = {a.shape for a in params.values()}
    if len(shapes) > 1:
        fields = ", ".join(f for f, _ in bands.values())
        raise ToolError("tool_error", f"{fields}: the band files differ in size {sorted(shapes)}")
    with np.errstate(all="ignore"):
        arr = np.asarray(spyndex.computeIndex(index, params=params), dtype=np.float64)
    arr[~np.isfinite(arr)] = np.nan
    return arr, grid, paths


def _index(ctx: ToolContext, args) -> ToolResult:
    """The tool's normalized-difference index (:data:`INDICES`, :func:`normalized_difference`) of its two
    band files, written to its output path."""
    tool = ctx.call["name"]
    index, bands = INDICES[tool]
    arr, grid, paths = normalized_difference(ctx, index, {s: (f, getattr(args, f, None)) for s, f in bands.items()})
    return written(ctx, getattr(args, _OUTPUT.get(tool, "output_path")), arr, grid, paths, "index")


for _name in INDICES:
    EXECUTE[_name] = _index


# -- pixel-wise arithmetic ---------------------------------------------------------------------

@_tool("calculate_tif_average")
def calculate_tif_average(ctx: ToolContext, args) -> ToolResult:
    """Pixel-wise mean of the files of ``file_list`` (NaN pixels left out; NaN where all are NaN)."""
    _no_uint8(args)
    files = _files(args)
    arrs, grid = [], None
    for f in files:
        a, g = read(ctx, f, "file_list")
        arrs.append(a)
        grid = grid or g
    if len({a.shape for a in arrs}) > 1:
        raise ToolError("tool_error", "file_list: the images differ in size")
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN pixel stack is NaN
        avg = np.nanmean(np.stack(arrs), axis=0)
    return written(ctx, args.output_path, avg, grid, files)


def _difference(ctx: ToolContext, first: str, second: str, fields: tuple[str, str], output_path: str) -> ToolResult:
    """``first - second`` pixel-wise, written to ``output_path``."""
    a, grid = read(ctx, first, fields[0])
    b, _ = read(ctx, second, fields[1])
    if a.shape != b.shape:
        raise ToolError("tool_error", f"{fields[0]}, {fields[1]}: the images differ in size ({a.shape}, {b.shape})")
    return written(ctx, output_path, a - b, grid, [first, second])


@_tool("calculate_tif_difference")
def calculate_tif_difference(ctx: ToolContext, args) -> ToolResult:
    """``image_b - image_a`` pixel-wise (Earth-Agent: the first image is subtracted from the second)."""
    _no_uint8(args)
    return _difference(ctx, args.image_b_path, args.image_a_path, ("image_b_path", "image_a_path"), args.output_path)


@_tool("subtract")
def subtract(ctx: ToolContext, args) -> ToolResult:
    """``img1 - img2`` pixel-wise."""
    return _difference(ctx, args.img1_path, args.img2_path, ("img1_path", "img2_path"), args.output_path)
