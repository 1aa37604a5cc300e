"""Earth-Agent's batch and conditional raster statistics computed on Earth-Bench's files (``env.mode=execute``).

Sources of the semantics, tool by tool (each function's doc says which):

- **Earth-Agent's definition** (``agent/tools/Statistics.py``, commit ae155eab; ``count_above_threshold``
  from ``agent/tools/Perception.py``): thresholds, strict or inclusive comparisons, percent (0–100) or
  fraction (0–1), the order of the returned values. Where Earth-Bench's reference calls use a tool in a
  way that definition cannot answer (a list where it opens one file, LST where it keeps values in
  [0, 1]) the doc says what is done instead.
- **Earth-Agent's Index server as public forks carry it** (``calculate_batch_ndsi``,
  ``calc_extreme_snow_loss_percentage_from_binary_map``): the Index server is not in the copy of
  Earth-Agent we read.
- **Derived from the recorded calls** (``calc_severe_water_loss_percentage``): no definition is public.

Files are read and written by :mod:`earthrl.envs.tools.earthagent_files` (nodata and ±inf are NaN and
left out, as Earth-Agent's ``read_image`` does); answers are formatted by
:func:`~earthrl.envs.tools.earthagent_rasters.result`: a batch statistic a JSON list, a single one a
number, a tuple of Earth-Agent's a JSON list, a written raster ``Result save at benchmark/out/questionN/<file>``.

:data:`EXECUTE` maps tool name -> ``fn(ctx, args) -> ToolResult``, merged into the tool surface by
:mod:`earthrl.envs.tools.earthagent`.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

import numpy as np

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.tools.earthagent_files import artifact_name, last_component, read, read_bands, write
from earthrl.envs.tools.earthagent_rasters import (
    _files,
    _no_uint8,
    _share,
    _valid,
    normalized_difference,
    result,
    written,
)
from earthrl.envs.tools.registry import ToolContext, ToolResult

EXECUTE: dict[str, Callable[[ToolContext, object], ToolResult]] = {}

#: Earth-Agent's two-way modes: ``above`` strictly greater, ``below`` strictly less.
STRICT = {"above": np.greater, "below": np.less}


def _tool(fn):
    EXECUTE[fn.__name__] = fn
    return fn


def _mode(value, field: str, modes=STRICT):
    """The comparison of mode ``value`` (case-insensitive).

    Raises:
        ToolError: ``out_of_range`` naming ``field`` and the modes.
    """
    key = str(value).strip().lower()
    if key not in modes:
        raise ToolError("out_of_range", f"{field}={value!r}: one of {', '.join(modes)}")
    return modes[key]


def _same_shape(arrays: list[np.ndarray], fields: str) -> None:
    shapes = sorted({a.shape for a in arrays})
    if len(shapes) > 1:
        raise ToolError("tool_error", f"{fields}: the images differ in size {shapes}")


def _mask_written(ctx: ToolContext, output_path, mask: np.ndarray, grid, inputs: list[str]) -> str:
    """Write a 0/1 map (float; NaN stays NaN) and return its ``Result save at …`` text."""
    return write(ctx, output_path, mask.astype(np.float32), grid, inputs, "mask")


def _nanmean(values) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of no value is NaN
        return float(np.nanmean(values)) if len(values) else float("nan")


# -- batch statistics (Statistics.py) -----------------------------------------------------------

@_tool
def calc_batch_image_skewness(ctx: ToolContext, args) -> ToolResult:
    """``[skewness of the valid pixels of each file]``: the adjusted Fisher–Pearson coefficient
    G1 = sqrt(n(n−1))/(n−2) · m3/m2^1.5 (``scipy.stats.skew(bias=False)``, Earth-Agent's choice;
    Joanes & Gill 1998, The Statistician 47(1)). NaN for a file with fewer than 3 valid pixels."""
    from scipy.stats import skew

    _no_uint8(args)
    out = []
    for f in _files(args):
        valid = _valid(read(ctx, f, "file_list")[0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a constant image has no skewness
            out.append(float(skew(valid, bias=False)) if valid.size > 2 else float("nan"))
    return result(out)


@_tool
def calc_batch_image_mean_max_min(ctx: ToolContext, args) -> ToolResult:
    """``[mean of the files' means, maximum of their maxima, minimum of their minima]`` over the valid
    pixels of band 1 of each file (Earth-Agent's tuple, as a JSON list).

    Raises:
        ToolError: ``tool_error`` when a file has no valid pixel.
    """
    _no_uint8(args)
    means, maxs, mins = [], [], []
    for f in _files(args):
        valid = _valid(read(ctx, f, "file_list")[0])
        if not valid.size:
            raise ToolError("tool_error", f"file_list: {last_component(f)} has no valid pixel")
        means.append(valid.mean())
        maxs.append(valid.max())
        mins.append(valid.min())
    return result([float(np.mean(means)), float(np.max(maxs)), float(np.min(mins))])


@_tool
def calc_batch_image_mean_threshold(ctx: ToolContext, args) -> ToolResult:
    """Of the files whose band ``band_index`` (0-based) has a valid mean, the percentage (0–100,
    ``return_type='ratio'``) or number (``'count'``) whose mean is ``> threshold`` (``above``) or
    ``< threshold`` (``above=false``); 0 when no file has a valid mean."""
    _no_uint8(args)
    if args.return_type not in ("ratio", "count"):
        raise ToolError("out_of_range", f"return_type={args.return_type!r}: one of ratio, count")
    means = [m for m in (_nanmean(_valid(read(ctx, f, "file_list", args.band_index)[0])) for f in _files(args))
             if not np.isnan(m)]
    n = int(np.count_nonzero((np.greater if args.above else np.less)(means, args.threshold)))
    if args.return_type == "count":
        return result(n)
    return result(100.0 * n / len(means) if means else 0.0)


def _ratios(ctx: ToolContext, args) -> list[float]:
    """Percentage (0–100) of the valid pixels of band 1 of each image of ``image_paths`` that are ``mode``
    ``value_threshold`` (0 for an image without valid pixels)."""
    _mode(args.mode, "mode")
    return [_share(ctx, f, "image_paths", args.value_threshold, str(args.mode).strip().lower())
            for f in _files(args, "image_paths")]


@_tool
def count_images_exceeding_threshold_ratio(ctx: ToolContext, args) -> ToolResult:
    """Number of images of ``image_paths`` whose percentage of valid pixels ``> value_threshold``
    (``mode='above'``) or ``< value_threshold`` (``'below'``) is strictly greater than ``ratio_threshold``
    (a percentage). ``verbose`` (Earth-Agent's printing) has no effect."""
    return result(sum(r > args.ratio_threshold for r in _ratios(ctx, args)))


@_tool
def average_ratio_exceeding_threshold(ctx: ToolContext, args) -> ToolResult:
    """Mean of the percentages (as in :func:`count_images_exceeding_threshold_ratio`) of the images whose
    percentage is strictly greater than ``ratio_threshold``; 0 when none is."""
    kept = [r for r in _ratios(ctx, args) if r > args.ratio_threshold]
    return result(float(np.mean(kept)) if kept else 0.0)


@_tool
def count_images_exceeding_mean_multiplier(ctx: ToolContext, args) -> ToolResult:
    """Number of images of ``image_paths`` whose mean (valid pixels of band 1) is ``>`` (``mode='above'``)
    or ``<`` (``'below'``) ``mean_multiplier`` × the mean of all the images' means. A path listed twice
    counts twice, as in Earth-Agent."""
    op = _mode(args.mode, "mode")
    means = [_nanmean(_valid(read(ctx, f, "image_paths")[0])) for f in _files(args, "image_paths")]
    threshold = args.mean_multiplier * _nanmean(means)
    return result(int(np.count_nonzero(op(np.asarray(means), threshold))))


# -- per-image statistics -----------------------------------------------------------------------

@_tool
def calc_single_image_hotspot_percentage(ctx: ToolContext, args) -> ToolResult:
    """Fraction (0–1) of the valid pixels of ``file_path`` strictly above ``threshold``; 0 without valid pixels."""
    return result(_share(ctx, args.file_path, "file_path", args.threshold, "above") / 100.0)


@_tool
def count_above_threshold(ctx: ToolContext, args) -> ToolResult:
    """Number of pixels of band 1 of ``file_path`` strictly above ``threshold`` (Earth-Agent's
    ``Perception.py``; nodata pixels are not counted)."""
    arr, _ = read(ctx, args.file_path, "file_path")
    return result(int(np.count_nonzero(_valid(arr) > args.threshold)))


@_tool
def get_percentile_value_from_image(ctx: ToolContext, args) -> ToolResult:
    """The ``percentile``-th percentile (1–100, numpy's linear interpolation, Hyndman & Fan 1996 type 7) of
    the valid pixels of band 1 of ``image_path``, an integer (rounded) for an integer raster. Earth-Bench's
    references also pass a list of images: their valid pixels are pooled (Earth-Agent opens one file)."""
    p = args.percentile
    if not 1 <= p <= 100:
        raise ToolError("out_of_range", f"percentile={p}: give a percentile between 1 and 100")
    pixels, integer = [], True
    for f in _files(args, "image_path"):
        arr, grid = read(ctx, f, "image_path")
        pixels.append(_valid(arr))
        integer &= np.issubdtype(np.dtype(grid.dtype), np.integer)
    pooled = np.concatenate(pixels)
    if not pooled.size:
        raise ToolError("tool_error", "image_path: no valid pixel value in the image")
    value = float(np.percentile(pooled, p))
    return result(int(round(value)) if integer else value)


@_tool
def image_division_mean(ctx: ToolContext, args) -> ToolResult:
    """Mean of ``numerator / denominator`` over the pixels where both are valid and the denominator is not 0:
    band ``band1`` over band ``band2`` (1-based, Earth-Agent's) of ``image_path1`` when ``image_path2`` is
    not given, else band 1 of ``image_path1`` over band 1 of ``image_path2``; NaN when no pixel qualifies."""
    if args.image_path2 is None:
        bands, _ = read_bands(ctx, args.image_path1, "image_path1")
        for field, b in (("band1", args.band1), ("band2", args.band2)):
            if not 1 <= b <= bands.shape[0]:
                raise ToolError("out_of_range", f"{field}={b}: {last_component(args.image_path1)} has "
                                                f"{bands.shape[0]} band(s), numbered from 1")
        num, den = bands[args.band1 - 1], bands[args.band2 - 1]
    else:
        num, den = read(ctx, args.image_path1, "image_path1")[0], read(ctx, args.image_path2, "image_path2")[0]
        _same_shape([num, den], "image_path1, image_path2")
    ok = ~np.isnan(num) & ~np.isnan(den) & (den != 0)
    return result(_nanmean(num[ok] / den[ok]))


@_tool
def calculate_intersection_percentage(ctx: ToolContext, args) -> ToolResult:
    """Percentage (0–100) of the pixels valid in both ``path1`` and ``path2`` where ``path1 > threshold1``
    and ``path2 > threshold2`` (band 1 of each); 0 when no pixel is valid in both."""
    a, b = read(ctx, args.path1, "path1")[0], read(ctx, args.path2, "path2")[0]
    _same_shape([a, b], "path1, path2")
    valid = ~np.isnan(a) & ~np.isnan(b)
    both = valid & (a > args.threshold1) & (b > args.threshold2)
    n = int(np.count_nonzero(valid))
    return result(100.0 * np.count_nonzero(both) / n if n else 0.0)


_DATE = re.compile(r"(\d{4})[-_](\d{2})[-_](\d{2})(?:[-_](\d{4}))?")


def _pairs(first: list[str], second: list[str]) -> list[tuple[str, str]]:
    """``path1``/``path2`` files paired by the date in their names (``YYYY-MM-DD`` or ``YYYY_MM_DD``, an
    ``_HHMM`` time too), in date order; by position when a name carries no date."""
    def key(path: str):
        m = _DATE.search(last_component(path))
        return m and m.groups()

    k1, k2 = [key(p) for p in first], [key(p) for p in second]
    if all(k1) and all(k2):
        by_date = dict(zip(k2, second))
        return [(p, by_date[k]) for k, p in sorted(zip(k1, first)) if k in by_date]
    if len(first) != len(second):
        raise ToolError("schema_error", f"path1, path2: give as many files in each ({len(first)} and "
                                        f"{len(second)}), or names with their dates to pair them by")
    return list(zip(first, second))


@_tool
def calc_threshold_value_mean(ctx: ToolContext, args) -> ToolResult:
    """Mean of the ``path2`` pixels where the matching ``path1`` image is ``> threshold`` (and > 0), pooled
    over the file pairs (:func:`_pairs`), both valid; NaN when no pixel qualifies.

    Earth-Agent's version pairs only names stamped ``YYYY_MM_DD_HHMM`` and keeps only ``path2`` values in
    [0, 1] (TVDI); Earth-Bench's references pass ``YYYY-MM-DD`` names and LST as ``path2`` with recorded
    means near 300 K, so neither restriction is applied here.
    """
    pairs = _pairs(_files(args, "path1"), _files(args, "path2"))
    if not pairs:
        raise ToolError("tool_error", "path1, path2: no file of path1 has a file of path2 with the same date")
    values = []
    for p1, p2 in pairs:
        a, b = read(ctx, p1, "path1")[0], read(ctx, p2, "path2")[0]
        _same_shape([a, b], "path1, path2")
        with np.errstate(invalid="ignore"):
            values.append(b[(a > args.threshold) & (a > 0) & ~np.isnan(b)])
    return result(_nanmean(np.concatenate(values)))


# -- conditions on the bands of one image -------------------------------------------------------

def _conditions(ctx: ToolContext, args) -> tuple[np.ndarray, np.ndarray]:
    """``(pixels passing every condition, valid pixels of the first condition's band)`` of ``image_path``
    for ``band_conditions`` = ``[[band_index (0-based), threshold, 'above'|'below'], …]``."""
    conds = args.band_conditions
    if not conds or not all(isinstance(c, (list, tuple)) and len(c) == 3 for c in conds):
        raise ToolError("schema_error", f"band_conditions: give [[band_index, threshold, 'above' or 'below'], …], "
                                        f"got {conds!r}")
    bands, _ = read_bands(ctx, args.image_path, "image_path")
    passing = np.ones(bands.shape[1:], dtype=bool)
    for band_index, threshold, mode in conds:
        if not isinstance(band_index, int) or not 0 <= band_index < bands.shape[0]:
            raise ToolError("out_of_range", f"band_conditions: band_index {band_index!r}: "
                                            f"{last_component(args.image_path)} has {bands.shape[0]} band(s), "
                                            f"indexed from 0")
        with np.errstate(invalid="ignore"):
            passing &= _mode(mode, "band_conditions: compare_type")(bands[band_index], float(threshold))
    return passing, ~np.isnan(bands[conds[0][0]])


@_tool
def calculate_multi_band_threshold_ratio(ctx: ToolContext, args) -> ToolResult:
    """Percentage (0–100) of the pixels passing every condition of ``band_conditions`` (strict ``above`` /
    ``below``), over the valid pixels of the first condition's band (Earth-Agent's denominator); 0 without."""
    passing, valid = _conditions(ctx, args)
    n = int(np.count_nonzero(valid))
    return result(100.0 * np.count_nonzero(passing) / n if n else 0.0)


@_tool
def count_pixels_satisfying_conditions(ctx: ToolContext, args) -> ToolResult:
    """Number of pixels passing every condition of ``band_conditions`` (strict ``above`` / ``below``)."""
    return result(int(np.count_nonzero(_conditions(ctx, args)[0])))


#: calculate_band_mean_by_condition's modes: ``above`` is inclusive there (Earth-Agent's).
_BAND_MEAN = {"above": np.greater_equal, "below": np.less}


@_tool
def calculate_band_mean_by_condition(ctx: ToolContext, args) -> ToolResult:
    """Mean of band ``target_band_index`` (0-based) over the pixels where band ``condition_band_index`` is
    ``>= condition_threshold`` (``'above'``) or ``<`` it (``'below'``), both bands valid; NaN when none."""
    op = _mode(args.condition_mode, "condition_mode", _BAND_MEAN)
    cond, _ = read(ctx, args.image_path, "image_path", args.condition_band_index)
    target, _ = read(ctx, args.image_path, "image_path", args.target_band_index)
    with np.errstate(invalid="ignore"):
        keep = op(cond, args.condition_threshold) & ~np.isnan(target)
    return result(_nanmean(target[keep]))


# -- binary maps --------------------------------------------------------------------------------

@_tool
def calc_extreme_snow_loss_percentage_from_binary_map(ctx: ToolContext, args) -> ToolResult:
    """Fraction (0–1) of the valid pixels of ``binary_map_path`` equal to 1 (extreme snow/ice loss); 0
    without valid pixels (Earth-Agent's Index server, as public forks carry it)."""
    valid = _valid(read(ctx, args.binary_map_path, "binary_map_path")[0])
    return result(float(np.count_nonzero(valid == 1.0) / valid.size) if valid.size else 0.0)


@_tool
def calc_severe_water_loss_percentage(ctx: ToolContext, args) -> ToolResult:
    """Fraction (0–1) of the water pixels of ``ndwi_a_path`` (NDWI > 0, McFeeters 1996) whose NDWI in
    ``ndwi_b_path`` dropped by at least ``drop_ratio`` of its value: ``(a − b) / a >= drop_ratio``; 0 without
    water pixels valid in both. No definition is public: derived from Earth-Bench's task wording ("the area
    where NDWI drops by 30 % … to the total water area")."""
    if not 0 < args.drop_ratio < 1:
        raise ToolError("out_of_range", f"drop_ratio={args.drop_ratio}: give the relative drop as a fraction "
                                        "between 0 and 1 (0.3 for 30 %)")
    a, b = read(ctx, args.ndwi_a_path, "ndwi_a_path")[0], read(ctx, args.ndwi_b_path, "ndwi_b_path")[0]
    _same_shape([a, b], "ndwi_a_path, ndwi_b_path")
    with np.errstate(invalid="ignore"):
        water = (a > 0) & ~np.isnan(b)
    n = int(np.count_nonzero(water))
    loss = np.count_nonzero((a[water] - b[water]) / a[water] >= args.drop_ratio)
    return result(float(loss / n) if n else 0.0)


@_tool
def calc_batch_image_hotspot_tif(ctx: ToolContext, args) -> ToolResult:
    """For each file of ``file_list``, a map written to the matching ``output_path_list`` entry: 1 where the
    pixel is ``< threshold``, 0 where ``>=``, NaN where nodata; answers ``["Result save at …", …]``."""
    _no_uint8(args)
    files, outputs = _files(args), _files(args, "output_path_list")
    if len(files) != len(outputs):
        raise ToolError("schema_error", f"output_path_list: give one output path per file of file_list "
                                        f"({len(files)}), got {len(outputs)}")
    if args.threshold is None:
        raise ToolError("schema_error", "threshold: give the value below which a pixel is a hotspot")
    texts = []
    for f, out in zip(files, outputs):
        arr, grid = read(ctx, f, "file_list")
        with np.errstate(invalid="ignore"):
            mask = np.where(np.isnan(arr), np.nan, (arr < args.threshold).astype(np.float64))
        texts.append(_mask_written(ctx, out, mask, grid, [f]))
    return ToolResult(result(texts).text, {"output": texts, "output_paths": outputs}, artifact_name(outputs[-1]))


@_tool
def create_fire_increase_map(ctx: ToolContext, args) -> ToolResult:
    """Map of ``change_image_path`` written to ``output_path``: 1 where the fire change is ``>= threshold``
    (MW), 0 elsewhere (nodata too, as Earth-Agent's 8-bit map)."""
    arr, grid = read(ctx, args.change_image_path, "change_image_path")
    with np.errstate(invalid="ignore"):
        mask = (arr >= args.threshold).astype(np.float64)
    return written(ctx, args.output_path, mask, grid, [args.change_image_path], "mask")


@_tool
def identify_fire_prone_areas(ctx: ToolContext, args) -> ToolResult:
    """Map of ``file_path`` written to ``output_path``: 1 where the hotspot value is ``>=`` the
    ``threshold_percentile``-th percentile of its positive pixels, 0 elsewhere (all 0, threshold 0, when
    no pixel is positive); answers Earth-Agent's tuple ``["Result save at …", threshold]``."""
    _no_uint8(args)
    if not 0 <= args.threshold_percentile <= 100:
        raise ToolError("out_of_range", f"threshold_percentile={args.threshold_percentile}: give 0–100")
    arr, grid = read(ctx, args.file_path, "file_path")
    valid = _valid(arr)
    positive = valid[valid > 0]
    threshold = float(np.percentile(positive, args.threshold_percentile)) if positive.size else 0.0
    with np.errstate(invalid="ignore"):
        mask = (arr >= threshold).astype(np.float64) if positive.size else np.zeros_like(arr)
    text = _mask_written(ctx, args.output_path, mask, grid, [args.file_path])
    return ToolResult(result([text, threshold]).text, {"output": [text, threshold], "output_path": args.output_path},
                      artifact_name(args.output_path))


# -- index batches (Index server) ---------------------------------------------------------------

@_tool
def calculate_batch_ndsi(ctx: ToolContext, args) -> ToolResult:
    """NDSI = (green − SWIR)/(green + SWIR) (Hall et al. 1995; spyndex's NDSI, as ``calculate_ndsi``) of each
    pair of ``green_file_list`` / ``swir_file_list``, written to the matching ``output_path_list`` entry;
    answers ``["Result save at …", …]`` (Earth-Agent's Index server, as public forks carry it: one
    ``calculate_ndsi`` per pair)."""
    green, swir, outputs = (_files(args, f) for f in ("green_file_list", "swir_file_list", "output_path_list"))
    if not len(green) == len(swir) == len(outputs):
        raise ToolError("schema_error", f"green_file_list, swir_file_list, output_path_list: give lists of one "
                                        f"length (got {len(green)}, {len(swir)}, {len(outputs)})")
    texts = []
    for g, s, out in zip(green, swir, outputs):
        arr, grid, paths = normalized_difference(ctx, "NDSI", {"G": ("green_file_list", g),
                                                               "S1": ("swir_file_list", s)})
        texts.append(write(ctx, out, arr, grid, paths, "index"))
    return ToolResult(result(texts).text, {"output": texts, "output_paths": outputs}, artifact_name(outputs[-1]))
