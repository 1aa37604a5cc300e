"""AI Interpretation tools (SimCRAFT domain): unsupervised k-means classification
(scikit-learn), SLIC superpixels (scikit-image), random-forest classification from labelled
polygons (scikit-learn + rasterio rasterize), water and vegetation masks from indices. Every tool
computes its output from the pixels; nothing is guessed.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.tools.common import align, call_hash, fmt, load_layer, load_vector, out_name, write_raster
from earthrl.envs.tools.mini_toolset import _spyndex_index, compare, compute_index
from earthrl.envs.tools.registry import Args, ToolContext, ToolResult, register_tool

_AI = dict(domain="AI Interpretation")


FIT_SAMPLE = 200_000  # pixels a k-means / random forest is fitted on at most (seeded sample)
MAX_SLIC_PX = 4_000_000  # SLIC refuses larger inputs (crop first)


def _sample(x: np.ndarray, seed: int, n: int = FIT_SAMPLE) -> np.ndarray:
    """At most ``n`` rows of ``x`` (a seeded random subset, order kept), float64."""
    if len(x) > n:
        x = x[np.sort(np.random.default_rng(seed).choice(len(x), n, replace=False))]
    return x.astype(np.float64)


def _features(ctx: ToolContext, names: list[str]):
    layers = align([load_layer(ctx.registry, n) for n in names])
    stack = np.stack([l.arr for l in layers], axis=-1)
    ok = np.isfinite(stack).all(axis=-1)
    if not ok.any():
        raise ToolError("empty_raster", "names: no pixel is valid in every input; check the rasters")
    return layers, stack, ok


class KmeansArgs(Args):
    names: list[str] = Field(min_length=1, max_length=12, description="feature rasters or scene:bands")
    k: int = Field(4, ge=2, le=20, description="number of clusters")
    seed: int = Field(0, ge=0)


def kmeans_classify_name(ctx: ToolContext, args: KmeansArgs) -> str:
    """``km<k>_<call hash>``."""
    return out_name(f"km{args.k}", call_hash(ctx))


@register_tool("kmeans_classify", args=KmeansArgs, description="Unsupervised k-means classes of rasters.",
               family="SPA", skills=["land_cover"], output_kind="classes", output_name=kmeans_classify_name, **_AI)
def kmeans_classify(ctx: ToolContext, args: KmeansArgs) -> ToolResult:
    """k-means (``sklearn.cluster.KMeans``, n_init 4, ``seed``) fitted on the valid pixels of the
    stacked features (a seeded sample of :data:`FIT_SAMPLE` pixels when there are more), every
    valid pixel assigned to its nearest centre; classes renumbered 0..k-1 by increasing centre of
    the first feature (stable output). uint8 classes raster (255 nodata) ``km<k>_<hash>``;
    reports pixels per class and the centres (``data["centers"]``, class order).

    Raises:
        ToolError: inputs on different grids; no valid pixels; fewer valid pixels than k.
    """
    from sklearn.cluster import KMeans

    layers, stack, ok = _features(ctx, args.names)
    x = stack[ok]
    if len(x) < args.k:
        raise ToolError("tool_error", f"k: {args.k} clusters but only {len(x)} valid pixels; lower k")
    km = KMeans(n_clusters=args.k, n_init=4, random_state=args.seed).fit(_sample(x, args.seed))
    order = np.argsort(km.cluster_centers_[:, 0])
    rank = np.empty_like(order)
    rank[order] = np.arange(args.k)
    out = np.full(ok.shape, 255, np.uint8)
    out[ok] = rank[km.predict(x.astype(np.float64))]
    res = write_raster(ctx, kmeans_classify_name(ctx, args), out, layers, kind="classes", units="class")
    counts = np.bincount(out[ok], minlength=args.k)
    res.data["class_px"] = [int(c) for c in counts]
    res.data["centers"] = km.cluster_centers_[order].tolist()
    res.text += "; px per class " + ", ".join(str(int(c)) for c in counts)
    return res


class SlicArgs(Args):
    names: list[str] = Field(min_length=1, max_length=12, description="feature rasters or scene:bands")
    n_segments: int = Field(100, ge=2, le=10000, description="approximate number of segments")
    compactness: float = Field(0.1, gt=0, le=100, description="higher = squarer segments")


def slic_segments_name(ctx: ToolContext, args: SlicArgs) -> str:
    """``slic_<call hash>``."""
    return out_name("slic", call_hash(ctx))


@register_tool("slic_segments", args=SlicArgs, description="SLIC superpixel segmentation of rasters.",
               family="SPA", skills=["land_cover"], output_kind="segments", output_name=slic_segments_name, **_AI)
def slic_segments(ctx: ToolContext, args: SlicArgs) -> ToolResult:
    """SLIC superpixels (``skimage.segmentation.slic``, features min-max scaled to 0-1, nodata
    pixels masked out): int32 segment ids >= 0 (-1 nodata), ``slic_<hash>``.

    Raises:
        ToolError: different grids; no valid pixels; more than :data:`MAX_SLIC_PX` pixels.
    """
    from skimage.segmentation import slic

    layers, stack, ok = _features(ctx, args.names)
    if ok.size > MAX_SLIC_PX:
        raise ToolError("tool_error", f"names: {ok.shape[0]}x{ok.shape[1]} px exceed SLIC's {MAX_SLIC_PX} px; "
                        "crop_bbox or resample first")
    lo, hi = np.nanmin(stack[ok], axis=0), np.nanmax(stack[ok], axis=0)
    x = np.where(ok[..., None], (stack - lo) / np.where(hi > lo, hi - lo, 1), 0).astype(np.float64)
    seg = slic(x, n_segments=args.n_segments, compactness=args.compactness, channel_axis=-1,
               mask=ok, start_label=1, enforce_connectivity=True).astype(np.int32) - 1
    seg[~ok] = -1
    res = write_raster(ctx, slic_segments_name(ctx, args), seg, layers, kind="segments", units="segment")
    n = len(np.unique(seg[ok]))
    res.data["segments"] = n
    res.text += f"; {n} segments"
    return res


class RfArgs(Args):
    names: list[str] = Field(min_length=1, max_length=12, description="feature rasters or scene:bands")
    samples: str = Field(description="labelled polygons: vector artifact or scene:ref")
    label_field: str = Field("cid", description="integer class column")
    n_trees: int = Field(100, ge=10, le=500)
    seed: int = Field(0, ge=0)


def random_forest_classify_name(ctx: ToolContext, args: RfArgs) -> str:
    """``rf_<call hash>``."""
    return out_name("rf", call_hash(ctx))


@register_tool("random_forest_classify", args=RfArgs,
               description="Random-forest classes from labelled polygons.",
               family="SPA", skills=["land_cover"], output_kind="classes",
               output_name=random_forest_classify_name, **_AI)
def random_forest_classify(ctx: ToolContext, args: RfArgs) -> ToolResult:
    """Supervised classification: polygons of ``samples`` are rasterized on the feature grid
    (``rasterio.features.rasterize``, pixel centres) with their ``label_field`` (ints 0-254);
    a ``sklearn.ensemble.RandomForestClassifier`` (``n_trees``, ``seed``, OOB score) is trained on
    those pixels (a seeded sample of :data:`FIT_SAMPLE` when there are more) and predicts every
    valid pixel. uint8 classes ``rf_<hash>``; reports training
    pixels per class and the out-of-bag accuracy.

    Raises:
        ToolError: missing/non-integer label field, no sample pixel on the grid (``empty_aoi``),
            a single class.
    """
    from rasterio.features import rasterize
    from sklearn.ensemble import RandomForestClassifier

    layers, stack, ok = _features(ctx, args.names)
    gdf, vparent = load_vector(ctx.registry, args.samples, "samples")
    if args.label_field not in gdf.columns:
        raise ToolError("tool_error", f"label_field: {args.label_field!r} not in {args.samples}; columns: "
                        f"{', '.join(c for c in gdf.columns if c != 'geometry')}")
    labels = gdf[args.label_field]
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() > 254:
        raise ToolError("tool_error", f"label_field: {args.label_field} must hold integers 0-254")
    gdf = gdf.to_crs(layers[0].crs)
    y = rasterize(((g, int(v)) for g, v in zip(gdf.geometry, labels)), out_shape=ok.shape,
                  transform=layers[0].transform, fill=255, dtype="uint8")
    train = ok & (y != 255)
    classes = np.unique(y[train])
    if train.sum() == 0:
        raise ToolError("empty_aoi", f"samples: no polygon of {args.samples} covers a valid pixel of the features")
    if len(classes) < 2:
        raise ToolError("tool_error", f"samples: training pixels hold one class ({classes}); need two or more")
    rf = RandomForestClassifier(n_estimators=args.n_trees, random_state=args.seed, oob_score=True, n_jobs=1)
    xy = np.column_stack([stack[train], y[train]])
    xy = _sample(xy, args.seed)
    rf.fit(xy[:, :-1], xy[:, -1].astype(np.uint8))
    out = np.full(ok.shape, 255, np.uint8)
    out[ok] = rf.predict(stack[ok].astype(np.float64)).astype(np.uint8)
    res = write_raster(ctx, random_forest_classify_name(ctx, args), out, layers, kind="classes", units="class")
    ctx.registry.get(res.artifact).parents.append(vparent)
    res.data.update(train_px={int(c): int((y[train] == c).sum()) for c in classes},
                    oob_accuracy=float(rf.oob_score_))
    res.text += f"; {int(train.sum())} training px, OOB accuracy {fmt(rf.oob_score_)}"
    return res


def _index_mask_name(ctx: ToolContext, scene: str, index: str, threshold: float, tag: str) -> str:
    return out_name(tag, _spyndex_index(index).short_name.lower(), f"gt{threshold:g}", ctx.registry.scene(scene).id)


def _index_mask(ctx: ToolContext, scene: str, index: str, threshold: float, tag: str, name: str) -> ToolResult:
    s = ctx.registry.scene(scene)
    arr, layers, idx = compute_index(ctx.registry, s, index)
    m = compare(arr, ">", threshold)  # exact on the stored float32 index, ties out (threshold_mask's rule)
    res = write_raster(ctx, name, m, layers, kind="mask", units="mask")
    valid = m != 255
    pct = 100.0 * float((m[valid] == 1).mean()) if valid.any() else float("nan")
    res.data["share_pct"] = pct
    res.text += f"; {tag} {fmt(pct)} % of valid px"
    return res


class WaterArgs(Args):
    scene: str
    index: str = Field("NDWI", description="NDWI or MNDWI")
    threshold: float = Field(0.0, ge=-1, le=1)


def water_mask_name(ctx: ToolContext, args: WaterArgs) -> str:
    """``water_<ndwi|mndwi>_gt<threshold>_<scene>``."""
    return _index_mask_name(ctx, args.scene, args.index.upper(), args.threshold, "water")


@register_tool("water_mask", args=WaterArgs, description="Water mask: index above a threshold.",
               family="SPA", skills=["water_flood"], output_kind="mask",
               sensors=["sentinel-2", "landsat-8", "landsat-7"], output_name=water_mask_name, **_AI)
def water_mask(ctx: ToolContext, args: WaterArgs) -> ToolResult:
    """uint8 mask 1 where the water index (NDWI McFeeters 1996 or MNDWI Xu 2006, spyndex) exceeds
    ``threshold`` (default 0), 255 nodata; a pixel exactly on ``threshold`` is out (the tie rule
    of :func:`earthrl.envs.tools.mini_toolset.threshold_mask`). Output ``water_<index>_gt<t>_<scene>``.

    Raises:
        ToolError: index not NDWI/MNDWI; the sensor lacks its bands.
    """
    if args.index.upper() not in ("NDWI", "MNDWI"):
        raise ToolError("tool_error", f"index: {args.index!r}; use NDWI or MNDWI")
    return _index_mask(ctx, args.scene, args.index.upper(), args.threshold, "water", water_mask_name(ctx, args))


class VegArgs(Args):
    scene: str
    threshold: float = Field(0.3, ge=-1, le=1, description="NDVI threshold")


def vegetation_mask_name(ctx: ToolContext, args: VegArgs) -> str:
    """``veg_ndvi_gt<threshold>_<scene>``."""
    return _index_mask_name(ctx, args.scene, "NDVI", args.threshold, "veg")


@register_tool("vegetation_mask", args=VegArgs, description="Vegetation mask: NDVI above a threshold.",
               family="SPA", skills=["vegetation_drought", "land_cover"], output_kind="mask",
               sensors=["sentinel-2", "landsat-5", "landsat-7", "landsat-8"], output_name=vegetation_mask_name, **_AI)
def vegetation_mask(ctx: ToolContext, args: VegArgs) -> ToolResult:
    """uint8 mask 1 where NDVI (spyndex) > ``threshold`` (default 0.3), 255 nodata; a pixel exactly
    on ``threshold`` is out (the tie rule of :func:`earthrl.envs.tools.mini_toolset.threshold_mask`).
    Output ``veg_ndvi_gt<t>_<scene>``."""
    return _index_mask(ctx, args.scene, "NDVI", args.threshold, "veg", vegetation_mask_name(ctx, args))
