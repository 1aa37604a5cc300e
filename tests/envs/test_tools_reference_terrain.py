"""Terrain tools on the real Landsat 8 DEM (30 m, EPSG:32632) against the textbook formulas
written here in numpy: Horn (1981) 3x3 gradients with the cell size, aspect in compass degrees
clockwise from north as ESRI/Burrough & McDonnell (1998) define it (-1 on flat cells), and
hillshade = cos Z cos S + sin Z sin S cos(A_math - aspect), clipped at 0 (Burrough & McDonnell
1998, §8; the formula of GDAL ``gdaldem hillshade`` and ESRI), Z = 90° - altitude,
A_math = 90° - azimuth. Interior cells (edge cells are NaN)."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio

L8 = "LC08_L1TP_195025_20130707_20170503_01_T1"


@pytest.fixture(scope="module")
def dem():
    from earthrl.envs.paths import data_dir

    with rasterio.open(data_dir("landsat8") / "DEM.TIF") as src:
        assert src.res == (30.0, 30.0) and src.crs.to_epsg() == 32632
        return src.read(1).astype(np.float64)


def _horn(z: np.ndarray, cell: float):
    a, b, c = z[:-2, :-2], z[:-2, 1:-1], z[:-2, 2:]
    d, f = z[1:-1, :-2], z[1:-1, 2:]
    g, h, i = z[2:, :-2], z[2:, 1:-1], z[2:, 2:]
    dzdx = ((c + 2 * f + i) - (a + 2 * d + g)) / (8 * cell)  # eastwards
    dzdy = ((g + 2 * h + i) - (a + 2 * b + c)) / (8 * cell)  # southwards (rows grow to the south)
    return dzdx, dzdy


def _read(env, name):
    with rasterio.open(env.registry.get(name).path) as src:
        return src.read(1).astype(np.float64)


def test_aspect_is_compass_direction_of_downslope(make_env, run, dem):
    env = make_env(L8, toolset="all")
    r = run(env, "aspect", name=f"{L8}:DEM")
    assert not r.error, r.observation
    got = _read(env, r.result["artifact"])
    dzdx, dzdy = _horn(dem, 30.0)
    m = np.degrees(np.arctan2(dzdy, -dzdx))
    want = np.where(m < 0, 90 - m, np.where(m > 90, 450 - m, 90 - m))
    want[(dzdx == 0) & (dzdy == 0)] = -1
    diff = (got[1:-1, 1:-1] - want + 180) % 360 - 180  # 0 and 360 are one direction
    assert np.abs(diff).max() < 1e-3  # degrees (float32 output)
    assert np.isnan(got[0]).all() and np.isnan(got[:, -1]).all()


@pytest.mark.parametrize("azimuth,altitude", [(315, 45), (135, 30), (90, 60)])
def test_hillshade_is_cosine_of_the_incidence_angle(make_env, run, dem, azimuth, altitude):
    env = make_env(L8, toolset="all")
    r = run(env, "hillshade", name=f"{L8}:DEM", azimuth=azimuth, altitude=altitude)
    assert not r.error, r.observation
    got = _read(env, r.result["artifact"])
    dzdx, dzdy = _horn(dem, 30.0)
    s = np.arctan(np.hypot(dzdx, dzdy))
    asp = np.arctan2(dzdy, -dzdx)  # math convention, radians
    zen, az = np.radians(90 - altitude), np.radians(90 - azimuth)
    want = np.clip(np.cos(zen) * np.cos(s) + np.sin(zen) * np.sin(s) * np.cos(az - asp), 0, 1)
    np.testing.assert_allclose(got[1:-1, 1:-1], want, atol=1e-5)
    assert np.isnan(got[0]).all() and np.isnan(got[-1]).all()
