"""Shared plumbing of EarthRL's tools: loading rasters/vectors/series by name, grid checks and
writing registered artifacts with lineage (:class:`~earthrl.envs.data.artifacts.ArtifactRegistry`).

Names the agent passes: a task scene id, ``<scene>:<band>`` (bands read through
:func:`earthrl.envs.data.catalog.reflectance`: reflectance 0-1, K for thermal bands), ``<scene>:<vector>``
(a scene's GeoPackage, e.g. ``S2_T33UUU_20170216:water``) or an artifact name from an earlier call.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

import numpy as np
from affine import Affine

from earthrl.envs.data.artifacts import ArtifactRegistry, ToolError
from earthrl.envs.data.catalog import band_units, reflectance
from earthrl.envs.tools.area import cell_areas, geometry_areas
from earthrl.envs.tools.registry import SKILLS, ToolContext, ToolResult

#: all seven skill ids (tools useful to every skill: data access, answer).
ALL_SKILLS = SKILLS
#: largest raster (rows × cols) one tool call may allocate: 2e8 float32 pixels = 800 MB, 1.7× a
#: full 10980² Sentinel-2 10 m band; :func:`check_raster_size` refuses more before allocating.
MAX_RASTER_PIXELS = 200_000_000
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_.\-]")


def fmt(x: float) -> str:
    """Number as shown to the agent: 6 significant digits."""
    return f"{x:.6g}"


def out_name(*parts: str) -> str:
    """Deterministic output name from its parts (``_``-joined; any character an artifact name
    may not hold, such as ``:`` or the ``+`` of ``1e+308``, becomes ``_``; hashed past 90
    characters)."""
    name = _NOT_IN_NAME.sub("_", "_".join(parts))
    if len(name) > 90:
        name = parts[0] + "_" + hashlib.sha1(name.encode()).hexdigest()[:8]
    return name


def call_hash(ctx: ToolContext) -> str:
    """8 hex chars identifying the running call's arguments (for output names)."""
    return hashlib.sha1(json.dumps(ctx.call.get("arguments", {}), sort_keys=True,
                                   default=str).encode()).hexdigest()[:8]


@dataclass
class Layer:
    """A single-band raster loaded for computation.

    Attributes:
        arr: float32 (or the float64 :func:`load_layer` was asked for) ``(rows, cols)``; NaN = nodata (mask 255 -> NaN, mask 0/1 -> 0.0/1.0).
        crs, transform: grid; units: ``"reflectance"``, ``"index"``, ``"mask"``, ``"K"`` ...
        source: the artifact name or ``scene:band`` it came from (lineage parent).
        kind: ``"band"``, ``"raster"``, ``"mask"``, ``"classes"``, ``"segments"``;
        sensor, date: provenance.
    """

    arr: np.ndarray
    crs: str
    transform: Affine
    units: str
    source: str
    kind: str
    sensor: str | None = None
    date: str | None = None

    def pixel_areas(self) -> np.ndarray:
        """True area of each pixel in m² on the ellipsoid of the layer's CRS (float64, read-only):
        shape ``(rows, 1)`` for north-up lat/lon and cylindrical grids (Web-Mercator ...), else
        ``(rows, cols)``; both broadcast over ``arr``. :func:`earthrl.envs.tools.area.cell_areas`.

        Raises:
            ToolError: the layer has no usable CRS or geotransform.
        """
        return cell_areas(self.crs, self.transform, self.arr.shape)

    def area_m2(self, sel: np.ndarray) -> float:
        """Total true area (m², :meth:`pixel_areas`) of the pixels where boolean ``sel`` (same
        shape as ``arr``) is True."""
        px = self.pixel_areas()
        if px.shape[1] == 1:
            return float((sel.sum(axis=1, keepdims=True) * px).sum())
        return float(np.sum(px, where=sel))


def load_layer(reg: ArtifactRegistry, ref: str, dtype=np.float32) -> Layer:
    """Resolve ``ref`` (artifact name or ``scene:band``) to a :class:`Layer` whose array has
    ``dtype`` (float32 by default; ``np.float64`` for index and expression arithmetic, which
    reads scene bands as the float64 number nearest DN × scale). Scene bands come from
    :func:`earthrl.envs.data.catalog.reflectance`, NaN on every pixel of the one no-data rule
    (:func:`earthrl.envs.data.calibration.fill_mask`: the file's nodata, and DN 0 of Sentinel-2 and
    Landsat Level-1 products), so ``spectral_index``, ``band_math`` and every tool reading bands
    mask the same pixels as ``radiometric_calibration``.

    Raises:
        HallucinatedPathError: unknown artifact / scene.
        ToolError: a scene without a band, an unknown band (names the bands), a non-raster
            artifact (``wrong_kind``) or an unreadable GeoTIFF (``corrupt_file``).
    """
    source = layer_source(reg, ref)
    sid, _, b = source.partition(":")
    if b:
        scene = reg.scene(sid)
        try:
            arr, meta = reflectance(scene, b, dtype)
        except KeyError as e:
            raise ToolError("tool_error", str(e.args[0])) from None
        units = band_units(scene, b)
        return Layer(arr, meta["crs"], meta["transform"], units, source,
                     "classes" if units.endswith(" class") else "band", scene.sensor, scene.date)
    art = reg.get(source)
    arr = reg.array(art.name)
    if art.kind in ("mask", "classes"):
        arr = np.where(arr == 255, np.nan, arr).astype(np.float32)
    elif art.kind == "segments":
        arr = np.where(arr < 0, np.nan, arr).astype(np.float32)
    if arr.dtype != dtype:
        arr = arr.astype(dtype)
    return Layer(arr, art.crs, Affine(*art.transform), art.units, art.name, art.kind,
                 art.sensor, art.date)


def layer_source(reg: ArtifactRegistry, ref: str) -> str:
    """The canonical name of raster reference ``ref`` without reading pixels: ``<scene id>:<band>``
    with the scene's own spelling of the band for a scene band, else the registered artifact's
    name (``ndvi_X.tif`` -> ``ndvi_X``). :func:`load_layer` gives it as :attr:`Layer.source`, and
    output names derived from inputs use it (:attr:`~earthrl.envs.tools.registry.Tool.output_name`).

    Raises:
        HallucinatedPathError: unknown artifact / scene.
        ToolError: a scene without a band, or an unknown band (names the bands).
    """
    ref = str(ref).strip()
    if ":" in ref or ref in reg.scenes:
        sid, _, band = ref.partition(":")
        scene = reg.scene(sid)
        if not band:
            raise ToolError("tool_error", f"{ref!r} is a scene; give one band as "
                            f"'{scene.id}:<band>', bands: {', '.join(scene.bands)}")
        try:
            return f"{scene.id}:{scene.band_name(band)}"
        except KeyError as e:
            raise ToolError("tool_error", str(e.args[0])) from None
    return reg.get(ref).name


def check_raster_size(tool: str, rows: float, cols: float, argument: str, fix: str) -> None:
    """Refuse an output raster of ``rows`` × ``cols`` pixels above :data:`MAX_RASTER_PIXELS`
    before it is allocated.

    Args:
        tool: the tool's name; argument: ``name=value`` of the argument that sets the size;
        fix: what to give instead (e.g. ``"use resolution >= 8.8"``).

    Raises:
        ToolError: kind ``raster_too_large``, e.g. "resample: resolution=0.1 would make a
            153600×76800 raster (1.18e+10 pixels); the largest allowed is 2e+08 pixels: use
            resolution >= 8.8".
    """
    rows, cols = float(rows), float(cols)
    if not (rows * cols <= MAX_RASTER_PIXELS):  # also refuses NaN

        def side(x: float) -> str:
            return f"{x:.0f}" if x < 1e9 else f"{x:.3g}"

        raise ToolError("raster_too_large", f"{tool}: {argument} would make a {side(rows)}×{side(cols)} "
                        f"raster ({rows * cols:.3g} pixels); the largest allowed is "
                        f"{MAX_RASTER_PIXELS:.0e} pixels: {fix}")


def valid_values(layer: Layer, field: str) -> np.ndarray:
    """float64 1-D array of the layer's finite pixels.

    Raises:
        ToolError: kind ``"empty_raster"`` naming ``field`` when every pixel is NaN/nodata.
    """
    v = layer.arr[np.isfinite(layer.arr)].astype(np.float64)
    if v.size == 0:
        raise ToolError("empty_raster", f"{field}: {layer.source} has no valid pixels (all NaN/nodata); "
                        "use another scene/date or a larger area")
    return v


def same_grid(layers: list[Layer]) -> None:
    """Raise ToolError (``grid_mismatch``, naming both rasters, CRS and shapes) unless every
    layer has the first one's CRS, shape and transform."""
    a = layers[0]
    for b in layers[1:]:
        if a.crs != b.crs or a.arr.shape != b.arr.shape or not a.transform.almost_equals(b.transform):
            raise ToolError("tool_error", (
                f"{a.source} ({a.crs}, {a.arr.shape[0]}x{a.arr.shape[1]}) and {b.source} "
                f"({b.crs}, {b.arr.shape[0]}x{b.arr.shape[1]}) are not on the same grid; "
                "use rasters of the same scene/sensor or reproject one onto the other"))


def align(layers: list[Layer]) -> list[Layer]:
    """Bring bands of one scene at 10/20/60 m to the finest grid by pixel replication
    (nearest neighbour, integer factors only), then check the grids (:func:`same_grid`)."""
    fine = max(layers, key=lambda l: l.arr.size)
    out = []
    for l in layers:
        if l.arr.shape != fine.arr.shape and l.crs == fine.crs:
            fy, fx = fine.arr.shape[0] / l.arr.shape[0], fine.arr.shape[1] / l.arr.shape[1]
            if fy == fx and fy.is_integer():
                k = int(fy)
                l = Layer(np.repeat(np.repeat(l.arr, k, 0), k, 1), l.crs, fine.transform,
                          l.units, l.source, l.kind, l.sensor, l.date)
        out.append(l)
    same_grid(out)
    return out


def provenance(layers: list[Layer]) -> dict:
    """``{"sensor", "date"}`` shared by all layers (None where they differ)."""
    sensors = {l.sensor for l in layers}
    dates = {l.date for l in layers}
    return {"sensor": sensors.pop() if len(sensors) == 1 else None,
            "date": dates.pop() if len(dates) == 1 else None}


def parents(layers: list[Layer | str]) -> list[str]:
    """Lineage parents: artifact names / scene ids of the layers (or of their ``source`` strings),
    in order, without repeats."""
    return list(dict.fromkeys((l if isinstance(l, str) else l.source).split(":")[0] for l in layers))


def write_raster(ctx: ToolContext, name: str, arr: np.ndarray, like: list[Layer], *, kind: str,
                 units: str, transform: Affine | None = None, crs: str | None = None) -> ToolResult:
    """Write ``arr`` on the grid of ``like[0]`` (or ``crs``/``transform``) as a registered
    artifact with the layers as parents; returns the observation ``saved <name> (...)``."""
    art = ctx.registry.write(name, arr, kind=kind, crs=crs or like[0].crs,
                             transform=transform or like[0].transform, units=units,
                             parents=parents(like), call=ctx.call, **provenance(like))
    if arr.dtype == np.uint8:
        nodata = int((arr == 255).sum())
    elif arr.dtype == np.int32:
        nodata = int((arr < 0).sum())
    else:
        nodata = int(np.isnan(arr).sum())
    h, w = arr.shape
    return ToolResult(f"saved {art.name} ({h}x{w} {art.dtype}, {units}, {nodata} nodata px)",
                      {"artifact": art.name, "shape": [h, w], "dtype": art.dtype,
                       "nodata_px": nodata}, art.name)


def load_vector(reg: ArtifactRegistry, ref: str, field: str):
    """GeoDataFrame of ``ref``: a scene vector ``<scene>:<vector>`` (e.g. ``S2_T33UUU_20170216:water``)
    or a ``vector`` artifact. Returns ``(gdf, parent_name)``.

    Raises:
        HallucinatedPathError: unknown scene/artifact.
        ToolError: the scene has no such vector (names the choices), wrong kind, unreadable file.
    """
    import geopandas as gpd

    ref = str(ref).strip()
    if ":" in ref:
        sid, _, vec = ref.partition(":")
        scene = reg.scene(sid)
        if vec not in scene.vectors:
            raise ToolError("tool_error", f"{field}: scene {scene.id} has no vector {vec!r}; vectors: "
                            f"{', '.join(scene.vectors) or 'none'} (or a vector artifact)")
        path, parent = scene.vectors[vec], scene.id
    else:
        art = reg.get_kind(ref, ("vector",), field)
        path, parent = art.path, art.name
    try:
        gdf = gpd.read_file(path)
    except Exception as e:  # noqa: BLE001 - any reader failure is a corrupt file for the agent
        raise ToolError("corrupt_file", f"{field}: {path.name} is not a readable vector file ({type(e).__name__}); "
                        "re-create it with the tool that made it") from None
    return gdf, parent


def write_vector(ctx: ToolContext, name: str, gdf, parent_names: list[str], units: str = "polygons") -> ToolResult:
    """Write ``gdf`` as a GeoPackage artifact (kind ``vector``) and describe it (total true area,
    :func:`earthrl.envs.tools.area.geometry_areas`).

    Raises:
        ToolError: the vector has no CRS (its area cannot be measured).
    """
    area = float(geometry_areas(gdf).sum())
    art = ctx.registry.register_file(name, "vector", units=units, parents=parent_names, call=ctx.call,
                                     writer=lambda p: gdf.to_file(p, driver="GPKG"),
                                     crs=gdf.crs.to_string() if gdf.crs is not None else None)
    return ToolResult(f"saved {art.name} ({len(gdf)} features, total area {fmt(area / 1e6)} km2)",
                      {"artifact": art.name, "features": len(gdf), "area_m2": area}, art.name)


def write_png(ctx: ToolContext, name: str, fig, parent_names: list[str]) -> ToolResult:
    """Save a matplotlib figure as a PNG artifact (kind ``image``) and close it."""
    import matplotlib.pyplot as plt

    def writer(p):
        fig.savefig(p, dpi=80, bbox_inches="tight")
        plt.close(fig)

    art = ctx.registry.register_file(name, "image", units="png", parents=parent_names, call=ctx.call,
                                     writer=writer)
    return ToolResult(f"saved {art.name}.png", {"artifact": art.name, "bytes": art.path.stat().st_size},
                      art.name)


def load_series(reg: ArtifactRegistry, ref: str, field: str = "series", min_len: int = 3):
    """``(dates: list[str], values: float64 array, art)`` of a ``series`` artifact, NaN entries
    dropped.

    Raises:
        ToolError: wrong kind, unreadable, or fewer than ``min_len`` finite values (``empty_series``).
    """
    art = reg.get_kind(ref, ("series",), field)
    d = reg.load_json(art.name, ("series",))
    pairs = [(t, float(v)) for t, v in zip(d["dates"], d["values"]) if v is not None and np.isfinite(v)]
    if len(pairs) < min_len:
        raise ToolError("empty_series", f"{field}: {art.name} has {len(pairs)} valid values, needs at least "
                        f"{min_len}; build it over more scenes")
    return [p[0] for p in pairs], np.array([p[1] for p in pairs], dtype=np.float64), art


def decimal_years(dates: list[str]) -> np.ndarray:
    """ISO dates -> decimal years (float64), e.g. ``2008-07-02`` -> 2008.5."""
    import datetime as dt

    out = []
    for s in dates:
        d = dt.date.fromisoformat(s[:10])
        start = dt.date(d.year, 1, 1)
        out.append(d.year + (d - start).days / ((dt.date(d.year + 1, 1, 1) - start).days))
    return np.array(out)


__all__ = ["ALL_SKILLS", "MAX_RASTER_PIXELS", "Layer", "align", "call_hash", "check_raster_size",
           "decimal_years", "fmt",
           "layer_source", "load_layer", "load_series", "load_vector", "out_name", "parents", "provenance",
           "same_grid", "valid_values", "write_png", "write_raster", "write_vector"]
