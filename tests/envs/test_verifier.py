"""Step verifier: plausibility thresholds on hand-made arrays and on the real S2 scene."""

from __future__ import annotations

import json

import numpy as np

from earthrl.envs.core.verifier import Verdict, consistency, plausibility, scalar_plausibility, value_range
from earthrl.envs.tools.registry import TOOLS

S2 = "S2_T33UUU_20170216"


def _v(values, rng, **kw):
    v = Verdict()
    plausibility(v, np.asarray(values, dtype=np.float32), rng, "x", **kw)
    return v


def test_value_ranges_by_units_and_tool_range():
    assert value_range("index", None) == (-1.0, 1.0)
    assert value_range("reflectance", None) == (0.0, 1.2)
    assert value_range("K", None) == value_range("K (LST)", None) == (180.0, 350.0)
    assert value_range("fraction", None) == (0.0, 1.0)
    assert value_range("index", (0.0, 100.0)) == (0.0, 100.0)  # Tool.valid_range wins
    assert value_range("expression", None) is None


def test_raster_plausibility_levels():
    ok = np.linspace(-1, 1, 1000)
    assert _v(ok, (-1, 1)).verdict == "pass"
    few = ok.copy()
    few[:5] = 1.5            # 0.5 % outside -> uncertain
    v = _v(few, (-1, 1))
    assert v.verdict == "uncertain" and "0.5% of values outside [-1, 1]" in v.reasons[0]
    many = ok.copy()
    many[:50] = -3.0         # 5 % outside -> fail
    assert _v(many, (-1, 1)).verdict == "fail"
    assert _v([np.nan] * 10, (-1, 1)).reasons == ["x: all pixels are nodata"]
    holes = np.r_[np.full(6, np.nan), np.zeros(4)]
    v = _v(holes, (-1, 1))
    assert v.verdict == "uncertain" and v.reasons == ["x: 60% nodata pixels (> 50%)"]
    assert _v(holes, (-1, 1), nan_max=0.7).verdict == "pass"
    assert _v([290.0, 301.5, 349.0], (180, 350)).verdict == "pass"      # LST in K
    assert _v([10.0, 25.0], value_range("K", None)).verdict == "fail"   # Celsius given as K
    assert _v([0.05, 1.3, 0.2], value_range("reflectance", None)).verdict == "fail"


def test_scalar_plausibility():
    v = Verdict()
    scalar_plausibility(v, {"share_pct": 101.0, "mean": 0.4}, (-1, 1), "t")
    assert v.verdict == "fail" and v.reasons == ["t: share_pct 101 outside [0, 100]"]
    v = Verdict()
    scalar_plausibility(v, {"mean": 1.7, "valid_px": 10, "nodata_px": 30}, (-1, 1), "t")
    assert v.reasons == ["t: mean 1.7 outside [-1, 1]", "t: 75% nodata pixels (> 50%)"]
    v = Verdict()
    scalar_plausibility(v, {"mean": 0.3, "valid_px": 90, "nodata_px": 10}, (-1, 1), "t")
    assert v.verdict == "pass"


def test_consistency_family_skill_and_order():
    v = Verdict()
    consistency(v, TOOLS["raster_stats"], "PRA", None, [])
    assert v.verdict == "fail" and "SAA tool" in v.reasons[0]
    v = Verdict()
    consistency(v, TOOLS["raster_stats"], "SAA", {"spectral_index"}, [])
    assert v.verdict == "uncertain"
    v = Verdict()
    consistency(v, TOOLS["raster_stats"], None, {"raster_stats"}, ["skill x: raster_stats needs y first"])
    assert v.verdict == "fail" and v.reasons == ["skill x: raster_stats needs y first"]


def test_env_verdict_of_evi_on_s2_l1c_matches_numpy(make_env, run, raw):
    """EVI of the L1C (TOA) scene leaves [-1, 1] where the denominator N + 6R - 7.5B + 1 nears 0:
    the verdict must follow the out-of-range share computed independently."""
    env = make_env(S2)
    r = run(env, "spectral_index", scene=S2, index="EVI")
    n, red, blue = raw.s2("B08"), raw.s2("B04"), raw.s2("B02")
    evi = 2.5 * (n - red) / (n + 6 * red - 7.5 * blue + 1)
    evi = evi[np.isfinite(evi)]
    out = float(((evi < -1 - 1e-6) | (evi > 1 + 1e-6)).mean())
    want = "pass" if out == 0 else ("uncertain" if out <= 0.01 else "fail")
    assert r.verdict == want == "uncertain", (out, r.verdict_reasons)  # 7 of 1.18 M pixels
    ndvi = run(env, "spectral_index", scene=S2, index="NDVI")
    assert ndvi.verdict == "pass" and ndvi.verdict_reasons == []
    stats = run(env, "raster_stats", name=f"ndvi_{S2}")
    assert stats.verdict == "pass"
    assert json.dumps(stats.tool_calls)  # JSON-safe for Ray / trajectories
