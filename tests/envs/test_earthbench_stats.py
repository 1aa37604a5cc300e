"""Execute mode of Earth-Agent's batch and conditional statistics (envs/tools/earthagent_stats.py) on small
GeoTIFFs the test writes in Earth-Bench's layout, each value computed by hand here; and every reference call
of these tools in Earth-Bench's extracted_tool_calls_GT.json run on synthetic rasters under its file names:
accepted, answered in the recorded output's form."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from earthrl.envs.core.env import RSEnv
from earthrl.envs.tools.earthagent_stats import EXECUTE as STATS
from tests.envs.test_earthbench_execute import NODATA, TASK, D, O, step, value
from tests.paths import EARTHBENCH as EB
from tests.paths import EARTHBENCH_MISSING

N = NODATA
FILES = {  # name -> bands of 2 x 2 pixels (float32 unless the name says int16); N is nodata
    "LST_2021_07_01.tif": [[[300, 310], [320, N]]],
    "LST_2021_07_02.tif": [[[305, 315], [325, 335]]],
    "TVDI_2021-07-01.tif": [[[0.2, 0.8], [0.9, 0.5]]],
    "TVDI_2021-07-02.tif": [[[0.1, 0.75], [0.6, 0.95]]],
    "SKEW.tif": [[[1, 2], [3, 10]]],
    # lst_tes_result-like: band 0 LST, band 1 emissivity (one nodata pixel), band 2 a third quantity
    "TES.tif": [[[300, 310], [320, 330]], [[0.95, 0.97], [0.94, N]], [[2, 4], [0, 5]]],
    "COUNT_int16.tif": [[[1, 2], [3, 4]]],
    "NBR.tif": [[[-0.5, -0.25], [0.1, N]]],
    "FRP.tif": [[[0, 10], [30, 50]]],
    "CHANGE.tif": [[[0, 10], [30, N]]],
    "LOSS.tif": [[[1, 0], [1, N]]],
    "NDWI_a.tif": [[[0.5, 0.2], [-0.1, 0.4]]],
    "NDWI_b.tif": [[[0.3, 0.18], [-0.5, N]]],
    "Alps_b04_int16.tif": [[[4000, 3000], [1000, N]]],
    "Alps_b06_int16.tif": [[[1000, 3000], [3000, 500]]],
}


def write_tifs(folder, files: dict) -> None:
    import rasterio
    from rasterio.transform import from_origin

    folder.mkdir(parents=True, exist_ok=True)
    for name, bands in files.items():
        arr = np.array(bands, dtype=np.int16 if "int16" in name else np.float32)
        with rasterio.open(folder / name, "w", driver="GTiff", height=arr.shape[1], width=arr.shape[2],
                           count=arr.shape[0], dtype=arr.dtype, crs="EPSG:4326",
                           transform=from_origin(10, 50, 0.01, 0.01), nodata=NODATA) as dst:
            dst.write(arr)


@pytest.fixture()
def env(tmp_path):
    write_tifs(tmp_path / "data" / "question1", FILES)
    e = RSEnv(tmp_path, tmp_path / "ws", mode="execute", toolset="earthbench")
    e.reset(TASK, "IF")
    yield e
    e.close()


def error(res, kind: str, *words: str) -> None:
    assert res.error and res.error_kind == kind, res.observation
    for w in words:
        assert w in res.observation, res.observation


L1, L2, T1, T2, TES = (f"{D}/LST_2021_07_01.tif", f"{D}/LST_2021_07_02.tif", f"{D}/TVDI_2021-07-01.tif",
                       f"{D}/TVDI_2021-07-02.tif", f"{D}/TES.tif")


def test_batch_statistics_equal_the_hand_computed_values(env):
    # adjusted Fisher-Pearson skewness of 1, 2, 3, 10: m2 = 50/4, m3 = 180/4, G1 = sqrt(n(n-1))/(n-2) m3/m2^1.5;
    # 300, 310, 320 (nodata left out) is symmetric
    g1 = math.sqrt(12) / 2 * (180 / 4) / (50 / 4) ** 1.5
    assert value(step(env, "calc_batch_image_skewness", file_list=[f"{D}/SKEW.tif", L1])) == [
        pytest.approx(g1), pytest.approx(0.0, abs=1e-12)]
    # means 310 and 320, maxima 320 and 335, minima 300 and 305 -> Earth-Agent's (mean of means, max, min)
    assert value(step(env, "calc_batch_image_mean_max_min", file_list=[L1, L2])) == [315.0, 335.0, 300.0]
    assert value(step(env, "calc_batch_image_mean_threshold", file_list=[L1, L2], threshold=312)) == 50.0
    assert value(step(env, "calc_batch_image_mean_threshold", file_list=[L1, L2], threshold=312,
                      above=False, return_type="count")) == 1
    r = step(env, "calc_batch_image_mean_threshold", file_list=[L1], threshold=312, band_index=1)
    error(r, "out_of_range", "band_index=1", "1 band(s)")
    error(step(env, "calc_batch_image_mean_threshold", file_list=[L1], threshold=1, return_type="share"),
          "out_of_range", "ratio, count")


def test_image_counts_and_ratios_over_a_pixel_threshold(env):
    # > 308: 2 of the 3 valid pixels of L1 (66.7 %), 3 of 4 of L2 (75 %); < 308: 33.3 % and 25 %
    assert value(step(env, "count_images_exceeding_threshold_ratio", image_paths=[L1, L2], value_threshold=308,
                      ratio_threshold=70)) == 1
    assert value(step(env, "count_images_exceeding_threshold_ratio", image_paths=[L1, L2], value_threshold=308,
                      ratio_threshold=60.0, mode="above", verbose="false")) == 2
    assert value(step(env, "count_images_exceeding_threshold_ratio", image_paths=[L1, L2], value_threshold=308,
                      ratio_threshold=30, mode="below")) == 1
    assert value(step(env, "average_ratio_exceeding_threshold", image_paths=[L1, L2], value_threshold=308,
                      ratio_threshold=70)) == 75.0
    assert value(step(env, "average_ratio_exceeding_threshold", image_paths=[L1, L2], value_threshold=308,
                      ratio_threshold=60)) == pytest.approx((200 / 3 + 75) / 2)
    assert value(step(env, "average_ratio_exceeding_threshold", image_paths=L1, value_threshold=308,
                      ratio_threshold=80)) == 0.0
    error(step(env, "average_ratio_exceeding_threshold", image_paths=L1, mode="over"), "out_of_range", "above, below")
    # means 310, 320: overall 315; with L1 twice 310, 310, 320: overall 313.33
    assert value(step(env, "count_images_exceeding_mean_multiplier", image_paths=[L1, L2], mean_multiplier=1.0)) == 1
    assert value(step(env, "count_images_exceeding_mean_multiplier", image_paths=[L1, L2], mean_multiplier=1.02)) == 0
    assert value(step(env, "count_images_exceeding_mean_multiplier", image_paths=[L1, L1, L2], mean_multiplier=1.0,
                      mode="below")) == 2


def test_single_image_statistics(env):
    assert value(step(env, "calc_single_image_hotspot_percentage", file_path=L2, threshold=315)) == 0.5  # 325, 335
    assert value(step(env, "count_above_threshold", file_path=L1, threshold=305)) == 2  # 310, 320; nodata not counted
    # type-7 percentiles of 305, 315, 325, 335: p50 = 320, p70 at rank 2.1 = 325 + 0.1 * 10
    assert value(step(env, "get_percentile_value_from_image", image_path=L2, percentile=50)) == 320.0
    assert value(step(env, "get_percentile_value_from_image", image_path=L2, percentile=70)) == pytest.approx(326.0)
    r = step(env, "get_percentile_value_from_image", image_path=f"{D}/COUNT_int16.tif", percentile=70)
    assert r.observation == "3"  # 3.1 rounded: an integer raster answers an integer
    # a list pools the valid pixels: 300 305 310 315 320 325 335 -> median 315
    assert value(step(env, "get_percentile_value_from_image", image_path=[L1, L2], percentile=50)) == 315.0
    error(step(env, "get_percentile_value_from_image", image_path=L2, percentile=0), "out_of_range", "1 and 100")
    # bands 1 / 3 (1-based) of TES: 300/2, 310/4, 330/5 (the 0 denominator left out)
    assert value(step(env, "image_division_mean", image_path1=TES, band1=1, band2=3)) == pytest.approx(
        (150 + 77.5 + 66) / 3)
    assert value(step(env, "image_division_mean", image_path1=L2, image_path2=L1)) == pytest.approx(
        (305 / 300 + 315 / 310 + 325 / 320) / 3)
    error(step(env, "image_division_mean", image_path1=TES, band1=0), "out_of_range", "band1=0", "numbered from 1")
    # TVDI > 0.7 and LST > 305 where both valid: (0.8, 310), (0.9, 320) of 3 pixels
    assert value(step(env, "calculate_intersection_percentage", path1=T1, threshold1=0.7, path2=L1,
                      threshold2=305)) == pytest.approx(200 / 3)


def test_threshold_value_mean_pairs_files_by_date(env):
    # LST > 312: 320 on 07-01 (TVDI 0.9); 315, 325, 335 on 07-02 (TVDI 0.75, 0.6, 0.95); path2 given in reverse
    assert value(step(env, "calc_threshold_value_mean", path1=[L1, L2], path2=[T2, T1],
                      threshold=312)) == pytest.approx((0.9 + 0.75 + 0.6 + 0.95) / 4)
    # as Earth-Bench's references call it: TVDI > 0.7 selects LST 310, 320 (07-01) and 315, 335 (07-02)
    assert value(step(env, "calc_threshold_value_mean", path1=[T1, T2], path2=[L1, L2], threshold=0.7)) == 320.0
    assert value(step(env, "calc_threshold_value_mean", path1=T1, path2=L1, threshold=0.95)) is None  # no pixel
    r = step(env, "calc_threshold_value_mean", path1=[f"{D}/SKEW.tif", T1], path2=[L1])
    error(r, "schema_error", "path1, path2", "(2 and 1)")


def test_band_conditions_of_one_image(env):
    # band 0 > 305: 310, 320, 330; band 1 < 0.96: 0.95, 0.94 -> only pixel (1, 0); of band 0's 4 valid pixels
    assert value(step(env, "calculate_multi_band_threshold_ratio", image_path=TES,
                      band_conditions=[[0, 305, "above"], [1, 0.96, "below"]])) == 25.0
    # the denominator is the first condition's band: band 1 has 3 valid pixels
    assert value(step(env, "calculate_multi_band_threshold_ratio", image_path=TES,
                      band_conditions=[[1, 0.96, "below"], [0, 305, "above"]])) == pytest.approx(100 / 3)
    # band 0 > 305 and band 2 > 1: pixels (0, 1) and (1, 1)
    assert value(step(env, "count_pixels_satisfying_conditions", image_path=TES,
                      band_conditions=[[0, 305, "above"], [2, 1, "above"]])) == 2
    error(step(env, "count_pixels_satisfying_conditions", image_path=TES, band_conditions=[[5, 1, "above"]]),
          "out_of_range", "band_index 5", "3 band(s)")
    error(step(env, "count_pixels_satisfying_conditions", image_path=TES, band_conditions=[[0, 1]]),
          "schema_error", "band_conditions: give [[band_index, threshold")
    # 'above' is >= here: band 0 >= 310 -> band 2 values 4, 0, 5; below 310 -> 2; band 1 over 310+ -> 0.97, 0.94
    cond = {"image_path": TES, "condition_band_index": 0, "condition_threshold": 310}
    assert value(step(env, "calculate_band_mean_by_condition", **cond, target_band_index=2)) == 3.0
    assert value(step(env, "calculate_band_mean_by_condition", **cond, condition_mode="below",
                      target_band_index=2)) == 2.0
    assert value(step(env, "calculate_band_mean_by_condition", **cond, target_band_index=1)) == pytest.approx(0.955)


def test_loss_shares_of_binary_and_ndwi_maps(env):
    # two of the three valid pixels are 1
    assert value(step(env, "calc_extreme_snow_loss_percentage_from_binary_map",
                      binary_map_path=f"{D}/LOSS.tif")) == pytest.approx(2 / 3)
    # water in a (NDWI > 0) and valid in b: 0.5 -> 0.3 (drop 40 %) and 0.2 -> 0.18 (10 %): 1 of 2 drops >= 30 %
    assert value(step(env, "calc_severe_water_loss_percentage", ndwi_a_path=f"{D}/NDWI_a.tif",
                      ndwi_b_path=f"{D}/NDWI_b.tif", drop_ratio=0.3)) == 0.5
    error(step(env, "calc_severe_water_loss_percentage", ndwi_a_path=f"{D}/NDWI_a.tif",
               ndwi_b_path=f"{D}/NDWI_b.tif", drop_ratio=30), "out_of_range", "drop_ratio=30")


def test_maps_are_written_and_read_back(env):
    r = step(env, "calc_batch_image_hotspot_tif", file_list=[f"{D}/NBR.tif"], threshold=-0.3,
             output_path_list=["question1/hot.tif"])
    assert value(r) == [f"Result save at {O}/hot.tif"]
    # -0.5 < -0.3 -> 1; -0.25, 0.1 -> 0; nodata stays NaN
    assert value(step(env, "calc_batch_image_sum", file_list=[f"{O}/hot.tif"])) == [1.0]
    assert value(step(env, "calc_batch_image_mean", file_list=["hot.tif"]))[0] == pytest.approx(1 / 3)
    error(step(env, "calc_batch_image_hotspot_tif", file_list=[L1, L2], threshold=1, output_path_list=["a.tif"]),
          "schema_error", "output_path_list: give one output path per file")
    error(step(env, "calc_batch_image_hotspot_tif", input_nir_path=L1, input_swir_path=L2, output_path="x.tif"),
          "schema_error", "file_list: give the list")
    # change >= 10 MW: 10, 30 -> 1 (nodata -> 0)
    r = step(env, "create_fire_increase_map", change_image_path="CHANGE.tif", output_path=f"{O}/inc.tif", threshold=10)
    assert r.observation == f"Result save at {O}/inc.tif"
    assert value(step(env, "calc_batch_image_sum", file_list=["inc.tif"])) == [2.0]
    assert value(step(env, "count_above_threshold", file_path=f"{O}/inc.tif", threshold=0.5)) == 2
    # p50 of the positive pixels 10, 30, 50 is 30: 30 and 50 are fire-prone
    r = step(env, "identify_fire_prone_areas", file_path=f"{D}/FRP.tif", output_path=f"{O}/prone.tif",
             threshold_percentile=50)
    assert value(r) == [f"Result save at {O}/prone.tif", 30.0]
    assert value(step(env, "calc_batch_image_sum", file_list=["prone.tif"])) == [2.0]


def test_batch_ndsi_writes_one_index_per_pair(env):
    g, s = f"{D}/Alps_b04_int16.tif", f"{D}/Alps_b06_int16.tif"
    r = step(env, "calculate_batch_ndsi", green_file_list=[g, s], swir_file_list=[s, g],
             output_path_list=["question1/n1.tif", f"{O}/n2.tif"])
    assert value(r) == [f"Result save at {O}/n1.tif", f"Result save at {O}/n2.tif"]
    # (G - S)/(G + S): 3000/5000, 0, -2000/4000, nodata -> NaN; the swapped pair is its negative
    assert value(step(env, "calc_batch_image_sum", file_list=["n1.tif", "n2.tif"])) == [
        pytest.approx(0.1), pytest.approx(-0.1)]
    error(step(env, "calculate_batch_ndsi", green_file_list=[g], swir_file_list=[s, g], output_path_list=["a.tif"]),
          "schema_error", "(got 1, 2, 1)")
    # the single-pair tool gives the same image under its output_filename argument
    r = step(env, "calculate_ndsi", input_green_path=g, input_swir_path=s, output_path="question1/n3.tif")
    assert r.observation == f"Result save at {O}/n3.tif"
    assert value(step(env, "calc_batch_image_sum", file_list=["n3.tif"])) == [pytest.approx(0.1)]


# -- Earth-Bench's reference calls --------------------------------------------------------------

#: reference calls that cannot run, and the error they get: they pass another tool's arguments
NOT_RUNNABLE = {
    ("question127", "calc_batch_image_hotspot_tif"): "file_list: give the list of image paths",
    ("question156", "calc_batch_image_skewness"): "file_list: give the list of image paths",
}
#: reference calls whose recorded output is not a form the definition returns (a dict of dates)
OTHER_FORM = {("question171", "calc_severe_water_loss_percentage")}


def _tifs(value) -> list[str]:
    if isinstance(value, str):
        return [value] if value.lower().endswith(".tif") else []
    if isinstance(value, list):
        return [t for v in value for t in _tifs(v)]
    return []


def _same_form(ours, recorded) -> bool:
    """``ours`` answers in ``recorded``'s form: a number for a number (an int for an int), a list as long,
    written files named as recorded (a one-element list equals its element)."""
    if isinstance(recorded, str) or (isinstance(recorded, list) and recorded and isinstance(recorded[0], str)):
        rec = [recorded] if isinstance(recorded, str) else recorded
        ours = ours if isinstance(ours, list) else [ours]
        ours = [o for o in ours if isinstance(o, str)]
        name = re.compile(r"[^/\\ ]+\.tif$")
        return len(ours) == len(rec) and all(
            o.startswith("Result save at ") and name.search(o).group() == name.search(r).group()
            for o, r in zip(ours, rec))
    if isinstance(recorded, list):
        return isinstance(ours, list) and len(ours) == len(recorded)
    if isinstance(recorded, bool) or not isinstance(recorded, (int, float)):
        return False
    return isinstance(ours, int) if isinstance(recorded, int) else isinstance(ours, float)


def test_every_reference_call_runs_on_rasters_under_its_file_names_in_the_recorded_form(tmp_path):
    if not (EB / "extracted_tool_calls_GT.json").is_file():
        pytest.skip(EARTHBENCH_MISSING)
    refs = json.loads((EB / "extracted_tool_calls_GT.json").read_text())
    calls = [(q["question_index"], c) for q in refs for c in q["tool_calls"] if c["name"] in STATS]
    # 4 bands (band_conditions use band 3), values on both sides of the recorded thresholds, no 0 denominator
    bands = [[[0.1, 0.9], [305.0, 320.0]], [[0.9, 0.95], [0.97, 1.0]], [[2.0, 4.0], [1.0, 5.0]],
             [[0.05, 0.1], [0.2, 0.07]]]
    ran = same = 0
    for i, (q, call) in enumerate(calls):
        root = tmp_path / str(i)
        inputs = [v for k, v in call["input"].items() if "output" not in k]
        write_tifs(root / "data" / q, {n.replace("\\", "/").split("/")[-1]: bands for n in _tifs(inputs)})
        e = RSEnv(root, root / "ws", mode="execute", toolset="earthbench")
        e.reset(TASK.model_copy(update={"data": [q]}), "IF")
        r = e.step("<tool_call>" + json.dumps({"name": call["name"], "arguments": call["input"]}) + "</tool_call>")
        e.close()
        if (q, call["name"]) in NOT_RUNNABLE:
            error(r, "schema_error", NOT_RUNNABLE[q, call["name"]])
            continue
        assert not r.error, (q, call["name"], r.observation)
        ran += 1
        if (q, call["name"]) not in OTHER_FORM:
            try:
                ours = json.loads(r.observation)
            except json.JSONDecodeError:
                ours = r.observation
            assert _same_form(ours, call["output"]), (q, call["name"], r.observation, call["output"])
            same += 1
    assert (len(calls), ran, same) == (65, 63, 62)
