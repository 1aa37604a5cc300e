"""Files of Earth-Agent's tools in execute mode: Earth-Bench's paths resolved in an episode.

Earth-Bench's reference calls name files as Earth-Agent's servers saw them:
``benchmark/data/questionN/<file>`` (the task's rasters, distributed separately) and
``benchmark/out/questionN/<file>`` (what an earlier call wrote; the call itself often gives
``questionN/<file>`` as its ``output_path``). In execute mode a path is resolved by its last
component only, as replay mode matches paths (:mod:`earthrl.envs.core.replay`, rule 4):

1. an output of this episode (a raster written by an earlier call, registered in the episode's
   :class:`~earthrl.envs.data.artifacts.ArtifactRegistry` under :func:`artifact_name`);
2. else a file of the task's data folder (:attr:`ToolContext.folder`, ``<tasks.data>/data/questionN``);
3. else a ``hallucinated_path`` error listing the folder's files.

Reading never leaves the data folder (only the last component is used) and writing goes to the
episode workspace only. A raster is read as float64, nodata and ±inf as NaN, as Earth-Agent's
``read_image`` feeds its statistics (``agent/tools/Statistics.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from earthrl.envs.data.artifacts import HallucinatedPathError, ToolError
from earthrl.envs.tools.registry import ToolContext

#: the folder Earth-Agent's servers write to, as their outputs name it.
OUT_PREFIX = "benchmark/out"
_BAD = re.compile(r"[^A-Za-z0-9_.\-]")


@dataclass
class Grid:
    """Georeferencing of a raster read by path: ``crs`` string (or None), affine ``transform`` and the
    numpy ``dtype`` name its values are stored in."""

    crs: str | None
    transform: object
    dtype: str = "float32"


def last_component(ref: str) -> str:
    """The file name of ``ref`` (``benchmark/data/question1/a.tif`` -> ``a.tif``; ``\\`` separators too)."""
    return re.split(r"[/\\]", str(ref).strip().rstrip("/\\"))[-1]


def artifact_name(ref: str) -> str:
    """The artifact name an Earth-Agent output path is registered under: its file name without
    ``.tif``, characters other than letters, digits and ``_.-`` as ``_`` (``Lake Balkhash_B3.tif`` ->
    ``Lake_Balkhash_B3``)."""
    name = last_component(ref)
    name = name[:-4] if name.lower().endswith(".tif") else name
    return _BAD.sub("_", name)[:96]


def data_folder(ctx: ToolContext) -> Path:
    """The task's data folder.

    Raises:
        ToolError: ``replay_only`` when the episode has none (a scene-addressed task).
    """
    if ctx.folder is None:
        raise ToolError("replay_only", f"{ctx.call.get('name')} reads Earth-Bench's files by path; this task has "
                                       "no data folder (run an Earth-Bench suite, or env.mode=replay)")
    return ctx.folder


def listing(folder: Path) -> list[str]:
    """Names of the regular files of ``folder``, sorted."""
    return sorted(p.name for p in folder.iterdir() if p.is_file() and not p.is_symlink())


def read_bands(ctx: ToolContext, ref: str, field: str) -> tuple[np.ndarray, Grid]:
    """All bands of the raster ``ref`` as float64 ``(bands, rows, cols)``, nodata and ±inf as NaN,
    and its grid; resolution order in the module doc.

    Raises:
        HallucinatedPathError: neither an output of this episode nor a file of the data folder
            (the message names ``field`` and the folder's files).
        ToolError: ``corrupt_file`` when the file is not a readable raster.
    """
    from affine import Affine

    if not isinstance(ref, str) or not ref.strip():
        raise ToolError("schema_error", f"{field}: give a file path, got {ref!r}")
    key = artifact_name(ref)
    if key in ctx.registry.artifacts:
        art = ctx.registry.artifacts[key]
        raw = ctx.registry.array(key)
        arr = raw.astype(np.float64)
        if art.nodata is not None and not np.isnan(art.nodata):
            arr[arr == art.nodata] = np.nan
        return _finite(arr[None]), Grid(art.crs, Affine(*art.transform), str(raw.dtype))
    folder = data_folder(ctx)
    path = folder / last_component(ref)
    if not path.is_file() or path.is_symlink():
        files = listing(folder)
        shown = ", ".join(files[:12]) + (" ..." if len(files) > 12 else "")
        raise HallucinatedPathError(f"{field}: {ref!r} is neither a file of the data folder {folder.name} nor "
                                    f"written by an earlier call of this episode; files: {shown}")
    import rasterio
    from rasterio.errors import RasterioError

    try:
        with rasterio.open(path) as src:
            arr = src.read(masked=True).astype(np.float64).filled(np.nan)
            grid = Grid(src.crs.to_string() if src.crs else None, src.transform, src.dtypes[0])
    except (RasterioError, OSError) as e:
        raise ToolError("corrupt_file", f"{field}: {path.name} is not a readable raster ({e})") from None
    return _finite(arr), grid


def read(ctx: ToolContext, ref: str, field: str, band_index: int = 0) -> tuple[np.ndarray, Grid]:
    """Band ``band_index`` (0-based) of raster ``ref`` as float64 ``(rows, cols)`` (see :func:`read_bands`).

    Raises:
        ToolError: ``out_of_range`` when the raster has no such band; and :func:`read_bands`'s errors.
    """
    arr, grid = read_bands(ctx, ref, field)
    if not 0 <= band_index < arr.shape[0]:
        raise ToolError("out_of_range", f"band_index={band_index}: {last_component(ref)} has {arr.shape[0]} "
                                        f"band(s), indexed from 0")
    return arr[band_index], grid


def _finite(arr: np.ndarray) -> np.ndarray:
    arr[~np.isfinite(arr)] = np.nan
    return arr


def write(ctx: ToolContext, output_path: str | None, arr: np.ndarray, grid: Grid, parents: list[str],
          units: str = "value") -> str:
    """Write ``arr`` (2-D) as float32 GeoTIFF in the episode workspace, registered as
    :func:`artifact_name` of ``output_path`` with the call's lineage (``parents``: the paths it read; those
    written in this episode become the artifact's parents); returns Earth-Agent's
    observation ``Result save at benchmark/out/<folder>/<file name>``.

    Raises:
        ToolError: ``schema_error`` when ``output_path`` is missing; ``tool_error`` for a name the
            workspace refuses.
    """
    if not output_path or not isinstance(output_path, str):
        raise ToolError("schema_error", f"output_path: give the path of the file to write, got {output_path!r}")
    name = artifact_name(output_path)
    ctx.registry.write(name, arr.astype(np.float32), kind="raster", crs=grid.crs, transform=grid.transform,
                       units=units, call=ctx.call,
                       parents=[artifact_name(p) for p in parents if artifact_name(p) in ctx.registry.artifacts])
    folder = data_folder(ctx).name
    return f"Result save at {OUT_PREFIX}/{folder}/{last_component(output_path)}"
