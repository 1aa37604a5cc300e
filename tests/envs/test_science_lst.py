"""Land-surface temperature against an independent computation here from the raw Level-1 DN
and the MTL file (numpy + rasterio): NDVI^THM emissivity of Sobrino et al. (2004), the
previous two-component mixture as an option, and the single-channel algorithm with atmospheric
functions (Jiménez-Muñoz et al. 2014 coefficients for Landsat 8 B10) given a water vapour."""

from __future__ import annotations

import re

import numpy as np
import pytest
import rasterio

from earthrl.envs.paths import data_dir

L8 = "LC08_L1TP_195025_20130707_20170503_01_T1"
LE07 = "LE07_L1TP_195025_20010730_20170204_01_T1"


def _scene(sid):
    root = data_dir("landsat8")
    mtl = dict(re.findall(r'^\s*(\w+) = "?([^"\n]*)"?$', (root / f"{sid}_MTL.txt").read_text(), re.M))
    m = lambda k: float(mtl[k])  # noqa: E731

    def dn(b):
        with rasterio.open(root / f"{sid}_{b}.TIF") as src:
            a = src.read(1).astype(np.float64)
        a[(a == 0) | (a == -32768)] = np.nan
        return a

    def toa(b):
        return (m(f"REFLECTANCE_MULT_BAND_{b}") * dn(f"B{b}") + m(f"REFLECTANCE_ADD_BAND_{b}")) \
            / np.sin(np.deg2rad(m("SUN_ELEVATION")))

    return m, dn, toa


def _read(env, name):
    with rasterio.open(env.registry.get(name).path) as src:
        return src.read(1).astype(np.float64)


@pytest.mark.parametrize("sid,tb,rb,nb,lam", [(LE07, "6_VCID_1", 3, 4, 11.45)])
def test_lst_sobrino2004_and_mixture_option(make_env, run, sid, tb, rb, nb, lam):
    m, dn, toa = _scene(sid)
    rad = m(f"RADIANCE_MULT_BAND_{tb}") * dn(f"B{tb}") + m(f"RADIANCE_ADD_BAND_{tb}")
    bt = m(f"K2_CONSTANT_BAND_{tb}") / np.log(m(f"K1_CONSTANT_BAND_{tb}") / rad + 1)
    red, nir = toa(rb), toa(nb)
    ndvi = (nir - red) / (nir + red)
    pv = np.clip((ndvi - 0.2) / 0.3, 0, 1) ** 2
    eps = np.where(ndvi < 0.2, 0.973 - 0.047 * red, np.where(ndvi > 0.5, 0.99, 0.004 * pv + 0.986))
    env = make_env(sid, toolset="all")
    r = run(env, "land_surface_temperature", scene=sid)
    assert not r.error, r.observation
    np.testing.assert_allclose(_read(env, r.result["artifact"]), bt / (1 + lam * bt / 14388.0 * np.log(eps)),
                               atol=2e-3)
    o = run(env, "land_surface_temperature", scene=sid, emissivity="mixture_no_cavity")
    eps_mix = 0.99 * pv + 0.97 * (1 - pv)
    old = _read(env, o.result["artifact"])
    np.testing.assert_allclose(old, bt / (1 + lam * bt / 14388.0 * np.log(eps_mix)), atol=2e-3)
    assert o.result["artifact"] != r.result["artifact"]
    assert 0.8 < np.nanmax(np.abs(old - _read(env, r.result["artifact"]))) < 1.5  # K, the corrected gap


def test_single_channel_with_water_vapour_landsat8(make_env, run):
    m, dn, toa = _scene(L8)
    w = 1.8
    rad = m("RADIANCE_MULT_BAND_10") * dn("B10") + m("RADIANCE_ADD_BAND_10")
    t = m("K2_CONSTANT_BAND_10") / np.log(m("K1_CONSTANT_BAND_10") / rad + 1)
    red, nir = toa(4), toa(5)
    ndvi = (nir - red) / (nir + red)
    pv = np.clip((ndvi - 0.2) / 0.3, 0, 1) ** 2
    eps = np.where(ndvi < 0.2, 0.973 - 0.047 * red, np.where(ndvi > 0.5, 0.99, 0.004 * pv + 0.986))
    psi1 = 0.04019 * w * w + 0.02916 * w + 1.01523
    psi2 = -0.38333 * w * w - 1.50294 * w + 0.20324
    psi3 = 0.00918 * w * w + 1.36072 * w - 0.27514
    b_gamma = 14388.0 / 10.895
    gamma, delta = t * t / (b_gamma * rad), t - t * t / b_gamma
    want = gamma * ((psi1 * rad + psi2) / eps + psi3) + delta
    env = make_env(L8, toolset="all")
    r = run(env, "land_surface_temperature", scene=L8, water_vapour=w)
    assert not r.error, r.observation
    got = _read(env, r.result["artifact"])
    np.testing.assert_allclose(got, want, atol=0.02)
    assert 290 < np.nanmean(got) < 320
    bad = run(env, "land_surface_temperature", scene=L8, water_vapour=-1)
    assert bad.error and "water_vapour" in bad.observation
