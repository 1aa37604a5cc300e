"""Earth-Agent's geometry tools computed in EarthRL (``env.mode=execute``): boxes and centroids of
detections, areas and skeletons of masks, the direction of hotspots, spikes and date ranges of series.

Sources, by tool (Earth-Agent, opendatalab/Earth-Agent; the ``Analysis`` server in the kulikrch/Earth-Agent
fork, ``agent/tools/Analysis.py`` at commit b9fe374c):

- ``bboxes2centroids``, ``centroid_distance_extremes``, ``count_skeleton_contours``: ``agent/tools/Perception.py``
  (commit 5df54a934f3e); the centroids are rounded to single precision (float32), as every recorded output is.
- ``calculate_bbox_area``: boxes ``[x_min, y_min, x_max, y_max]``, as the detectors return them and as all six
  recorded outputs are computed; ``Perception.py``'s docstring says ``[x, y, w, h]``, which none of them fits.
- ``calculate_area``: ``agent/tools/Statistics.py`` (non-zero values · gsd²).
- ``analyze_hotspot_direction``, ``count_spikes_from_values``: the fork's ``Analysis.py``.
- ``index_to_date_range``: no published definition; from Earth-Bench's recorded call (question 110), where the
  index is that of a change between consecutive acquisitions: ``{"from": dates[i], "to": dates[i + 1]}``.

Skeletons follow Zhang & Suen (1984, *Commun. ACM* 27(3), 236-239; ``skimage.morphology.skeletonize``);
contours the border following of Suzuki & Abe (1985, *CVGIP* 30(1), 32-46), whose outer borders are the
8-connected components not enclosed by a hole of another component (Gonzalez & Woods, *Digital Image
Processing*, 4th ed., §2.5 and §9.5).

:data:`EXECUTE` maps tool name -> ``fn(ctx, args) -> ToolResult``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.tools.earthagent_files import read, read_bands
from earthrl.envs.tools.earthagent_numbers import _num
from earthrl.envs.tools.earthagent_rasters import result
from earthrl.envs.tools.registry import ToolContext, ToolResult

EXECUTE: dict[str, Callable[[ToolContext, object], ToolResult]] = {}

#: ITU-R BT.601 luma weights of R, G, B (an RGB mask read as grayscale, as OpenCV's ``IMREAD_GRAYSCALE`` does).
LUMA = (0.299, 0.587, 0.114)
_EIGHT = np.ones((3, 3), dtype=bool)  # 8-connectivity (and the 3 × 3 erosion kernel)


def _tool(name: str):
    def deco(fn):
        EXECUTE[name] = fn
        return fn
    return deco


def _boxes(value, field: str = "bboxes") -> np.ndarray:
    """``value`` as float64 ``(n, 4)`` boxes ``[x_min, y_min, x_max, y_max]`` (pixels).

    Raises:
        ToolError: ``schema_error`` when it is not a non-empty list of 4-number boxes with min ≤ max.
    """
    if not isinstance(value, list) or not value:
        raise ToolError("schema_error", f"{field}: give a list of boxes [x_min, y_min, x_max, y_max]")
    rows = []
    for i, box in enumerate(value):
        if not isinstance(box, list) or len(box) != 4:
            raise ToolError("schema_error", f"{field}[{i}]: {box!r} is not a box [x_min, y_min, x_max, y_max]")
        rows.append([_num(v, f"{field}[{i}]") for v in box])
    b = np.array(rows, dtype=np.float64)
    bad = np.flatnonzero((b[:, 2] < b[:, 0]) | (b[:, 3] < b[:, 1]))
    if bad.size:
        raise ToolError("schema_error", f"{field}[{bad[0]}]: {value[bad[0]]} has x_max < x_min or y_max < y_min; "
                                        "give boxes as [x_min, y_min, x_max, y_max] (corners, not width/height)")
    return b


@_tool("bboxes2centroids")
def bboxes2centroids(ctx: ToolContext, args) -> ToolResult:
    """``[[(x_min + x_max)/2, (y_min + y_max)/2] for each box]`` (pixels), rounded to float32 as recorded."""
    b = _boxes(args.bboxes)
    c = np.stack([(b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2], axis=1).astype(np.float32)
    return result(c.astype(np.float64).tolist())


@_tool("centroid_distance_extremes")
def centroid_distance_extremes(ctx: ToolContext, args) -> ToolResult:
    """``{"min": [i, j, d], "max": [i, j, d]}``: the closest and the farthest pair of centroids (0-based, i < j,
    the first pair in row order on ties) and their Euclidean distance (pixels).

    Raises:
        ToolError: ``schema_error`` when ``centroids`` is not a list of at least two ``[x, y]`` points.
    """
    from scipy.spatial.distance import pdist

    pts = args.centroids
    if not isinstance(pts, list) or len(pts) < 2 or any(not isinstance(p, list) or len(p) != 2 for p in pts):
        raise ToolError("schema_error", "centroids: give at least two points [x, y] (e.g. bboxes2centroids' output)")
    p = np.array([[_num(v, "centroids") for v in pt] for pt in pts], dtype=np.float64)
    d = pdist(p)  # condensed, pairs (i, j) with i < j in row order
    i, j = np.triu_indices(len(p), k=1)
    lo, hi = int(np.argmin(d)), int(np.argmax(d))
    return result({"min": [int(i[lo]), int(j[lo]), float(d[lo])], "max": [int(i[hi]), int(j[hi]), float(d[hi])]})


@_tool("calculate_bbox_area")
def calculate_bbox_area(ctx: ToolContext, args) -> ToolResult:
    """Total area of the boxes: ``Σ (x_max - x_min)(y_max - y_min)`` in pixel², times ``gsd²`` (m²) when
    ``gsd`` (m per pixel) is given."""
    b = _boxes(args.bboxes)
    total = 0.0
    for x0, y0, x1, y1 in b.tolist():  # summed in order, as Earth-Agent does
        total += (x1 - x0) * (y1 - y0)
    return result(total if args.gsd is None else total * (args.gsd * args.gsd))


@_tool("calculate_area")
def calculate_area(ctx: ToolContext, args) -> ToolResult:
    """Number of non-zero values of the mask ``input_image_path`` (every band counts, as Earth-Agent's
    ``np.sum(image != 0)``; nodata pixels are not counted), times ``gsd²`` (m²) when ``gsd`` (m per pixel) is
    given; a float."""
    arr, _ = read_bands(ctx, args.input_image_path, "input_image_path")
    n = int(np.count_nonzero(~np.isnan(arr) & (arr != 0)))
    return result(float(n) if args.gsd is None else float(n * args.gsd * args.gsd))


def skeleton_contours(gray: np.ndarray) -> int:
    """Number of outer contours of the skeleton of the mask ``gray > 127`` (2-D; NaN is background).

    Earth-Agent's steps: binarize at 127, erode with a 3 × 3 square (pixels beyond the image count as
    foreground, OpenCV's default), skeletonize, count the external contours, i.e. the 8-connected
    skeleton components that touch the 4-connected background outside every hole.
    """
    from scipy import ndimage
    from skimage.morphology import skeletonize

    binary = np.nan_to_num(gray, nan=0.0) > 127
    skel = skeletonize(ndimage.binary_erosion(binary, structure=_EIGHT, border_value=1))
    labels, n = ndimage.label(skel, structure=_EIGHT)
    if n == 0:
        return 0
    background, _ = ndimage.label(np.pad(~skel, 1, constant_values=True))  # 4-connected
    outside = ndimage.binary_dilation(background == background[0, 0])[1:-1, 1:-1]  # its 4-neighbours too
    return int(np.unique(labels[outside & skel]).size)


@_tool("count_skeleton_contours")
def count_skeleton_contours(ctx: ToolContext, args) -> ToolResult:
    """Outer contours of the skeleton of the binary image ``image_path`` (:func:`skeleton_contours`); an RGB
    image is read as its BT.601 luma (:data:`LUMA`), a 1- or 2-band one by its first band."""
    arr, _ = read_bands(ctx, args.image_path, "image_path")
    gray = np.tensordot(LUMA, arr[:3], axes=1) if arr.shape[0] >= 3 else arr[0]
    return result(skeleton_contours(gray))


@_tool("analyze_hotspot_direction")
def analyze_hotspot_direction(ctx: ToolContext, args) -> ToolResult:
    """The side of the image centre (row, col = shape // 2) holding most hotspot pixels (value 1) of the
    first band of ``hotspot_map_path``: ``north``/``south`` where the row offset dominates, else
    ``east``/``west`` (``west`` for the centre itself); ties go to the first of north, south, east, west;
    ``no hotspots found`` when there are none.

    Raises:
        ToolError: ``schema_error`` when ``hotspot_map_path`` is not given (the recorded batch form with
            ``file_list``/``threshold`` has no published definition).
    """
    if not args.hotspot_map_path:
        raise ToolError("schema_error", "hotspot_map_path: give the path of a binary hotspot map (value 1 = "
                                        "hotspot), e.g. one calc_batch_image_hotspot_tif wrote")
    band, _ = read(ctx, args.hotspot_map_path, "hotspot_map_path")
    y, x = np.nonzero(band == 1)
    if y.size == 0:
        return result("no hotspots found")
    dy, dx = band.shape[0] // 2 - y, x - band.shape[1] // 2
    rows = np.abs(dy) > np.abs(dx)
    counts = {"north": int(np.sum(rows & (dy > 0))), "south": int(np.sum(rows & (dy <= 0))),
              "east": int(np.sum(~rows & (dx > 0))), "west": int(np.sum(~rows & (dx <= 0)))}
    return result(max(counts, key=counts.get))


@_tool("count_spikes_from_values")
def count_spikes_from_values(ctx: ToolContext, args) -> ToolResult:
    """Number of rises greater than ``spike_threshold`` between consecutive valid values (``null``/NaN
    dropped first), computed in float32 as Earth-Agent does; 0 for fewer than two valid values."""
    if not isinstance(args.values, list):
        raise ToolError("schema_error", "values: give a list of numbers (null for a missing one)")
    v = np.array([np.nan if x is None else _num(x, "values") for x in args.values], dtype=np.float32)
    v = v[~np.isnan(v)]
    return result(int(np.sum(np.diff(v) > np.float32(args.spike_threshold))))


@_tool("index_to_date_range")
def index_to_date_range(ctx: ToolContext, args) -> ToolResult:
    """``{"from": dates[start_index], "to": dates[start_index + 1]}``: the interval of the change with index
    ``start_index`` in a series of changes between consecutive dates.

    Raises:
        ToolError: ``out_of_range`` when ``start_index + 1`` is not an index of ``dates``.
    """
    n = len(args.dates)
    if not 0 <= args.start_index < n - 1:
        raise ToolError("out_of_range", f"start_index={args.start_index}: the changes between {n} dates are "
                                        f"indexed 0..{n - 2}")
    return result({"from": args.dates[args.start_index], "to": args.dates[args.start_index + 1]})
