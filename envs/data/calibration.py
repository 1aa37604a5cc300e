"""Radiometric calibration of Landsat Level-1 DN from the MTL metadata file (USGS, "Using the
USGS Landsat Level-1 Data Product", Landsat 8 Data Users Handbook §5) and of Sentinel-2 L1C DN
(ESA Sentinel-2 L1C product specification: TOA reflectance = DN / QUANTIFICATION_VALUE, 10000).

All functions take DN arrays (any integer dtype) and return float32 arrays; fill pixels
(:func:`fill_mask`: DN 0 or the file's nodata) become NaN.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import numpy as np

#: Sentinel-2 L1C quantification value (DN per unit TOA reflectance).
S2_QUANTIFICATION = 10000.0

_LINE = re.compile(r'^\s*([A-Z0-9_]+)\s*=\s*"?([^"]*)"?\s*$')


@lru_cache(maxsize=16)
def _parse(path: str) -> dict:
    out: dict[str, float | str] = {}
    for line in Path(path).read_text().splitlines():
        m = _LINE.match(line)
        if not m or m.group(1) in ("GROUP", "END_GROUP"):
            continue
        key, val = m.group(1), m.group(2).strip()
        try:
            out[key] = float(val)
        except ValueError:
            out[key] = val
    return out


def parse_mtl(path: Path) -> dict[str, float | str]:
    """Flat ``KEY -> value`` dict of a Landsat ``*_MTL.txt`` (ODL ``KEY = value`` lines;
    numbers as float, the rest as str without quotes). Cached per path.

    Raises:
        OSError: the file cannot be read.
    """
    return dict(_parse(str(path)))


def _band_no(band: str) -> str:
    """``"B10"`` -> ``"10"``; ``"B6_VCID_1"`` -> ``"6_VCID_1"``."""
    return band[1:] if band.upper().startswith("B") else band


def _key(mtl: dict, name: str, band: str) -> float:
    k = f"{name}_BAND_{_band_no(band)}"
    if k not in mtl:
        raise KeyError(f"MTL has no {k}; band {band} has no {name.lower()} calibration")
    return float(mtl[k])


def zero_is_fill(sensor: str | None, level1: bool) -> bool:
    """Whether stored value 0 means no data: Sentinel-2 (L1C and L2A both define NO_DATA = 0,
    ESA S2 product specification) and Landsat Level-1 DN (fill = 0, Landsat 8 Data Users
    Handbook §5); not surface-reflectance products with their own nodata (Landsat lsts -9999)
    nor class rasters (MODIS IGBP class 0 is water)."""
    return sensor == "sentinel-2" or level1


def fill_mask(dn: np.ndarray, nodata: float | None = None, *, zero_fill: bool = False) -> np.ndarray:
    """EarthRL's one no-data rule, for every sensor and tool: True where the stored value is the
    file's ``nodata`` value, or 0 when ``zero_fill`` (:func:`zero_is_fill`). Every reader of
    spectral/thermal bands (calibration, ``spectral_index``, ``band_math`` and the tools built on
    them) turns these pixels into NaN."""
    bad = dn == 0 if zero_fill else np.zeros(dn.shape, dtype=bool)
    if nodata is not None:
        bad |= dn == nodata
    return bad


def _dn(dn: np.ndarray, nodata: float | None) -> tuple[np.ndarray, np.ndarray]:
    return dn.astype(np.float32), fill_mask(dn, nodata, zero_fill=True)


def toa_radiance(dn: np.ndarray, mtl: dict, band: str, nodata: float | None = None) -> np.ndarray:
    """TOA spectral radiance L = RADIANCE_MULT_BAND_x · DN + RADIANCE_ADD_BAND_x,
    W/(m²·sr·µm), float32, NaN on fill.

    Raises:
        KeyError: the MTL lacks the band's constants.
    """
    x, bad = _dn(dn, nodata)
    out = np.float32(_key(mtl, "RADIANCE_MULT", band)) * x + np.float32(_key(mtl, "RADIANCE_ADD", band))
    out[bad] = np.nan
    return out


def toa_reflectance(dn: np.ndarray, mtl: dict, band: str, nodata: float | None = None) -> np.ndarray:
    """TOA reflectance (0–1, sun-angle corrected) ρ = (REFLECTANCE_MULT_BAND_x · DN +
    REFLECTANCE_ADD_BAND_x) / sin(SUN_ELEVATION), float32, NaN on fill.

    Raises:
        KeyError: the MTL lacks the band's constants (thermal bands have none).
    """
    x, bad = _dn(dn, nodata)
    rho = np.float32(_key(mtl, "REFLECTANCE_MULT", band)) * x + np.float32(_key(mtl, "REFLECTANCE_ADD", band))
    rho /= np.float32(np.sin(np.deg2rad(float(mtl["SUN_ELEVATION"]))))
    rho[bad] = np.nan
    return rho


def brightness_temperature(dn: np.ndarray, mtl: dict, band: str, nodata: float | None = None) -> np.ndarray:
    """At-sensor brightness temperature T = K2 / ln(K1 / L + 1) in K (float32, NaN on fill),
    with L from :func:`toa_radiance` and K1/K2 = ``K1_CONSTANT_BAND_x``/``K2_CONSTANT_BAND_x``.

    Raises:
        KeyError: the band has no thermal constants.
    """
    k1, k2 = _key(mtl, "K1_CONSTANT", band), _key(mtl, "K2_CONSTANT", band)
    rad = toa_radiance(dn, mtl, band, nodata)
    with np.errstate(all="ignore"):
        return (np.float32(k2) / np.log(np.float32(k1) / rad + 1)).astype(np.float32)


def is_thermal(mtl: dict, band: str) -> bool:
    """True when the MTL has K1/K2 constants for ``band`` (Landsat 8 B10/B11, Landsat 7 B6)."""
    return f"K1_CONSTANT_BAND_{_band_no(band)}" in mtl


def s2_toa_reflectance(dn: np.ndarray) -> np.ndarray:
    """Sentinel-2 L1C TOA reflectance = DN / 10000 (float32; DN 0 = no data -> NaN)."""
    out = dn.astype(np.float32) / np.float32(S2_QUANTIFICATION)
    out[fill_mask(dn, zero_fill=True)] = np.nan
    return out
