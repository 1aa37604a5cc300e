"""One input scene (:class:`Scene`) and the per-band read rules of user data (:class:`BandInfo`),
with their JSON records (the user catalogue, :mod:`earthrl.envs.data.user_index`, stores them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class BandInfo:
    """How to read one band of a user scene (``earthrl catalog add``).

    Attributes:
        index: 1-based band index in its file (multi-band GeoTIFFs / COGs).
        scale, offset: physical value = stored value × ``scale`` + ``offset`` (GDAL/STAC
            ``raster:bands`` convention).
        nodata: stored fill value (-> NaN), or None.
        units: units of the physical value (``"reflectance"``, ``"K"``, ``"index"``, ``"... class"``).
    """

    index: int = 1
    scale: float = 1.0
    offset: float = 0.0
    nodata: float | None = None
    units: str = "value"


@dataclass(frozen=True)
class Scene:
    """One input scene.

    Attributes:
        id: scene id (``S2_T33UUU_20170216``, a Landsat product id, or a user scene id).
        sensor: ``"sentinel-2"``, ``"landsat-5"``, ``"landsat-7"``, ``"landsat-8"``, ``"modis"``
            or a user sensor name.
        date: acquisition date, ISO ``YYYY-MM-DD``.
        bands: band name -> file path (reflectance bands, plus ``fmask`` for Landsat).
        symbols: spyndex band symbol (``N``, ``R``, ``G`` ...) -> band name.
        scale: factor from stored integers to reflectance 0-1 (1/10000).
        nodata: stored nodata value of the reflectance bands (None for Sentinel-2 L1C).
        qa_band: name of the QA band (``fmask`` codes or Landsat 8 ``BQA`` bits), or None.
        qa_kind: ``"fmask"`` | ``"bqa"`` | None.
        mtl: path of the Landsat Level-1 ``*_MTL.txt`` (DN calibration), or None.
        vectors: vector name -> GeoPackage path (``<scene>:<name>``).
        units: units of the plain bands (``"reflectance"``; ``"IGBP class"`` for MODIS land cover).
        band_info: user scenes only: band name -> :class:`BandInfo` (per-band index, scale,
            offset, nodata, units; these override ``scale``/``nodata``/``units``).
        source: name of the user source that indexed the scene (``earthrl catalog add``), or None.
    """

    id: str
    sensor: str
    date: str
    bands: dict[str, Path] = field(hash=False)
    symbols: dict[str, str] = field(hash=False)
    scale: float = 1e-4
    nodata: float | None = None
    qa_band: str | None = None
    qa_kind: str | None = None
    mtl: Path | None = field(default=None, hash=False)
    vectors: dict[str, Path] = field(default_factory=dict, hash=False)
    units: str = "reflectance"
    band_info: dict[str, BandInfo] = field(default_factory=dict, hash=False)
    source: str | None = None

    def band_name(self, band: str) -> str:
        """Canonical band name for ``band`` (case-insensitive); KeyError naming the choices."""
        for b in self.bands:
            if b.lower() == band.lower():
                return b
        raise KeyError(f"scene {self.id} has no band {band!r}; bands: {', '.join(self.bands)}")


def scene_line(s: Scene) -> str:
    """One manifest line: ``id | sensor | date | bands``."""
    return f"{s.id} | {s.sensor} | {s.date} | {','.join(s.bands)}"


def scene_record(s: Scene) -> dict:
    """JSON record of a user scene (inverse of :func:`scene_from_record`)."""
    return {"id": s.id, "sensor": s.sensor, "date": s.date, "symbols": dict(s.symbols),
            "bands": {b: {"path": str(p), **vars(s.band_info.get(b, BandInfo()))} for b, p in s.bands.items()}}


def scene_from_record(d: dict, source: str | None = None) -> Scene:
    """The :class:`Scene` of a record written by :func:`scene_record`. Scene-level ``scale``,
    ``nodata`` and ``units`` are the bands' common values (None / ``"mixed"`` where they differ).

    Raises:
        KeyError, TypeError: a malformed record.
    """
    info = {b: BandInfo(int(v["index"]), float(v["scale"]), float(v["offset"]),
                        None if v["nodata"] is None else float(v["nodata"]), str(v["units"]))
            for b, v in d["bands"].items()}

    def common(attr: str, other):
        vals = {getattr(i, attr) for i in info.values()}
        return vals.pop() if len(vals) == 1 else other

    return Scene(str(d["id"]), str(d["sensor"]), str(d["date"]),
                 {b: Path(v["path"]) for b, v in d["bands"].items()}, dict(d.get("symbols", {})),
                 scale=common("scale", None), nodata=common("nodata", None), units=common("units", "mixed"),
                 band_info=info, source=source)
