"""The named-index shortcut tools (``savi``, ``nbr``) against numpy on the real Sentinel-2 scene.

SAVI = 1.5·(N − R)/(N + R + 0.5) (Huete 1988, L = 0.5); NBR = (N − S2)/(N + S2) (Key & Benson
2006), with N = B08, R = B04, S2 = B12, reflectance = DN / 10000, DN 0 as no data. B12 is a 20 m
band: EarthRL puts it on the 10 m grid of the scene; the reference below repeats each 20 m pixel
2 × 2, the nearest-neighbour resampling of an exact factor of 2."""

from __future__ import annotations

import json

import numpy as np
import rasterio

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import TaskSpec

S2 = "S2_T33UUU_20170216"


def _band(root, b):
    with rasterio.open(root / "s2l1c/IMG_DATA" / f"T33UUU_20170216T102101_{b}.jp2") as src:
        a = src.read(1).astype(np.float64)
    return np.where(a == 0, np.nan, a / 1e4)


def test_savi_and_nbr_tools_equal_their_formulas(data_root, tmp_path):
    env = RSEnv(data_root, tmp_path / "ws", toolset="all")
    env.reset(TaskSpec(id="t", question={"IF": "x", "AP": "x"}, data=[S2], reference=[], answer={"value": 0.0},
                       skill="test"))
    nir, red = _band(data_root, "B08"), _band(data_root, "B04")
    swir2 = _band(data_root, "B12")
    if swir2.shape != nir.shape:
        swir2 = np.repeat(np.repeat(swir2, nir.shape[0] // swir2.shape[0], 0), nir.shape[1] // swir2.shape[1], 1)
    want = {"savi": 1.5 * (nir - red) / (nir + red + 0.5), "nbr": (nir - swir2) / (nir + swir2)}
    for tool, ref in want.items():
        r = env.step(f"<tool_call>\n{json.dumps({'name': tool, 'arguments': {'scene': S2}})}\n</tool_call>")
        assert not r.error, r.observation
        with rasterio.open(env.registry.get(r.result["artifact"]).path) as src:
            got = src.read(1).astype(np.float64)
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, atol=2e-6, equal_nan=True, err_msg=tool)
    env.close()
