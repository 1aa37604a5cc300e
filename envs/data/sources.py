"""Bring your own data: index a folder of GeoTIFFs/COGs or STAC items into user scenes
(``earthrl catalog add``; :mod:`earthrl.envs.data.user_index` stores them, the catalogue serves
them like the fetched scenes: ``<scene>:<band>`` refs, spectral indices by band symbol).

Per band, each field comes from the first place that has it:

- band name: ``{band}`` of ``--pattern``; the band description; a band tag ``BAND``/``NAME``;
  a STAC asset key (multi-band assets: ``eo:bands`` names);
- sensor: ``{sensor}``; ``--sensor``; tag ``SENSOR``/``PLATFORM``/``SPACECRAFT_ID``; STAC
  ``platform``/``constellation`` (normalised: ``S2A`` -> ``sentinel-2``, ``LC08`` -> ``landsat-8``);
- date: ``{date}`` (``YYYYMMDD``, ``YYYY-MM-DD`` or ``YYYYDDD``); tag ``DATE``/``ACQUISITION_DATE``/
  ``DATE_ACQUIRED``/``TIFFTAG_DATETIME``; STAC ``datetime``/``start_datetime``;
- scale/offset/fill: the band's own setting (``--band-scale NAME=F``, ``--band-offset``,
  ``--band-nodata``); ``--scale``/``--offset``/``--nodata``; STAC ``raster:bands``; the file's
  own scales/offsets/nodata (GDAL band metadata, rasterio ``src.scales``/``src.offsets``); band
  tags ``scale_factor``/``scale`` and ``add_offset``/``offset``, ``_FillValue``/``nodata``; the
  same tags on the dataset (they apply to every band of the file);
- units: ``--band-units NAME=U``; ``--units``; STAC ``unit``; the file's units; tag ``UNITS``
  (band, then dataset); else ``reflectance`` for a band with a reflective spectral symbol, ``K``
  for a thermal one, ``value`` otherwise;
- spectral symbol (spyndex ``N``, ``R`` ...): the band's common name (tag ``COMMON_NAME``, STAC
  ``eo:common_name``, or the band name itself, e.g. ``nir``, ``swir16``; spyndex ``bands``
  catalogue), else the bundled sensor's band names (``B04`` of Sentinel-2, ``B5`` of Landsat 8).

Scene ids: ``{scene}``, tag ``SCENE_ID``, the STAC item id, else ``<name>_<sensor>_<YYYYMMDD>``.
A file that cannot be indexed (unreadable, no CRS, no date, no band name, a pattern it does not
match, a remote STAC href) is reported with the reason (:meth:`SourceIndex.skip`; the command
line groups them by reason, :mod:`earthrl.envs.data.source_checks`); :class:`SourceError` is
raised for input that is bad as a whole (a malformed pattern, no raster at all).
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from earthrl.envs.data.catalog import L7_SYMBOLS, L8_SYMBOLS, S2_SYMBOLS
from earthrl.envs.data.scene import BandInfo, Scene, scene_from_record, scene_record

PATTERN_FIELDS = ("scene", "sensor", "date", "band")
RASTER_SUFFIXES = (".tif", ".tiff")
#: normalised sensor name -> aliases (lower case) found in tags, file names and STAC ``platform``.
SENSOR_ALIASES = {
    "sentinel-2": ("sentinel2", "sentinel-2a", "sentinel-2b", "sentinel-2c", "s2", "s2a", "s2b", "s2c", "msi"),
    "landsat-9": ("landsat9", "landsat_9", "l9", "lc09", "lc9"),
    "landsat-8": ("landsat8", "landsat_8", "l8", "lc08", "lc8", "oli", "oli_tirs"),
    "landsat-7": ("landsat7", "landsat_7", "l7", "le07", "le7", "etm", "etm+"),
    "landsat-5": ("landsat5", "landsat_5", "l5", "lt05", "lt5", "tm"),
}
#: band names of the bundled sensors (symbol -> band), for files named like the originals.
SENSOR_SYMBOLS = {"sentinel-2": S2_SYMBOLS, "landsat-9": L8_SYMBOLS, "landsat-8": L8_SYMBOLS,
                  "landsat-7": L7_SYMBOLS, "landsat-5": {**L7_SYMBOLS, "T": "B6"}}
THERMAL = ("T", "T1", "T2")
_DATE_TAGS = ("DATE", "ACQUISITION_DATE", "DATE_ACQUIRED", "SENSING_DATE", "DATETIME", "TIFFTAG_DATETIME")
_SENSOR_TAGS = ("SENSOR", "PLATFORM", "SPACECRAFT_ID", "SPACECRAFT", "MISSION")
#: tags (band, then dataset; case-insensitive) that hold physical = stored × scale + offset.
SCALE_TAGS = ("SCALE_FACTOR", "SCALE")
OFFSET_TAGS = ("ADD_OFFSET", "OFFSET")
FILL_TAGS = ("_FILLVALUE", "NODATA", "MISSING_VALUE")
#: per-band settings of :class:`Options` (``--band-<field> NAME=VALUE``).
BAND_FIELDS = ("scale", "offset", "nodata", "units")


class SourceError(ValueError):
    """The input as a whole cannot be indexed (one line: what and the fix)."""


@dataclass
class Options:
    """What the user gave ``earthrl catalog add`` (None: read it from the files).

    Attributes:
        pattern: file-name pattern, e.g. ``{sensor}_{date}_{band}.tif`` (fields
            :data:`PATTERN_FIELDS`, ``*`` any text; matched against the path relative to the
            folder when it holds a ``/``, else against the file name).
        sensor, scale, offset, nodata, units: the same for every band (override the files).
        bands: per band name (case-insensitive): ``{"scale", "offset", "nodata", "units"}``
            settings for that band only (override the ones above and the files), e.g.
            ``{"LST": {"scale": 0.02, "units": "K"}, "NDVI": {"scale": 0.0001}}``.
    """

    pattern: str | None = None
    sensor: str | None = None
    scale: float | None = None
    offset: float | None = None
    nodata: float | None = None
    units: str | None = None
    bands: dict[str, dict] = field(default_factory=dict)

    def band(self, name: str) -> dict:
        """The per-band settings of band ``name`` (case-insensitive; ``{}`` when none)."""
        return {f: v for k, settings in self.bands.items() if k.lower() == name.lower() for f, v in settings.items()}


@dataclass
class SourceIndex:
    """Result of indexing one input.

    Attributes:
        name: source name (the scene-id prefix); input: the folder or STAC file; kind:
            ``"folder"`` | ``"stac"``; scenes: indexed scenes; problems: one line per file or
            asset that could not be indexed (``<file>: <reason>``); skipped: the same as
            ``(where, reason kind)`` pairs, for a summary by reason; notes: warnings; files:
            raster files (or assets) looked at.
    """

    name: str
    input: str
    kind: str
    options: Options
    scenes: list[Scene] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: int = 0

    def skip(self, where: str, reason: str, kind: str | None = None) -> None:
        """Record that ``where`` (a file, asset or scene) is not indexed because of ``reason``;
        ``kind`` (default ``reason``) is what files with the same problem share."""
        self.problems.append(f"{where}: {reason}")
        self.skipped.append((where, kind or reason))

    def record(self) -> dict:
        """The source entry of the user catalogue (:func:`earthrl.envs.data.user_index.put_source`)."""
        return {"input": self.input, "kind": self.kind, "options": vars(self.options),
                "scenes": [scene_record(s) for s in self.scenes]}


def normalise_sensor(text: str) -> str:
    """``S2A`` -> ``sentinel-2``, ``LC08`` -> ``landsat-8`` (:data:`SENSOR_ALIASES`); other names
    lower-cased with spaces as ``-``."""
    t = str(text).strip().lower()
    for name, aliases in SENSOR_ALIASES.items():
        if t == name or t in aliases or re.sub(r"[\s_]+", "-", t) == name:
            return name
    return re.sub(r"\s+", "-", t)


def iso_date(text: str) -> str | None:
    """ISO ``YYYY-MM-DD`` of the first date in ``text`` (``YYYYMMDD``, ``YYYY-MM-DD``, ``YYYY:MM:DD``,
    ``YYYY/MM/DD``, ``YYYYDDD`` day of year; a time after it is ignored), or None."""
    m = re.search(r"(?<!\d)(\d{4})[-:/]?(\d{2})[-:/]?(\d{2})(?!\d)", str(text))
    try:
        if m:
            return _dt.date(int(m[1]), int(m[2]), int(m[3])).isoformat()
        m = re.search(r"(?<!\d)(\d{4})(\d{3})(?!\d)", str(text))
        if m and 1 <= int(m[2]) <= 366:
            return (_dt.date(int(m[1]), 1, 1) + _dt.timedelta(int(m[2]) - 1)).isoformat()
    except ValueError:
        return None
    return None


def compile_pattern(pattern: str) -> re.Pattern:
    """Regex of a file-name pattern (``{field}`` for :data:`PATTERN_FIELDS`, ``*`` any text).

    Raises:
        SourceError: an unknown or repeated field, a stray brace.
    """
    out, seen = [], set()
    for part in re.split(r"(\{[^{}]*\}|\*)", pattern):
        if part == "*":
            out.append(".*?")
        elif part.startswith("{") and part.endswith("}"):
            f = part[1:-1]
            if f not in PATTERN_FIELDS or f in seen:
                why = "is repeated" if f in seen else "is unknown"
                raise SourceError(f"--pattern {pattern!r}: field {part} {why}; fields: "
                                  f"{', '.join('{' + x + '}' for x in PATTERN_FIELDS)} and * for any text")
            seen.add(f)
            out.append(r"(?P<date>\d{4}-?\d{2}-?\d{2}|\d{7})" if f == "date" else rf"(?P<{f}>[^/]+?)")
        elif "{" in part or "}" in part:
            raise SourceError(f"--pattern {pattern!r}: unbalanced brace in {part!r}; write fields as {{band}}")
        else:
            out.append(re.escape(part))
    return re.compile("".join(out))


def _symbols_by_common_name() -> dict[str, str]:
    import spyndex

    return {b.common_name: sym for sym, b in spyndex.bands.items()}


def _plain(name: str) -> str:
    """Band name without zero padding, upper case: ``B04`` -> ``B4``, ``b8a`` -> ``B8A``."""
    return re.sub(r"(?<=[A-Z])0+(?=\d)", "", name.upper())


def band_symbols(bands: dict[str, str | None], sensor: str) -> dict[str, str]:
    """spyndex symbol -> band name for bands ``{name: common name or None}`` of ``sensor``: the
    common name (or the band name itself when it is one, or a spyndex symbol), else the bundled
    sensor's band naming (:data:`SENSOR_SYMBOLS`)."""
    import spyndex

    by_common, out = _symbols_by_common_name(), {}
    for name, common in bands.items():
        for key in (common, name.lower()):
            if key and key.lower() in by_common:
                out.setdefault(by_common[key.lower()], name)
                break
        else:
            if name in spyndex.bands:
                out.setdefault(name, name)
    plain = {_plain(b): b for b in bands}
    for sym, b in SENSOR_SYMBOLS.get(sensor, {}).items():
        if _plain(b) in plain:
            out.setdefault(sym, plain[_plain(b)])
    return out


def _upper(tags: dict) -> dict[str, str]:
    return {str(k).upper(): str(v) for k, v in tags.items()}


def _first(tags: dict[str, str], keys) -> str | None:
    return next((tags[k] for k in keys if tags.get(k, "").strip()), None)


def _float(v) -> float | None:
    try:
        return None if v is None or str(v).strip() == "" else float(v)
    except ValueError:
        return None


@dataclass
class _File:
    path: Path
    tags: dict[str, str]
    bands: list[dict]  # per band: description, scale, offset, nodata, units, tags, dtype


def _open(path: Path) -> _File | str:
    """The file's metadata, or why it cannot be indexed."""
    import rasterio

    try:
        with warnings.catch_warnings():  # a file without georeference is reported, not warned about
            warnings.simplefilter("ignore", rasterio.errors.NotGeoreferencedWarning)
            src = rasterio.open(path)
        with src:
            if src.crs is None:
                return "no CRS (georeference it, e.g. `gdal_edit.py -a_srs EPSG:<code> FILE`)"
            bands = [{"description": src.descriptions[i], "scale": src.scales[i], "offset": src.offsets[i],
                      "nodata": src.nodatavals[i], "units": src.units[i], "tags": _upper(src.tags(i + 1)),
                      "dtype": src.dtypes[i]} for i in range(src.count)]
            return _File(path, _upper(src.tags()), bands)
    except rasterio.errors.RasterioError as exc:
        return f"unreadable ({str(exc).splitlines()[0][:160]})"


def _band_info(b: dict, opts: Options, meta: dict, index: int, name: str, file_tags: dict[str, str]) -> BandInfo:
    """:class:`BandInfo` of band ``name``: its own ``opts.bands`` settings, then ``opts``, then
    STAC ``meta``, then the file's GDAL scale/offset/nodata/units, then its band tags, then the
    dataset tags ``file_tags``; ``units`` "" when none of them names units (:class:`_Builder`
    fills the default by symbol)."""
    own, t = opts.band(name), b["tags"]
    gdal = b["scale"] not in (None, 1.0) or b["offset"] not in (None, 0.0)  # the file sets its own

    def tag(keys) -> float | None:
        return next((v for tags in (t, file_tags) for k in keys if (v := _float(tags.get(k))) is not None), None)

    scale = next(v for v in (own.get("scale"), opts.scale, meta.get("scale"), b["scale"] if gdal else None,
                             tag(SCALE_TAGS), 1.0) if v is not None)
    offset = next(v for v in (own.get("offset"), opts.offset, meta.get("offset"), b["offset"] if gdal else None,
                              tag(OFFSET_TAGS), 0.0) if v is not None)
    nodata = next((v for v in (own.get("nodata"), opts.nodata, _float(meta.get("nodata")), b["nodata"],
                               tag(FILL_TAGS)) if v is not None), None)
    units = next((v for v in (own.get("units"), opts.units, meta.get("unit"), b["units"], t.get("UNITS"),
                              file_tags.get("UNITS")) if v), "")
    return BandInfo(index, float(scale), float(offset), None if nodata is None else float(nodata), str(units))


def _clean(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text).strip()).strip("_")


class _Builder:
    """Collects bands into scenes; reports clashes (same band twice, one id with two dates)."""

    def __init__(self, out: SourceIndex):
        self.out = out
        self.scenes: dict[str, dict] = {}

    def add(self, where: str, sid: str, sensor: str, date: str, bands: list[tuple[str, Path, BandInfo, str | None]]) -> None:
        s = self.scenes.setdefault(sid, {"sensor": sensor, "date": date, "bands": {}, "where": where})
        if (s["sensor"], s["date"]) != (sensor, date):
            self.out.skip(where, f"scene {sid} is {s['sensor']} {s['date']} in {s['where']} but {sensor} {date} "
                          "here; give each date its own scene id",
                          "scene id with two dates or sensors; give each date its own scene id")
            return
        for name, _path, _info, _common in bands:
            if name in s["bands"]:
                self.out.skip(where, f"band {name} of scene {sid} is also in {s['bands'][name][0].name}; "
                              "give the bands distinct names", "band twice in one scene; give the bands distinct names")
                return
        for name, path, info, common in bands:
            s["bands"][name] = (path, info, common)

    def finish(self) -> None:
        """Append the collected scenes (date order) to the result, symbols and default units set."""
        for sid, s in sorted(self.scenes.items(), key=lambda kv: (kv[1]["date"], kv[0])):
            bands = dict(sorted(s["bands"].items()))
            symbols = band_symbols({b: v[2] for b, v in bands.items()}, s["sensor"])
            by_band = {}
            for sym, b in symbols.items():
                by_band.setdefault(b, sym)
            rec = {"id": sid, "sensor": s["sensor"], "date": s["date"], "symbols": symbols, "bands": {}}
            for b, (path, i, _) in bands.items():
                sym = by_band.get(b)
                units = i.units or ("K" if sym in THERMAL else "reflectance" if sym else "value")
                rec["bands"][b] = {"path": str(path), **vars(i), "units": units}
            self.out.scenes.append(scene_from_record(rec, source=self.out.name))


def index_folder(folder: Path, name: str | None = None, opts: Options | None = None) -> SourceIndex:
    """Index every GeoTIFF/COG under ``folder`` (recursive, ``*.tif``/``*.tiff``).

    Raises:
        SourceError: not a folder, a malformed pattern, or no raster file in it.
    """
    opts = opts or Options()
    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        raise SourceError(f"{folder} is not a folder; give a folder of GeoTIFFs or a STAC item/collection JSON")
    rx = compile_pattern(opts.pattern) if opts.pattern else None
    out = SourceIndex(_clean(name or folder.name) or "user", str(folder), "folder", opts)
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in RASTER_SUFFIXES and p.is_file())
    if not files:
        raise SourceError(f"{folder} holds no GeoTIFF (*.tif, *.tiff); give the folder that holds them")
    out.files = len(files)
    build = _Builder(out)
    for path in files:
        rel = path.relative_to(folder).as_posix()
        fields = {}
        if rx is not None:
            m = rx.fullmatch(rel if "/" in opts.pattern else path.name)
            if m is None:
                out.skip(rel, f"name does not match --pattern {opts.pattern!r}")
                continue
            fields = m.groupdict()
        f = _open(path)
        if isinstance(f, str):
            out.skip(rel, f, f.split(" (")[0] if f.startswith("unreadable") else f)
            continue
        date = iso_date(fields["date"]) if fields.get("date") else iso_date(_first(f.tags, _DATE_TAGS) or "")
        if date is None:
            out.skip(rel, "no date (add a DATE tag, e.g. `gdal_edit.py -mo DATE=2020-06-01`, "
                     "or give --pattern with {date})")
            continue
        sensor = normalise_sensor(fields.get("sensor") or opts.sensor or _first(f.tags, _SENSOR_TAGS) or "unknown")
        bands, why = [], None
        single = len(f.bands) == 1
        for i, b in enumerate(f.bands):
            own = b["description"] or _first(b["tags"], ("BAND", "BAND_NAME", "NAME"))
            bname = ((fields.get("band") or own or _first(f.tags, ("BAND", "BAND_NAME"))) if single
                     else own or (f"{fields['band']}_{i + 1}" if fields.get("band") else None))
            if not bname:
                why = (f"unknown band {i + 1} (no band name in its description or tags; name it with "
                       "`gdal_edit.py` or give --pattern with {band})")
                break
            common = _first(b["tags"], ("COMMON_NAME", "EO:COMMON_NAME"))
            bands.append((_clean(bname), path, _band_info(b, opts, {}, i + 1, _clean(bname), f.tags), common))
        if why:
            out.skip(rel, why)
            continue
        sid = _clean(fields.get("scene") or f.tags.get("SCENE_ID") or f"{out.name}_{sensor}_{date.replace('-', '')}")
        build.add(rel, sid, sensor, date, bands)
    build.finish()
    return out


def _local_stac_io():
    """A pystac StacIO that reads local files only (a remote link raises :class:`SourceError`)."""
    import pystac

    class LocalStacIO(pystac.stac_io.DefaultStacIO):
        def read_text(self, source, *args, **kwargs):
            href = str(source)
            if urlparse(href).scheme not in ("", "file"):
                raise SourceError(f"{href}: remote STAC link; EarthRL reads local STAC files only "
                                  "(download the catalogue first)")
            return super().read_text(source, *args, **kwargs)

    return LocalStacIO()


def _stac_items(path: Path) -> list:
    import pystac

    io = _local_stac_io()
    try:
        d = json.loads(path.read_text())
        if d.get("type") == "FeatureCollection":
            return list(pystac.ItemCollection.from_dict(d, preserve_dict=False))
        obj = pystac.read_file(str(path), stac_io=io)
    except SourceError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, pystac.STACError, pystac.errors.STACTypeError) as exc:
        raise SourceError(f"{path}: not a STAC item, item collection, collection or catalogue "
                          f"({type(exc).__name__}: {str(exc)[:160]})") from None
    if isinstance(obj, pystac.Item):
        return [obj]
    if not hasattr(obj, "get_items"):
        raise SourceError(f"{path}: a STAC {type(obj).__name__} holds no items; give an item, item collection, "
                          "collection or catalogue")
    return list(obj.get_items(recursive=True))


def _asset_bands(asset) -> list[dict]:
    """Per band of a STAC asset: ``{name, common, scale, offset, nodata, unit}`` from ``bands``
    (STAC 1.1), ``eo:bands`` and ``raster:bands`` (STAC 1.0 extensions)."""
    ef = asset.extra_fields
    eo, ras, v11 = ef.get("eo:bands") or [], ef.get("raster:bands") or [], ef.get("bands") or []
    n = max(len(eo), len(ras), len(v11), 1)
    out = []
    for i in range(n):
        e = eo[i] if i < len(eo) else {}
        r = ras[i] if i < len(ras) else {}
        b = v11[i] if i < len(v11) else {}
        out.append({"name": b.get("name") or e.get("name"),
                    "common": b.get("eo:common_name") or e.get("common_name"),
                    "scale": _float(b.get("raster:scale", r.get("scale"))),
                    "offset": _float(b.get("raster:offset", r.get("offset"))),
                    "nodata": b.get("nodata", r.get("nodata")), "unit": b.get("unit") or r.get("unit")})
    return out


def index_stac(path: Path, name: str | None = None, opts: Options | None = None) -> SourceIndex:
    """Index the raster assets (GeoTIFF/COG, local hrefs) of a STAC item, item collection,
    collection or catalogue JSON (pystac); one scene per item (id = item id).

    Raises:
        SourceError: not readable as STAC, a remote STAC link, no raster asset at all.
    """
    opts = opts or Options()
    path = Path(path).expanduser().resolve()
    items = _stac_items(path)
    out = SourceIndex(_clean(name or path.stem) or "user", str(path), "stac", opts)
    build = _Builder(out)
    for item in items:
        dt = item.datetime or item.common_metadata.start_datetime
        sensor = normalise_sensor(opts.sensor or item.common_metadata.platform
                                  or item.common_metadata.constellation or "unknown")
        bands, bad = [], False
        for key, asset in item.assets.items():
            href = asset.get_absolute_href() or asset.href
            if not urlparse(href).scheme and not Path(href).is_absolute():  # relative, no self link
                href = str(path.parent / href)
            if not ("tiff" in (asset.media_type or "").lower() or href.lower().endswith(RASTER_SUFFIXES)):
                continue
            out.files += 1
            where = f"item {item.id} asset {key}"
            if urlparse(href).scheme not in ("", "file"):
                out.skip(where, f"remote href {href} (only local files are indexed; download it first)",
                         "remote href (only local files are indexed; download it first)")
                bad = True
                continue
            local = Path(urlparse(href).path if href.startswith("file:") else href)
            f = _open(local)
            if isinstance(f, str):
                out.skip(f"{where} ({local.name})", f, f.split(" (")[0] if f.startswith("unreadable") else f)
                bad = True
                continue
            meta = _asset_bands(asset)
            for i, b in enumerate(f.bands):
                m = meta[i] if i < len(meta) else {}
                bname = key if len(f.bands) == 1 else (m.get("name") or f"{key}_{i + 1}")
                bands.append((_clean(bname), local, _band_info(b, opts, m, i + 1, _clean(bname), f.tags),
                              m.get("common")))
        if dt is None:
            out.skip(f"item {item.id}", "no date (set its datetime or start_datetime)")
            continue
        if bands and not bad:
            build.add(f"item {item.id}", _clean(item.id), sensor, dt.date().isoformat(), bands)
    if out.files == 0:
        raise SourceError(f"{path}: no GeoTIFF/COG asset in {len(items)} STAC item(s); "
                          "index assets of type image/tiff with local hrefs")
    build.finish()
    return out


def index_source(src: Path, name: str | None = None, opts: Options | None = None) -> SourceIndex:
    """:func:`index_folder` for a folder, :func:`index_stac` for a ``.json`` file.

    Raises:
        SourceError: neither (names what to give).
    """
    src = Path(src).expanduser()
    if src.is_dir():
        return index_folder(src, name, opts)
    if src.is_file() and src.suffix.lower() == ".json":
        return index_stac(src, name, opts)
    what = "does not exist" if not src.exists() else "is neither a folder nor a .json STAC file"
    raise SourceError(f"{src} {what}; give a folder of GeoTIFFs or a STAC item/collection JSON")
