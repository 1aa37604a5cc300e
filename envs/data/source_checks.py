"""Checks and reports of ``earthrl catalog add`` over an indexed source
(:class:`~earthrl.envs.data.sources.SourceIndex`): per-band settings given on the command line,
the skipped files summarised by reason, and values that are implausible for their declared units.

Plausible ranges (:data:`UNIT_RANGES`; the 1st and 99th percentiles of the valid values, after
scale and offset, of up to :data:`SAMPLE_FILES` files per band, read at most
:data:`SAMPLE_PIXELS` pixels a side): ``K`` 150–400, ``°C`` -90–100, ``reflectance`` -0.1–1.5,
and -1–1 for a normalised-difference index (units ``NDVI``/``NDWI``/… or a band of that name in
units ``index``/``value``). Physical bounds as in the step verifier (NDVI/NDWI in [-1, 1],
reflectance roughly [0, 1.2], LST roughly 180–350 K), widened for scenes at the extremes.
"""

from __future__ import annotations

import re

import numpy as np

from earthrl.envs.data.catalog import _scaled
from earthrl.envs.data.scene import BandInfo
from earthrl.envs.data.sources import BAND_FIELDS, SourceError, SourceIndex

#: units (lower case) -> (low, high) of plausible physical values.
UNIT_RANGES = {"k": (150.0, 400.0), "kelvin": (150.0, 400.0), "°c": (-90.0, 100.0), "c": (-90.0, 100.0),
               "degc": (-90.0, 100.0), "celsius": (-90.0, 100.0), "reflectance": (-0.1, 1.5)}
_INDEX = re.compile(r"nd[a-z]{1,3}i|ndvi|evi2?|savi|nbr2?|ndwi|mndwi|ndbi|ndsi|ndmi")
INDEX_RANGE = (-1.0, 1.0)
SAMPLE_FILES = 12
SAMPLE_PIXELS = 512
#: scales tried when suggesting one (physical = stored × scale, offset 0).
SCALE_GUESSES = (1e-4, 1e-3, 1e-2, 0.02, 0.1)


def parse_band_settings(pairs: dict[str, list[str] | None]) -> dict[str, dict]:
    """Per-band settings from ``--band-<field> NAME=VALUE`` options: ``pairs`` maps a field of
    :data:`~earthrl.envs.data.sources.BAND_FIELDS` to its ``NAME=VALUE`` strings. Returns
    ``{band name: {field: value}}`` (numbers for scale, offset, nodata; text for units).

    Raises:
        SourceError: a string without ``=``, an empty name, or a number that does not parse
            (names the option and the fix).
    """
    out: dict[str, dict] = {}
    for fld, items in pairs.items():
        if fld not in BAND_FIELDS:
            raise SourceError(f"--band-{fld}: unknown band setting; settings: "
                              f"{', '.join('--band-' + f for f in BAND_FIELDS)}")
        for item in items or []:
            name, sep, value = str(item).partition("=")
            if not sep or not name.strip() or not value.strip():
                raise SourceError(f"--band-{fld} {item!r}: write NAME=VALUE, e.g. --band-{fld} "
                                  f"LST={'K' if fld == 'units' else '0.02'}")
            if fld != "units":
                try:
                    value = float(value)
                except ValueError:
                    raise SourceError(f"--band-{fld} {item!r}: {value!r} is not a number; write NAME=NUMBER, "
                                      f"e.g. --band-{fld} {name}=0.02") from None
            out.setdefault(name.strip(), {})[fld] = value if fld != "units" else value.strip()
    return out


def unused_band_settings(res: SourceIndex) -> list[str]:
    """One line per per-band setting whose band name no indexed scene has (a typo would
    otherwise leave that band unscaled)."""
    have = {b.lower() for s in res.scenes for b in s.bands}
    names = ", ".join(sorted({b for s in res.scenes for b in s.bands})) or "none"
    return [f"--band-{fld} {name}=…: no indexed band is named {name!r}; bands: {names}"
            for name, settings in res.options.bands.items() if name.lower() not in have for fld in settings]


def problem_lines(res: SourceIndex, limit: int = 5, examples: int = 3, reasons: int = 6) -> list[str]:
    """Lines reporting the files that were not indexed: one per file when there are at most
    ``limit``; else one per reason (``N × reason: first files … and M more``, the ``reasons``
    commonest, then one line for the rest), so many skipped files make a few lines."""
    if len(res.skipped) <= limit:
        return list(res.problems)
    groups: dict[str, list[str]] = {}
    for where, kind in res.skipped:
        groups.setdefault(kind, []).append(where)
    ranked = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    lines = []
    for kind, wheres in ranked[:reasons]:
        more = f" and {len(wheres) - examples} more" if len(wheres) > examples else ""
        lines.append(f"{len(wheres)} × {kind}: {', '.join(wheres[:examples])}{more}")
    rest = ranked[reasons:]
    if rest:
        lines.append(f"{sum(len(w) for _, w in rest)} more in {len(rest)} other reasons: "
                     + "; ".join(kind for kind, _ in rest)[:300])
    return lines


def plausible_range(units: str, band: str) -> tuple[float, float] | None:
    """The plausible (low, high) of values in ``units`` for band ``band``, or None (no rule)."""
    u = units.strip().lower()
    if u in UNIT_RANGES:
        return UNIT_RANGES[u]
    if _INDEX.fullmatch(u) or (u in ("index", "value", "") and _INDEX.fullmatch(band.lower())):
        return INDEX_RANGE
    return None


def _sample(path, info: BandInfo) -> np.ndarray:
    """Valid physical values of one band, read at most :data:`SAMPLE_PIXELS` a side."""
    import rasterio

    with rasterio.open(path) as src:
        step = max(1, -(-max(src.height, src.width) // SAMPLE_PIXELS))
        raw = src.read(info.index, out_shape=(max(1, src.height // step), max(1, src.width // step)))
    vals = _scaled(raw, info)
    return vals[np.isfinite(vals)]


def implausible_notes(res: SourceIndex) -> list[str]:
    """One warning per band name and units whose values are implausible for those units
    (module doc), with the scale that would fix it when one of :data:`SCALE_GUESSES` does."""
    groups: dict[tuple[str, str], list] = {}
    for s in res.scenes:
        for b, info in s.band_info.items():
            groups.setdefault((b, info.units), []).append((s.bands[b], info))
    notes = []
    for (band, units), files in groups.items():
        rng = plausible_range(units, band)
        if rng is None:
            continue
        pick = [files[int(i)] for i in np.unique(np.linspace(0, len(files) - 1, min(SAMPLE_FILES, len(files))).round())]
        vals = np.concatenate([_sample(p, i) for p, i in pick])
        if not vals.size:
            continue
        lo, hi = np.percentile(vals, [1, 99])
        if rng[0] <= lo and hi <= rng[1]:
            continue
        scale, offset = pick[0][1].scale, pick[0][1].offset
        raw_lo, raw_hi = (lo - offset) / scale, (hi - offset) / scale
        fit = next((g for g in SCALE_GUESSES if rng[0] <= raw_lo * g and raw_hi * g <= rng[1]), None)
        fix = (f"stored × {fit:g} would give {raw_lo * fit:.4g}..{raw_hi * fit:.4g}; re-add with "
               f"--band-scale {band}={fit:g}" if fit else f"give the right --band-scale/--band-offset {band}=…")
        notes.append(f"{band} ({len(files)} files) is in {units!r} but its values are {lo:.4g}..{hi:.4g} "
                     f"(1st-99th percentile, scale {scale:g}, offset {offset:g}), outside the plausible "
                     f"{rng[0]:g}..{rng[1]:g}: raw counts? {fix}, or --band-units {band}=… when the units are wrong")
    return notes
