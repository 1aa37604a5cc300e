"""Execute mode of Earth-Agent's thermal, water-vapour, cloud-mask, turbidity and TVDI tools
(envs/tools/earthagent_thermal.py) on small GeoTIFFs in Earth-Bench's layout, each value computed by
hand (or by the formula written out) here; and every reference call of these tools in
``extracted_tool_calls_GT.json`` accepted and answered in the recorded format."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import AnswerSpec, TaskSpec
from earthrl.envs.tools.earthagent_thermal import EXECUTE as THERMAL
from tests.envs.conftest import execute_env
from tests.paths import EARTHBENCH as EB
from tests.paths import EARTHBENCH_MISSING

D, O = "benchmark/data/question1", "benchmark/out/question1"
C2 = 14387.7  # µm·K


def task(n: int = 1) -> TaskSpec:
    return TaskSpec(id=f"earthbench/{n}", question={"IF": "q", "AP": "q"}, data=[f"question{n}"], reference=[],
                    answer=AnswerSpec(kind="choice", value="A", options={"A": "a", "B": "b"}), skill="change_trend",
                    template="earthbench", toolset="full", split="test")


def tif(folder, name, rows, nodata=-9999.0):
    import rasterio
    from rasterio.transform import from_origin

    arr = np.array(rows, dtype=np.float32)
    with rasterio.open(folder / name, "w", driver="GTiff", height=arr.shape[0], width=arr.shape[1], count=1,
                       dtype="float32", crs="EPSG:4326", transform=from_origin(10, 50, 0.01 * 2 / arr.shape[1],
                                                                               0.01 * 2 / arr.shape[0]),
                       nodata=nodata) as dst:
        dst.write(arr, 1)


@pytest.fixture()
def folder(eb_folder):
    return eb_folder


@pytest.fixture()
def env(tmp_path, folder):
    yield from execute_env(tmp_path, task())


def step(env, name, **arguments):
    return env.step("<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>")


def pixels(env, out):
    """The raster an earlier call wrote, as the episode holds it (NaN nodata)."""
    return env.registry.array(out).astype(np.float64)


def test_cloud_mask_keeps_the_pixels_whose_qa_bits_0_to_4_are_clear(env, folder):
    tif(folder, "SR_B3.tif", [[100, 200], [300, 400]])
    # QA_PIXEL: 21824 clear land (bits 6, 8, 10, 12, 14), 22280 cloud (bit 3 set: 22280 & 31 = 8),
    # 1 fill (bit 0), 21952 clear water (bit 7 added)
    tif(folder, "QA_PIXEL.tif", [[21824, 22280], [1, 21952]], nodata=None)
    r = step(env, "apply_cloud_mask", sr_band_path=f"{D}/SR_B3.tif", qa_pixel_path=f"{D}/QA_PIXEL.tif",
             output_path=f"{O}/SR_B3_cloud_masked.tif")
    assert r.observation == f"Result save at {O}/SR_B3_cloud_masked.tif"
    np.testing.assert_array_equal(pixels(env, "SR_B3_cloud_masked"), [[100, np.nan], [np.nan, 400]])
    assert json.loads(step(env, "calc_batch_image_mean", file_list=["SR_B3_cloud_masked.tif"]).observation) == [250.0]
    r = step(env, "apply_cloud_mask", input_nir_path=f"{D}/SR_B3.tif", input_swir_path=f"{D}/SR_B3.tif",
             output_path="x.tif")
    assert r.error and r.error_kind == "schema_error" and "sr_band_path" in r.observation


def test_turbidity_is_a_clamped_linear_or_log_function_of_the_red_band(env, folder):
    tif(folder, "red.tif", [[0.1, 0.2], [-0.3, 0.4]])
    step(env, "calculate_water_turbidity_ntu", input_red_path=f"{D}/red.tif", method="linear", a=2, b=1,
         output_filename=f"{O}/ntu.tif")  # 2R + 1: 1.2, 1.4, 0.4, 1.8
    np.testing.assert_allclose(pixels(env, "ntu"), [[1.2, 1.4], [0.4, 1.8]], rtol=1e-6)
    step(env, "calculate_water_turbidity_ntu", input_red_path=f"{D}/red.tif", method="linear", a=10, b=-2,
         output_path=f"{O}/ntu2.tif")  # 10R - 2: -1 -> 0, 0, -5 -> 0, 2
    np.testing.assert_allclose(pixels(env, "ntu2"), [[0, 0], [0, 2]], atol=1e-6)
    step(env, "calculate_water_turbidity_ntu", input_red_path=f"{D}/red.tif", method="log", a=-1, b=0,
         output_path=f"{O}/ntu3.tif")  # -ln(max(R, 1e-6)): 2.3026, 1.6094, 13.8155, 0.9163
    np.testing.assert_allclose(pixels(env, "ntu3"), [[2.302585, 1.609438], [13.815511, 0.916291]], rtol=1e-6)
    # the defaults a = 1, b = 0: the red value itself, negatives 0
    step(env, "calculate_water_turbidity_ntu", input_red_path=f"{D}/red.tif", output_path=f"{O}/ntu4.tif")
    np.testing.assert_allclose(pixels(env, "ntu4"), [[0.1, 0.2], [0, 0.4]], rtol=1e-6)
    r = step(env, "calculate_water_turbidity_ntu", file_list=[f"{O}/ntu.tif"])
    assert r.error and r.error_kind == "schema_error" and "input_red_path" in r.observation
    r = step(env, "calculate_water_turbidity_ntu", input_red_path=f"{D}/red.tif", method="cubic", output_path="y.tif")
    assert r.error and r.error_kind == "out_of_range" and "linear, power, log" in r.observation


def test_single_channel_lst_uses_the_ndvi_emissivity_classes_and_runs_in_batches(env, folder):
    tif(folder, "bt_1.tif", [[300, 300], [300, -1]])
    tif(folder, "bt_2.tif", [[310, 310], [310, 310]])
    # NDVI (nir - red)/(nir + red + 1e-6): 0.8 -> ε 0.99, 0.1 -> 0.96, 0.5 -> 0.97 + 0.0015
    tif(folder, "red.tif", [[0.1, 0.45], [0.25, 0.25]])
    tif(folder, "nir.tif", [[0.9, 0.55], [0.75, 0.75]])
    r = step(env, "lst_single_channel", bt_path=[f"{D}/bt_1.tif", f"{D}/bt_2.tif"], red_path=[f"{D}/red.tif"] * 2,
             nir_path=[f"{D}/nir.tif"] * 2, output_path=["question1/lst_1.tif", "question1/lst_2.tif"])
    assert json.loads(r.observation) == [f"Result save at {O}/lst_1.tif", f"Result save at {O}/lst_2.tif"]

    def lst(bt, eps):
        return bt / (1 + (10.9 * bt / C2) * math.log(eps))
    ndvi = [(0.9 - 0.1) / (1 + 1e-6), (0.55 - 0.45) / (1 + 1e-6), (0.75 - 0.25) / (1 + 1e-6)]
    eps = [0.99, 0.96, 0.97 + 0.003 * ndvi[2]]
    np.testing.assert_allclose(pixels(env, "lst_1"), [[lst(300, eps[0]), lst(300, eps[1])],
                                                     [lst(300, eps[2]), np.nan]], rtol=1e-6)
    assert pixels(env, "lst_2")[1, 1] == pytest.approx(lst(310, eps[2]), rel=1e-6)
    assert lst(300, 0.99) == pytest.approx(300.687, abs=0.001)  # 300/(1 - 0.22728·0.01005): 0.69 K above BT
    r = step(env, "lst_single_channel", bt_path=[f"{D}/bt_1.tif", f"{D}/bt_2.tif"], red_path=f"{D}/red.tif",
             nir_path=f"{D}/nir.tif", output_path=["a.tif", "b.tif"])
    assert r.error and r.error_kind == "schema_error" and r.observation.count("red_path") == 1


def test_multi_channel_and_split_window_lst(env, folder):
    tif(folder, "BT_31.tif", [[300, 300], [300, 300]])
    tif(folder, "BT_32.tif", [[298, 298], [298, 298]])
    tif(folder, "Emis31.tif", [[250, 250], [250, 250]])  # 250·0.002 + 0.49 = 0.99
    tif(folder, "Emis32.tif", [[245, 245], [245, 245]])  # 0.98
    step(env, "lst_multi_channel", band31_path=f"{D}/BT_31.tif", band32_path=f"{D}/BT_32.tif", output_path="m.tif")
    # 1.022·300 + 0.47·2 + 0.43
    np.testing.assert_allclose(pixels(env, "m"), 307.97, rtol=1e-6)
    kw = dict(band31_path=f"{D}/BT_31.tif", band32_path=f"{D}/BT_32.tif", emissivity31_path=f"{D}/Emis31.tif",
              emissivity32_path=f"{D}/Emis32.tif")
    step(env, "split_window", parameter="LST", output_path="sw.tif", **kw)
    # T = 26.85 °C, ΔT = 2, ε = 0.985, Δε = 0.01: 0.268 + 36.9993 + 0.131929 + 49.824·(0.015 + 0.01) + 273.15
    np.testing.assert_allclose(pixels(env, "sw"), 311.794829, rtol=1e-6)
    step(env, "split_window", parameter="pwv", output_path="pwv.tif", **kw)
    np.testing.assert_allclose(pixels(env, "pwv"), 2 / (300 * 0.985) * 100, rtol=1e-6)
    r = step(env, "split_window", parameter="NDVI", output_path="z.tif", **kw)
    assert r.error and r.error_kind == "out_of_range" and "LST or PWV" in r.observation


def test_day_night_lst_resizes_the_emissivity_and_masks_implausible_temperatures(env, folder):
    tif(folder, "BT_Day.tif", [[300, 330], [290, 300]])
    tif(folder, "BT_Night.tif", [[280, 280], [280, 280]])
    tif(folder, "Emis_Day.tif", [[245, 250]])  # 1 x 2 -> rows repeated: 0.98, 0.99
    tif(folder, "Emis_Night.tif", [[245, 250]])
    step(env, "modis_day_night_lst", BT_day_path=f"{D}/BT_Day.tif", BT_night_path=f"{D}/BT_Night.tif",
         Emis_day_path=f"{D}/Emis_Day.tif", Emis_night_path=f"{D}/Emis_Night.tif", output_path="dn.tif")

    def lst(bt, eps):
        return bt / (1 + (11.0 * bt / C2) * math.log(eps))
    # 330 K is outside 270-325 K -> NaN
    np.testing.assert_allclose(pixels(env, "dn"), [[lst(300, 0.98), np.nan], [lst(290, 0.98), lst(300, 0.99)]],
                               rtol=1e-6)


def test_tes_and_ttm_lst(env, folder):
    tif(folder, "BT_10.tif", [[300.0, 300.0], [0, 300.0]])
    tif(folder, "BT_11.tif", [[300.5, 250.0], [0, 300.0]])
    tif(folder, "BT_12.tif", [[300.2, 260.0], [0, 350.0]])
    bands = [f"{D}/BT_1{i}.tif" for i in range(3)]
    step(env, "temperature_emissivity_separation", tir_band_paths=bands, representative_band_index=1,
         output_path="tes.tif")

    def lst(bt, eps):
        return bt / (1 + (10.6 * bt / C2) * math.log(eps))
    # spreads 0.5 -> ε 0.982 - 0.036 = 0.946; 50 -> clipped 0.85; reference band 0 K -> NaN; 50 -> 0.85
    np.testing.assert_allclose(pixels(env, "tes"), [[lst(300.5, 0.946), lst(250, 0.85)],
                                                    [np.nan, lst(300, 0.85)]], rtol=1e-6)
    r = step(env, "temperature_emissivity_separation", tir_band_paths=bands, representative_band_index=3,
             output_path="t.tif")
    assert r.error and r.error_kind == "out_of_range" and "0 to 2" in r.observation
    step(env, "ttm_lst", tir_band_paths=bands, wavelengths=[8.3, 8.65, 9.1], output_path="ttm.tif")
    # 0.3·300 + 0.3·300.5 + 0.4·300.2 + 2; a band outside (240, 340) K -> NaN
    np.testing.assert_allclose(pixels(env, "ttm"), [[302.23, 0.3 * 300 + 0.3 * 250 + 0.4 * 260 + 2], [np.nan, np.nan]],
                               rtol=1e-6)
    assert math.isnan(pixels(env, "ttm")[1, 0]) and math.isnan(pixels(env, "ttm")[1, 1])


def test_ati_resamples_albedo_to_the_day_grid(env, folder):
    tif(folder, "Day.tif", [[310, 305], [300, 320]])
    tif(folder, "Night.tif", [[300, 300], [300, 300]])
    tif(folder, "albedo.tif", [[0.2]])  # one pixel over the same extent: bilinear gives 0.2 everywhere
    step(env, "ATI", day_temp_path=f"{D}/Day.tif", night_temp_path=f"{D}/Night.tif", albedo_path=f"{D}/albedo.tif",
         output_path="ati.tif")
    # (1 - 0.2)/ΔT: 0.8/10, 0.8/5, ΔT = 0 -> NaN, 0.8/20
    np.testing.assert_allclose(pixels(env, "ati"), [[0.08, 0.16], [np.nan, 0.04]], rtol=1e-6)


def test_band_ratio_water_vapour(env, folder):
    for band, v in {"2": 0.3, "5": 0.5, "17": 0.25, "19": 0.2}.items():
        tif(folder, f"Reflectance_{band}.tif", [[v, v], [v, v]])
    tif(folder, "Reflectance_18.tif", [[0.2, 0.4], [0.1, -9999.0]])  # -9999: nodata
    step(env, "band_ratio", **{f"sur_refl_b{b:02d}_path": f"{D}/Reflectance_{b}.tif" for b in (2, 5, 17, 18, 19)},
         output_path="pwv.tif")
    window = 0.3 + (0.5 - 0.3) / (1.240 - 0.865) * (0.936 - 0.865)  # 0.337867
    # -ln(ρ18/window)/0.03; ρ18 above the window -> negative -> 0; band 18 nodata -> NaN
    np.testing.assert_allclose(pixels(env, "pwv"), [[-math.log(0.2 / window) / 0.03, 0],
                                                    [-math.log(0.1 / window) / 0.03, np.nan]], rtol=1e-5)


def tvdi_loop(ndvi, lst):
    """Earth-Agent's compute_tvdi written out as its loop over 100 NDVI intervals (test reference)."""
    from scipy.stats import linregress

    n, t = ndvi * 1e-4, lst * 0.02
    valid = (n >= 0) & (n <= 1) & (t > 0)
    x, y = n[valid], t[valid]
    bins = np.linspace(x.min(), x.max(), 101)
    c, hi, lo = [], [], []
    for i in range(100):
        m = (x >= bins[i]) & (x < bins[i + 1])
        if m.any():
            c.append((bins[i] + bins[i + 1]) / 2)
            hi.append(y[m].max())
            lo.append(y[m].min())
    d, w = linregress(c, hi), linregress(c, lo)
    out = np.clip((t - (n * w.slope + w.intercept)) / ((n * d.slope + d.intercept) - (n * w.slope + w.intercept)), 0, 1)
    return np.where(valid, out, np.nan)


def test_tvdi_earth_agent_binning_and_earthrl_conventions(env, folder):
    i, j = np.mgrid[0:20, 0:20].astype(np.float64)
    ndvi = 0.1 + 0.04 * j  # 0.10 .. 0.86 by column
    tif(folder, "NDVI.tif", ndvi)
    tif(folder, "LST.tif", 290 + i)  # 290 .. 309 K by row: flat edges 309 and 290
    for edges in ("earth_agent", "earthrl"):
        step(env, "compute_tvdi", ndvi_path=f"{D}/NDVI.tif", lst_path=f"{D}/LST.tif", output_path=f"t_{edges}.tif",
             edges=edges)
        np.testing.assert_allclose(pixels(env, f"t_{edges}"), i / 19, atol=1e-5)
    # a dry edge falling with NDVI, a water pixel (NDVI < 0) and a nodata LST
    lst = 290 + i * (1.2 - ndvi)
    ndvi[0, 0], lst[5, 5] = -0.2, -9999.0
    tif(folder, "NDVI2.tif", ndvi)
    tif(folder, "LST2.tif", lst)
    r = step(env, "compute_tvdi", ndvi_path=f"{D}/NDVI2.tif", lst_path=f"{D}/LST2.tif", output_path="t2.tif")
    assert r.observation == f"Result save at {O}/t2.tif"
    ref = tvdi_loop(ndvi, np.where(lst < 0, np.nan, lst))
    got = pixels(env, "t2")
    assert math.isnan(got[0, 0]) and math.isnan(got[5, 5])
    np.testing.assert_allclose(got, ref, atol=1e-5)
    # fewer than 100 valid pixels: Earth-Agent writes an all-NaN raster
    tif(folder, "small.tif", [[0.2, 0.3], [0.4, 0.5]])
    step(env, "compute_tvdi", ndvi_path=f"{D}/small.tif", lst_path=f"{D}/small.tif", output_path="t3.tif")
    assert np.isnan(pixels(env, "t3")).all()
    r = step(env, "compute_tvdi", ndvi_path=f"{D}/NDVI.tif", lst_path=f"{D}/LST.tif", output_path="t4.tif",
             edges="sandholt")
    assert r.error and r.error_kind == "out_of_range" and "earth_agent" in r.observation


def test_lst_statistics_over_ndvi_classes(env, folder):
    tif(folder, "b4.tif", [[0.1, 0.45], [0.25, 0.0]])
    tif(folder, "b5.tif", [[0.9, 0.55], [0.75, 0.0]])  # NDVI 0.8, 0.1, 0.5, NaN (0/0)
    tif(folder, "lst.tif", [[300, 310], [320, 330]])
    tif(folder, "lst2.tif", [[302, 312], [np.nan, 332]])
    kw = dict(red_path=f"{D}/b4.tif", nir_path=f"{D}/b5.tif", lst_path=f"{O}/lst.tif")
    assert json.loads(step(env, "calculate_max_lst_by_ndvi", ndvi_threshold=0.5, mode="above", **kw).observation) == 320
    assert json.loads(step(env, "calculate_max_lst_by_ndvi", ndvi_threshold=0.5, mode="below", **kw).observation) == 310
    r = step(env, "calculate_max_lst_by_ndvi", ndvi_threshold=0.9, mode="above", **kw)
    assert r.error and r.error_kind == "empty_raster"
    # one set: NDVI >= 0.5 -> 300, 320; two sets pooled: 300, 320, 302 (NaN LST left out) -> 922/3
    one = dict(red_paths=f"{D}/b4.tif", nir_paths=f"{D}/b5.tif", lst_paths=f"{O}/lst.tif", ndvi_threshold=0.5,
               mode="above")
    assert json.loads(step(env, "calculate_mean_lst_by_ndvi", **one).observation) == 310
    two = dict(red_paths=[f"{D}/b4.tif"] * 2, nir_paths=[f"{D}/b5.tif"] * 2, lst_paths=["lst.tif", "lst2.tif"],
               ndvi_threshold=0.5, mode="above")
    assert json.loads(step(env, "calculate_mean_lst_by_ndvi", **two).observation) == pytest.approx(922 / 3)
    r = step(env, "calculate_mean_lst_by_ndvi", **{**two, "lst_paths": ["lst.tif"]})
    assert r.error and r.error_kind == "schema_error" and "[2, 2, 1]" in r.observation


# -- every recorded call ----------------------------------------------------------------------

EXACT = 328


def _said(text: str) -> str:
    """``Result save(d) at …/<file>`` -> the file name."""
    return text.rsplit("/", 1)[-1]


def test_every_recorded_call_of_these_tools_is_accepted_and_answers_in_the_recorded_format(tmp_path):
    """Each of Earth-Bench's 450 reference calls of the 13 tools runs on synthetic 2 x 2 rasters named
    as the call names them: a raster tool answers ``Result save at benchmark/out/questionN/<file>``
    (a list of them for a batch, as recorded), a statistic a number. Refused, as they must be: the 7
    ``apply_cloud_mask`` calls passing ``calculate_ndwi``'s arguments, the 14 turbidity calls passing
    a ``file_list`` of outputs and the 6 batches whose lists differ in length (``schema_error``); 2 calls
    longer than an action may be are a ``parse_error``: 421 run, and 328 answer the recorded text itself."""
    if not (EB / "extracted_tool_calls_GT.json").is_file():
        pytest.skip(EARTHBENCH_MISSING)
    gt = json.loads((EB / "extracted_tool_calls_GT.json").read_text())
    calls = [(int(t["question_index"].removeprefix("question")), c) for t in gt for c in t["tool_calls"]
             if c["name"] in THERMAL]
    assert len(calls) == 450
    outcome, exact = Counter(), 0
    for n, c in calls:
        folder = tmp_path / "data" / f"question{n}"
        folder.mkdir(parents=True, exist_ok=True)
        names = {str(v).strip().replace("\\", "/").rsplit("/", 1)[-1] for k, vs in c["input"].items()
                 if "output" not in k for v in (vs if isinstance(vs, list) else [vs]) if str(v).strip().endswith(".tif")}
        for name in names - {p.name for p in folder.iterdir()}:  # NIR "b5": NDVI 0.8, 0.8, 0, -0.6
            tif(folder, name, [[2.25, 4.5], [0.75, 0.25]] if "b5" in name else [[0.25, 0.5], [0.75, 1.0]])
        e = RSEnv(tmp_path, tmp_path / "ws" / str(len(outcome)), mode="execute", toolset="earthbench")
        e.reset(task(n), "IF")
        r = step(e, c["name"], **c["input"])
        e.close()
        if r.error:
            outcome[(c["name"], r.error_kind)] += 1
            continue
        try:
            got = json.loads(r.observation)
        except json.JSONDecodeError:
            got = r.observation
        want = c["output"]
        if isinstance(want, int | float):
            assert isinstance(got, int | float) or got is None
        else:
            assert type(got) is type(want), (c, r.observation)
            outs = c["input"]["output_path"] if "output_path" in c["input"] else c["input"]["output_filename"]
            outs = outs if isinstance(outs, list) else [outs]
            lines = got if isinstance(got, list) else [got]
            assert len(lines) == len(outs) == (len(want) if isinstance(want, list) else 1)
            assert lines == [f"Result save at benchmark/out/question{n}/{_said(o)}" for o in outs]
            exact += got == want
        outcome[(c["name"], "ok")] += 1
    errors = {k: v for k, v in outcome.items() if k[1] != "ok"}
    assert errors == {("apply_cloud_mask", "schema_error"): 7, ("calculate_water_turbidity_ntu", "schema_error"): 14,
                      # batches whose lists differ in length in the recording (e.g. question 1: 92 NDVI, 91 LST)
                      ("compute_tvdi", "schema_error"): 1, ("lst_single_channel", "schema_error"): 1,
                      ("lst_multi_channel", "schema_error"): 2, ("ATI", "schema_error"): 2,
                      # one action of 48,189 / 42,764 characters (questions 18, 34), over the env's 32,000
                      ("band_ratio", "parse_error"): 1, ("split_window", "parse_error"): 1}
    assert sum(outcome.values()) - sum(errors.values()) == 421
    # the recorded text itself, where the recording names the call's own output path with "save"
    # (others read "Result saved at", or name another date's file)
    assert exact == EXACT, exact
