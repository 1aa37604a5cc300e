"""Tools from Python (``earthrl.envs.run_tool`` / ``run_workflow`` / ``ToolRunner``) over a user
catalogue in a temporary EARTHRL_HOME: values checked against numpy on the GeoTIFFs the test wrote."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from affine import Affine

from earthrl.envs import ToolCallError, ToolRunner, run_tool, run_workflow
from earthrl.launch.catalog_cmd import main as catalog_main

SHAPE = (14, 18)
SID = "plots_sentinel-2_20230612"


@pytest.fixture
def plots(home, tmp_path, capsys):
    """Red and NIR bands (DN × 1e-4, fill 0) of one user scene; returns (data root, red, nir) with
    the bands as float64 reflectance and NaN fill."""
    d = tmp_path / "plots"
    d.mkdir()
    rng = np.random.default_rng(3)
    out = []
    for band in ("B04", "B08"):
        dn = rng.integers(300, 6000, SHAPE).astype("uint16")
        dn[0, :4] = 0
        with rasterio.open(d / f"S2B_20230612_{band}.tif", "w", driver="GTiff", height=SHAPE[0], width=SHAPE[1],
                           count=1, dtype="uint16", nodata=0, crs="EPSG:32633",
                           transform=Affine(10, 0, 500000, 0, -10, 5200000)) as dst:
            dst.write(dn, 1)
        out.append(np.where(dn == 0, np.nan, dn * 1e-4))
    assert catalog_main(["add", str(d), "--pattern", "{sensor}_{date}_{band}.tif", "--scale", "0.0001"]) == 0
    capsys.readouterr()
    return tmp_path / "empty", out[0], out[1]


def test_run_tool_and_workflow_match_numpy(plots, tmp_path):
    root, red, nir = plots
    stats = run_tool("raster_stats", {"name": f"{SID}:B08"}, data_root=root)
    assert stats["mean"] == pytest.approx(np.nanmean(nir), abs=1e-6)
    assert stats["valid_px"] == int(np.isfinite(nir).sum())
    ndvi = (nir - red) / (nir + red)
    out = run_workflow([{"name": "spectral_index", "arguments": {"scene": SID, "index": "NDVI"}},
                        {"name": "raster_stats", "arguments": {"name": f"ndvi_{SID}"}}], data_root=root)
    assert out[0]["artifact"] == f"ndvi_{SID}"
    assert out[1]["mean"] == pytest.approx(np.nanmean(ndvi), abs=1e-5)
    with ToolRunner(scenes=[SID], data_root=root, workspace=tmp_path / "keep", keep=True) as s:
        art = s.call("band_math", expr="(n - r) / (n + r)", inputs={"n": f"{SID}:B08", "r": f"{SID}:B04"})["artifact"]
        assert np.allclose(s.array(art), ndvi, equal_nan=True, atol=1e-6)
        path = s.artifact(art).path
    assert path.is_file()  # kept


def test_failed_calls_raise_with_the_field_and_the_call(plots, tmp_path):
    root, _, _ = plots
    with pytest.raises(ToolCallError, match="B99") as e:
        run_tool("raster_stats", {"name": f"{SID}:B99"}, data_root=root)
    assert e.value.kind == "tool_error" and "bands: B04, B08" in e.value.message
    with pytest.raises(ToolCallError) as e:
        run_workflow([{"name": "spectral_index", "arguments": {"scene": SID, "index": "NDVI"}},
                      {"name": "raster_stats", "arguments": {"name": "ndvi_nowhere"}}], data_root=root)
    assert e.value.index == 1 and str(e.value).startswith("call 1 (raster_stats): ") and "ndvi_nowhere" in str(e.value)
    with pytest.raises(ValueError, match=r"calls\[0\]: write"):
        run_workflow([{"tool": "raster_stats"}], data_root=root)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    with pytest.raises(ValueError, match="workspace: .* is not empty; give a new or empty folder"):
        ToolRunner(data_root=root, workspace=tmp_path / "full")
