"""The ``evi`` and ``ndwi`` shortcut tools (called by name, as an agent does) against their
textbook formulas in numpy on real rasters: Sentinel-2 L1C (DN / 10000, DN 0 no data) and Landsat 8
Level-1 TOA reflectance from the MTL constants (USGS Landsat 8 Data Users Handbook §5.1).
EVI = 2.5·(N − R)/(N + 6R − 7.5B + 1) (Huete et al. 2002); NDWI = (G − N)/(G + N) (McFeeters 1996)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import rasterio

S2 = "S2_T33UUU_20170216"
L8 = "LC08_L1TP_195025_20130707_20170503_01_T1"


def _evi(n, r, b):
    return 2.5 * (n - r) / (n + 6 * r - 7.5 * b + 1)


def _ndwi(g, n):
    return (g - n) / (g + n)


def _read(env, name):
    with rasterio.open(env.registry.get(name).path) as src:
        return src.read(1).astype(np.float64)


def _s2(root, band):
    with rasterio.open(root / f"s2l1c/IMG_DATA/T33UUU_20170216T102101_{band}.jp2") as src:
        a = src.read(1).astype(np.float64)
    return np.where(a == 0, np.nan, a / 1e4)


def _l8_toa(band):
    from earthrl.envs.paths import data_dir

    root = data_dir("landsat8")
    text = (root / f"{L8}_MTL.txt").read_text()

    def m(key):
        return float(re.search(rf"\b{key} = ([-0-9.E+]+)", text).group(1))

    with rasterio.open(root / f"{L8}_B{band}.TIF") as src:
        dn = src.read(1).astype(np.float64)
    dn[dn == 0] = np.nan  # Level-1 fill
    return (m(f"REFLECTANCE_MULT_BAND_{band}") * dn + m(f"REFLECTANCE_ADD_BAND_{band}")) \
        / np.sin(np.deg2rad(m("SUN_ELEVATION")))


@pytest.mark.parametrize("tool", ["evi", "ndwi"])
def test_sentinel2_evi_and_ndwi_tools(make_env, run, data_root, tool):
    env = make_env(S2, toolset="all")
    r = run(env, tool, scene=S2)
    assert not r.error, r.observation
    n, red, blue, green = (_s2(data_root, b) for b in ("B08", "B04", "B02", "B03"))
    want = _evi(n, red, blue) if tool == "evi" else _ndwi(green, n)
    got = _read(env, r.result["artifact"])
    assert got.shape == (768, 1536)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5, equal_nan=True)  # float32 output


@pytest.mark.parametrize("tool", ["evi", "ndwi"])
def test_landsat8_evi_and_ndwi_tools_on_toa_reflectance(make_env, run, tool):
    env = make_env(L8, toolset="all")
    r = run(env, tool, scene=L8)
    assert not r.error, r.observation
    blue, green, red, n = (_l8_toa(b) for b in (2, 3, 4, 5))  # OLI B2 blue, B3 green, B4 red, B5 NIR
    want = _evi(n, red, blue) if tool == "evi" else _ndwi(green, n)
    np.testing.assert_allclose(_read(env, r.result["artifact"]), want, atol=1e-5, rtol=1e-5, equal_nan=True)
