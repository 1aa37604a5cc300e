"""Per-episode artifact registry (SimCRAFT §3 "dynamic path registry").

Every file a tool writes is registered here with kind, CRS, shape, bands, units and lineage
(parent artifacts + the tool call that produced it). The task's input scenes are registered too
(kind ``"scene"``), so that a tool can only touch what the task's data manifest or an earlier call
made. Referring to anything else raises :class:`HallucinatedPathError` (error kind
``"hallucinated_path"``), which the env turns into an error observation.

The workspace is shared with the CodeAct sandbox, whose code may plant links in it: every file
is written and read through :mod:`earthrl.envs.data.workspace_fs` (no link followed, plain files with
one link only); a planted entry is a ``sandbox_violation`` error.

Raster artifacts live as GeoTIFFs in the workspace; the registry keeps their pixel arrays in
memory only up to a byte budget (least recently used first out, ``EARTHRL_ARTIFACT_CACHE_MB``,
default 256 MiB) and reads the others back from their files when a tool asks, so a long series of
dated rasters keeps the process's memory bounded.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from earthrl.envs.data.catalog import Scene
from earthrl.envs.data.memcache import ArrayCache, budget_bytes
from earthrl.envs.data.workspace_fs import UnsafeWorkspaceFile, check_entry, read_bytes, write_bytes

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}$")
#: artifact kind -> file extension in the workspace. Raster kinds are GeoTIFFs: ``raster``
#: (float32, NaN nodata), ``mask`` (uint8 0/1, 255 nodata), ``classes`` (uint8 labels, 255
#: nodata), ``segments`` (int32 labels >= 0, -1 nodata). The others: ``series`` (JSON
#: ``{"dates", "values", ...}``), ``table`` (JSON), ``vector`` (GeoPackage), ``image`` (PNG).
KINDS = {"raster": ".tif", "mask": ".tif", "classes": ".tif", "segments": ".tif",
         "series": ".json", "table": ".json", "vector": ".gpkg", "image": ".png"}
RASTER_KINDS = ("raster", "mask", "classes", "segments")
_EXTS = (".tif", ".json", ".gpkg", ".png", ".geojson")


class ToolError(Exception):
    """An error a tool reports to the agent as an observation (E(a,o)=1).

    Attributes:
        kind: short machine-readable error kind (``"tool_error"``, ``"hallucinated_path"`` ...).
        message: what went wrong and how to fix it.
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


def _unsafe(e: UnsafeWorkspaceFile) -> ToolError:
    return ToolError("sandbox_violation", str(e))


class HallucinatedPathError(ToolError):
    """A name/path that is neither a task scene nor a registered artifact."""

    def __init__(self, message: str):
        super().__init__("hallucinated_path", message)


@dataclass
class Artifact:
    """One registered scene or tool output.

    Attributes:
        name: artifact name the agent uses (no extension), e.g. ``ndvi_S2_T33UUU_20170216``.
        kind: ``"scene"`` or one of :data:`KINDS` (``"raster"`` float32, ``"mask"`` uint8 0/1
            255 nodata, ``"classes"``, ``"segments"``, ``"series"``, ``"table"``, ``"vector"``,
            ``"image"``).
        path: the file written in the episode workspace (GeoTIFF, JSON, GeoPackage or PNG).
        crs: CRS string (e.g. ``EPSG:32633``); shape: ``(rows, cols)``; res: pixel size (m).
        bands: band names; units: e.g. ``"index"``, ``"reflectance"``, ``"mask"``.
        dtype, nodata: storage dtype and nodata value (NaN for float rasters).
        parents: names of the artifacts this one was computed from.
        call: the tool call ``{"name", "arguments"}`` that produced it (None for scenes).
        sensor, date: inherited from the source scene(s) where unambiguous.
        transform: the affine geotransform as 6 numbers ``(a, b, c, d, e, f)``.
    """

    name: str
    kind: str
    path: Path | None
    crs: str | None
    shape: tuple[int, int] | None
    res: tuple[float, float] | None
    bands: list[str]
    units: str
    dtype: str
    nodata: float | int | None = None
    parents: list[str] = field(default_factory=list)
    call: dict | None = None
    sensor: str | None = None
    date: str | None = None
    transform: tuple | None = None

    def describe(self) -> dict[str, Any]:
        """JSON-friendly summary (path as a string)."""
        d = asdict(self)
        d["path"] = str(self.path) if self.path else None
        return d


class ArtifactRegistry:
    """Artifacts of one episode, written under ``workspace``.

    Args:
        workspace: the episode's folder; every tool output is ``workspace/<name>.tif``.
        scenes: the task's input scenes (the only scenes tools may read).
        max_cached_bytes: pixel arrays kept in memory at most (bytes; default
            ``EARTHRL_ARTIFACT_CACHE_MB`` MiB, 256); the rest are read from their files on use.

    Raises:
        ValueError: ``EARTHRL_ARTIFACT_CACHE_MB`` is not a whole number.
    """

    def __init__(self, workspace: Path, scenes: dict[str, Scene] | None = None,
                 max_cached_bytes: int | None = None):
        self.workspace = Path(workspace)
        self.scenes: dict[str, Scene] = dict(scenes or {})
        self.artifacts: dict[str, Artifact] = {}
        if max_cached_bytes is None:
            max_cached_bytes = budget_bytes("EARTHRL_ARTIFACT_CACHE_MB", 256)
        self._arrays = ArrayCache(max_cached_bytes)

    def in_memory(self) -> dict[str, int]:
        """Artifact name -> bytes of the pixel arrays held in memory now (the others are on disk
        only, at their ``path``)."""
        return self._arrays.sizes()

    # -- lookup ---------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Scene ids then artifact names, in registration order."""
        return list(self.scenes) + list(self.artifacts)

    def _unknown(self, ref: str, what: str) -> HallucinatedPathError:
        known = self.names()
        listing = ", ".join(known[:12]) + (" ..." if len(known) > 12 else "")
        return HallucinatedPathError(
            f"{what} {ref!r} does not exist in this episode. Use a scene id from the data list "
            f"or an artifact name returned by an earlier call. Known: {listing}")

    def scene(self, ref: str) -> Scene:
        """The task scene ``ref`` (a scene id; a path to its folder/files is accepted too).

        Raises:
            HallucinatedPathError: not one of the task's scenes.
        """
        key = Path(str(ref).strip()).name.split(":")[0]
        for sid, sc in self.scenes.items():
            if key == sid or key.startswith(sid):
                return sc
        raise self._unknown(ref, "scene")

    def get(self, ref: str) -> Artifact:
        """The registered artifact ``ref`` (name, ``name.tif`` or its workspace path).

        Raises:
            HallucinatedPathError: nothing of that name was produced in this episode.
        """
        key = Path(str(ref).strip()).name
        for ext in _EXTS:
            if key.lower().endswith(ext) and key[: -len(ext)] in self.artifacts:
                key = key[: -len(ext)]
        if key in self.artifacts:
            art = self.artifacts[key]
            if art.path is not None:  # a tool may open art.path itself: no planted link there
                try:
                    check_entry(art.path.parent, art.path.name)
                except UnsafeWorkspaceFile as e:
                    raise _unsafe(e) from None
            return art
        raise self._unknown(ref, "artifact")

    def get_kind(self, ref: str, kinds: tuple[str, ...], field_name: str) -> Artifact:
        """:meth:`get`, and check that the artifact's kind is one of ``kinds``.

        Raises:
            HallucinatedPathError: unknown name.
            ToolError: kind ``"wrong_kind"`` naming ``field_name``, the kind found and the kinds wanted.
        """
        art = self.get(ref)
        if art.kind not in kinds:
            raise ToolError("wrong_kind", f"{field_name}: {art.name} is a {art.kind} artifact; give a "
                            f"{' or '.join(kinds)} artifact")
        return art

    def array(self, ref: str) -> np.ndarray:
        """Pixel array of raster artifact ``ref`` (float32 raster, uint8 mask/classes, int32
        segments), shape ``(rows, cols)``.

        Raises:
            ToolError: kind ``"wrong_kind"`` (not a raster artifact) or ``"corrupt_file"`` (the
                GeoTIFF cannot be read; re-create it with the tool that made it).
        """
        art = self.get_kind(ref, RASTER_KINDS, "name")
        arr = self._arrays.get(art.name)
        if arr is None:
            from rasterio.errors import RasterioError

            try:
                with self._open_raster(art) as src:
                    arr = src.read(1)
            except UnsafeWorkspaceFile as e:
                raise _unsafe(e) from None
            except (RasterioError, OSError) as e:
                first = (str(e).splitlines() or [""])[0][:160]
                raise ToolError("corrupt_file", f"{art.name}: {art.path.name} is not a readable GeoTIFF "
                                f"({first}); re-create it with the tool that made it") from None
            self._arrays.put(art.name, arr)
        return arr

    def load_json(self, ref: str, kinds: tuple[str, ...] = ("series", "table")) -> dict:
        """Content of a JSON artifact (``series`` / ``table``).

        Raises:
            ToolError: wrong kind, or ``"corrupt_file"`` when the JSON cannot be parsed.
        """
        import json

        art = self.get_kind(ref, kinds, "series")
        try:
            return json.loads(read_bytes(art.path.parent, art.path.name))
        except UnsafeWorkspaceFile as e:
            raise _unsafe(e) from None
        except (OSError, ValueError) as e:
            raise ToolError("corrupt_file", f"{art.name}: {art.path.name} is not readable JSON ({e}); "
                            "re-create it with the tool that made it") from None

    # -- writing --------------------------------------------------------------------------
    def check_name(self, name: str) -> str:
        """Validate an output name (letters, digits, ``_.-``; max 96 chars).

        Raises:
            ToolError: kind ``"tool_error"`` naming the rule.
        """
        name = name[:-4] if name.lower().endswith(".tif") else name
        if not _NAME_RE.match(name) or name in self.scenes:
            raise ToolError("tool_error", f"bad output name {name!r}: use letters, digits, _ . - "
                            "(max 96 chars), not a scene id")
        return name

    def write(self, name: str, arr: np.ndarray, *, kind: str, crs: str, transform, units: str,
              parents: list[str], call: dict | None, bands: list[str] | None = None,
              sensor: str | None = None, date: str | None = None) -> Artifact:
        """Write ``arr`` (2-D float32 raster with NaN nodata, uint8 mask/classes with 255 nodata,
        or int32 segments with -1 nodata) as a GeoTIFF ``workspace/<name>.tif`` and register it
        with its lineage. Re-using a name replaces the earlier artifact (its lineage too)."""
        from rasterio.io import MemoryFile

        name = self.check_name(name)
        self.workspace.mkdir(parents=True, exist_ok=True)
        path = self.workspace / f"{name}.tif"
        nodata = {np.dtype(np.uint8): 255, np.dtype(np.int32): -1}.get(arr.dtype, float("nan"))
        with MemoryFile() as mem:
            with mem.open(driver="GTiff", height=arr.shape[0], width=arr.shape[1], count=1,
                          dtype=str(arr.dtype), crs=crs, transform=transform,
                          nodata=nodata) as dst:
                dst.write(arr, 1)
            self._write(path, mem.read())
        art = Artifact(name=name, kind=kind, path=path, crs=crs, shape=tuple(arr.shape),
                       res=(abs(transform.a), abs(transform.e)), bands=bands or [name],
                       units=units, dtype=str(arr.dtype), nodata=nodata, parents=list(parents),
                       call=call, sensor=sensor, date=date, transform=tuple(transform)[:6])
        self.artifacts[name] = art
        self._arrays.put(name, arr)
        return art

    def register_file(self, name: str, kind: str, *, units: str, parents: list[str],
                      call: dict | None, writer, crs: str | None = None, sensor: str | None = None,
                      date: str | None = None) -> Artifact:
        """Register a non-raster artifact (``series``/``table``/``vector``/``image``, or a raster
        file written elsewhere) at ``workspace/<name><ext>``; ``writer(path)`` writes the file.

        Raises:
            ToolError: bad name or unknown ``kind``.
        """
        if kind not in KINDS:
            raise ToolError("tool_error", f"unknown artifact kind {kind!r}; kinds: {', '.join(KINDS)}")
        import tempfile

        name = self.check_name(name)
        self.workspace.mkdir(parents=True, exist_ok=True)
        path = self.workspace / f"{name}{KINDS[kind]}"
        with tempfile.TemporaryDirectory(prefix="earthrl_artifact_") as tmp:  # parent-only
            private = Path(tmp) / path.name
            writer(private)
            self._write(path, private.read_bytes())
        art = Artifact(name=name, kind=kind, path=path, crs=crs, shape=None, res=None, bands=[],
                       units=units, dtype=KINDS[kind][1:], parents=list(parents), call=call,
                       sensor=sensor, date=date)
        self.artifacts[name] = art
        self._arrays.pop(name)
        if kind in RASTER_KINDS:
            self._raster_meta(art)
        return art

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        """Write ``data`` at ``path`` (in the workspace) without following links.

        Raises:
            ToolError: ``sandbox_violation`` when a link or folder was planted at that name.
        """
        try:
            write_bytes(path.parent, path.name, data)
        except UnsafeWorkspaceFile as e:
            raise _unsafe(e) from None

    @staticmethod
    @contextmanager
    def _open_raster(art: Artifact):
        """The artifact's GeoTIFF opened from its bytes (read without following links).

        Raises:
            UnsafeWorkspaceFile: a planted link or non-regular file; OSError / RasterioError.
        """
        from rasterio.io import MemoryFile

        with MemoryFile(read_bytes(art.path.parent, art.path.name)) as mem, mem.open() as src:
            yield src

    def _raster_meta(self, art: Artifact) -> None:
        from rasterio.errors import RasterioError

        try:
            with self._open_raster(art) as src:
                art.crs = src.crs.to_string() if src.crs else None
                art.shape, art.res = (src.height, src.width), (abs(src.transform.a), abs(src.transform.e))
                art.transform, art.dtype, art.nodata = tuple(src.transform)[:6], src.dtypes[0], src.nodata
        except (RasterioError, OSError):  # UnsafeWorkspaceFile too
            pass  # unreadable: array() reports it as corrupt_file when a tool reads it

    def write_json(self, name: str, obj: dict, kind: str, *, units: str, parents: list[str],
                   call: dict | None, **meta) -> Artifact:
        """Write ``obj`` as ``workspace/<name>.json`` and register it (kind ``series``/``table``)."""
        import json

        text = json.dumps(obj, separators=(",", ":"), default=float)
        return self.register_file(name, kind, units=units, parents=parents, call=call,
                                  writer=lambda p: p.write_text(text), **meta)

    def lineage(self, name: str) -> list[dict]:
        """Tool calls that produced ``name``, ancestors first (its provenance).

        Raises:
            HallucinatedPathError: unknown name.
        """
        out: list[dict] = []
        seen: set[str] = set()

        def visit(n: str) -> None:
            if n in seen or n in self.scenes:
                return
            seen.add(n)
            art = self.get(n)
            for p in art.parents:
                visit(p)
            if art.call is not None:
                out.append(art.call)

        visit(name)
        return out

