"""Execute mode on Earth-Bench's layout (envs/tools/earthagent_rasters.py, earthagent_numbers.py,
earthagent_files.py): Earth-Agent's computational tools on small GeoTIFFs the test writes in
``<tasks.data>/data/questionN``, each value computed by hand here; the model tools answer replay_only; a
scripted reference-like workflow runs through the env worker; the launcher's folder check."""

from __future__ import annotations

import asyncio
import json
import math
import re

import numpy as np
import pytest

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.pool import EnvPool, EnvWorker
from earthrl.envs.core.tasks import AnswerSpec, TaskSpec
from earthrl.envs.errors import ConfigError
from earthrl.envs.tools.earthagent import EXECUTE, MODEL_TOOLS, SPECS
from earthrl.launch.job_inputs import load_tasks
from tests.conftest import InProcessActor
from tests.paths import EARTHBENCH as EB
from tests.paths import EARTHBENCH_MISSING

NODATA = -9999.0
D = "benchmark/data/question1"
O = "benchmark/out/question1"
FILES = {  # 2 x 2 float32 rasters; NIR's last pixel is nodata
    "Lake A_B5_2020.tif": [[0.6, 0.5], [0.4, NODATA]],   # NIR
    "Lake A_B6_2020.tif": [[0.2, 0.5], [0.6, 0.1]],      # SWIR
    "LST_2019.tif": [[300.0, 310.0], [320.0, 330.0]],
    "LST_2020.tif": [[302.0, 312.0], [322.0, 336.0]],
}
TASK = TaskSpec(id="earthbench/1", question={"IF": "Is the LST trend positive?", "AP": "LST trend?"},
                data=["question1"], reference=[], answer=AnswerSpec(kind="choice", value="A",
                                                                   options={"A": "yes", "B": "no"}),
                skill="change_trend", template="earthbench", toolset="full", split="test")


def write_folder(root):
    import rasterio
    from rasterio.transform import from_origin

    folder = root / "data" / "question1"
    folder.mkdir(parents=True)
    for name, rows in FILES.items():
        with rasterio.open(folder / name, "w", driver="GTiff", height=2, width=2, count=1, dtype="float32",
                           crs="EPSG:4326", transform=from_origin(10, 50, 0.01, 0.01), nodata=NODATA) as dst:
            dst.write(np.array(rows, dtype=np.float32), 1)
    return folder


@pytest.fixture()
def env(tmp_path):
    write_folder(tmp_path)
    e = RSEnv(tmp_path, tmp_path / "ws", mode="execute", toolset="earthbench")
    e.reset(TASK, "IF")
    yield e
    e.close()


def step(env, name, **arguments):
    return env.step("<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>")


def value(res):
    assert not res.error, res.observation
    return json.loads(res.observation)


def test_the_first_message_names_the_data_folder_and_the_listing_is_its_files(env):
    assert value(step(env, "get_filelist", dir_path=D)) == sorted(FILES)
    assert value(step(env, "mcp-base_get_filelist", dir_path="question1")) == sorted(FILES)
    r = step(env, "get_filelist", dir_path="benchmark/data/question2")
    assert r.error and r.error_kind == "hallucinated_path" and "benchmark/data/question1" in r.observation


def test_image_statistics_equal_the_hand_computed_values_in_the_recorded_format(env):
    lst = [f"{D}/LST_2019.tif", f"{D}/LST_2020.tif"]
    # means (300+310+320+330)/4, (302+312+322+336)/4: a list, one number per file, as recorded
    r = step(env, "calc_batch_image_mean", file_list=lst)
    assert r.observation == "[315.0, 318.0]"
    assert value(step(env, "calc_single_image_mean", file_path=lst[0])) == 315.0
    assert value(step(env, "calc_batch_image_mean_mean", file_list=lst)) == 316.5
    assert value(step(env, "calc_batch_image_max", file_list=lst)) == [330.0, 336.0]
    assert value(step(env, "calc_batch_image_sum", file_list=lst)) == [1260.0, 1272.0]
    # the nodata pixel is left out: NIR mean (0.6+0.5+0.4)/3
    assert value(step(env, "calc_batch_image_mean", file_list=[f"{D}/Lake A_B5_2020.tif"]))[0] == pytest.approx(0.5)
    # pixels > 315 of 2019: 320, 330 -> 2 of 4 (a fraction, as recorded); > 305: 3 fire pixels
    assert value(step(env, "calc_batch_image_hotspot_percentage", file_list=lst[:1], threshold=315)) == [0.5]
    assert value(step(env, "calc_batch_fire_pixels", file_list=lst[:1], fire_threshold=305)) == [3]
    # Earth-Agent's threshold ratio is a percentage averaged over the images: > 315: 50 % and 50 %;
    # below_equal 310: 2/4 and 1/4 -> 37.5
    assert value(step(env, "calculate_threshold_ratio", image_paths=lst, threshold=315)) == 50.0
    assert value(step(env, "calculate_threshold_ratio", image_paths=lst, threshold=310, mode="below_equal")) == 37.5
    assert value(step(env, "calculate_threshold_ratio", image_paths=lst[0], threshold=315)) == 50.0
    r = step(env, "calculate_threshold_ratio", image_paths=lst[0], threshold=1, mode="over")
    assert r.error and r.error_kind == "out_of_range" and "above, below" in r.observation


def test_an_index_is_written_read_back_by_its_out_path_and_thresholded(env):
    r = step(env, "calculate_ndwi", input_nir_path=f"{D}/Lake A_B5_2020.tif", input_swir_path=f"{D}/Lake A_B6_2020.tif",
             output_path="question1/Lake A ndwi.tif")
    assert not r.error and r.observation == f"Result save at {O}/Lake A ndwi.tif"  # the recorded form
    # (N-S)/(N+S): 0.4/0.8 = 0.5, 0/1 = 0, -0.2/1.0 = -0.2, nodata -> NaN: mean 0.1, 1 of 3 valid pixels > 0
    assert value(step(env, "calc_batch_image_mean", file_list=[f"{O}/Lake A ndwi.tif"]))[0] == pytest.approx(0.1)
    assert value(step(env, "calculate_threshold_ratio", image_paths=f"{O}/Lake A ndwi.tif",
                      threshold=0.0)) == pytest.approx(100 / 3)
    assert env.episode_record()["artifacts"][-1]["name"] == "Lake_A_ndwi"
    # NBR = (N - S2)/(N + S2) with the same pair: identical numbers; NDSI = (G - S)/(G + S) with G = NIR file
    step(env, "calculate_nbr", input_nir_path=f"{D}/Lake A_B5_2020.tif", input_swir_path=f"{D}/Lake A_B6_2020.tif",
         output_path=f"{O}/nbr.tif")
    assert value(step(env, "calc_batch_image_max", file_list=["nbr.tif"])) == [pytest.approx(0.5)]
    step(env, "calculate_ndti", input_red_path=f"{D}/Lake A_B6_2020.tif", input_green_path=f"{D}/Lake A_B5_2020.tif",
         output_path=f"{O}/ndti.tif")  # (R - G)/(R + G): -0.5, 0, 0.2, NaN
    assert value(step(env, "calc_batch_image_sum", file_list=["ndti.tif"]))[0] == pytest.approx(-0.3)
    r = step(env, "calc_batch_image_mean", file_list=[f"{O}/never_written.tif"])
    assert r.error and r.error_kind == "hallucinated_path" and "LST_2019.tif" in r.observation


def test_pixelwise_difference_and_average(env):
    a, b = f"{D}/LST_2019.tif", f"{D}/LST_2020.tif"
    r = step(env, "calculate_tif_difference", image_a_path=a, image_b_path=b, output_filename=f"{O}/d.tif")
    assert r.observation == f"Result save at {O}/d.tif"
    assert value(step(env, "calc_batch_image_mean", file_list=[f"{O}/d.tif"])) == [3.0]  # b - a: 2, 2, 2, 6
    step(env, "subtract", img1_path=a, img2_path=b, output_path=f"{O}/s.tif")
    assert value(step(env, "calc_batch_image_max", file_list=["s.tif"])) == [-2.0]  # a - b
    step(env, "calculate_tif_average", file_list=[a, b], output_path=f"{O}/avg.tif")  # 301, 311, 321, 333
    assert value(step(env, "calc_batch_image_sum", file_list=["avg.tif"])) == [1266.0]


def test_number_and_trend_tools_equal_the_hand_computed_values(env):
    assert value(step(env, "mean", x=[279.89, 281.98, 280.2])) == pytest.approx(842.07 / 3)
    assert value(step(env, "difference", a=100, b=59.68)) == pytest.approx(40.32)
    assert value(step(env, "division", a=4, b=2)) == 0.5  # b / a, Earth-Agent's order
    assert value(step(env, "multiply", a="1.5", b=-2)) == -3.0
    assert value(step(env, "percentage_change", a=315, b=318)) == pytest.approx(300 / 315)
    assert value(step(env, "kelvin_to_celsius", kelvin=300)) == pytest.approx(26.85)
    assert value(step(env, "ceil_number", n=2.1)) == 3
    assert value(step(env, "max_value_and_index", x=[1, 5, 3])) == [5.0, 1]
    assert value(step(env, "min_value_and_index", x=[4, 2, 3])) == [2.0, 1]
    assert value(step(env, "get_list_object_via_indexes", input_list=[[1], [2], [3]], indexes=[0, 2])) == [[1], [3]]
    assert value(step(env, "coefficient_of_variation", x=[2, 4, 6])) == pytest.approx(0.5)  # std 2 (ddof 1) / 4
    assert value(step(env, "skewness", x=[1, 2, 3, 10])) == pytest.approx(  # m3 / m2^1.5, mean 4
        ((-27 - 8 - 1 + 216) / 4) / ((9 + 4 + 1 + 36) / 4) ** 1.5)
    assert value(step(env, "kurtosis", x=[1, 2, 3, 4, 5])) == pytest.approx(-1.3)  # m4/m2^2 - 3 = 6.8/4 - 3
    assert value(step(env, "compute_linear_trend", y=[315.0, 318.0, 324.0], x=[2019, 2020, 2021])) == pytest.approx(4.5)
    # Mann-Kendall on 1..5: S = 10, var S = 5·4·15/18, z = (S - 1)/sqrt(var), p two-sided, tau 1
    z = 9 / math.sqrt(50 / 3)
    trend, p, zz, tau = value(step(env, "mann_kendall_test", x=[1, 2, 3, 4, 5]))
    assert (trend, tau) == ("increasing", 1.0)
    assert (zz, p) == (pytest.approx(z), pytest.approx(math.erfc(z / math.sqrt(2))))
    assert value(step(env, "sens_slope", x=[1, 3, 5, 10])) == [pytest.approx(2.5)]  # median of 2,2,3,2,3.5,5


def test_model_tools_say_they_are_replay_only(env):
    r = step(env, "SAM2", input_image_path=f"{D}/A.png", bbox=[[0, 0, 1, 1]], output_path="question1/m.png")
    assert r.error and r.error_kind == "replay_only"
    assert "detection/classification model" in r.observation and "env.mode=replay" in r.observation
    assert MODEL_TOOLS <= set(SPECS) and not MODEL_TOOLS & set(EXECUTE)
    assert set(EXECUTE) | MODEL_TOOLS == set(SPECS)  # every other tool of Earth-Bench's references executes


def test_a_task_whose_folder_is_missing_is_refused_at_reset(tmp_path):
    e = RSEnv(tmp_path, tmp_path / "ws", mode="execute", toolset="earthbench")
    with pytest.raises(KeyError, match=r"data/question1, which does not exist"):
        e.reset(TASK, "IF")


def test_a_reference_like_workflow_runs_end_to_end_through_the_env_worker(tmp_path):
    """A scripted policy runs Earth-Bench question 1's kind of workflow (list, per-year means, trend, answer)
    through the env pool and the real env worker in execute mode."""
    write_folder(tmp_path)
    worker = EnvWorker(str(tmp_path), str(tmp_path / "ws"), {"mode": "execute", "toolset": "earthbench"})
    pool = EnvPool.__new__(EnvPool)
    pool.workers = [InProcessActor(worker)]

    def act(name, **arguments):
        return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"

    async def episode():
        first = await pool.reset(TASK.id, TASK.model_dump(), "IF")
        files = json.loads((await pool.step(TASK.id, act("get_filelist", dir_path=D)))["observation"])
        lst = [f"{D}/{f}" for f in files if re.match(r"LST_\d{4}\.tif", f)]
        means = json.loads((await pool.step(TASK.id, act("calc_batch_image_mean", file_list=lst)))["observation"])
        slope = json.loads((await pool.step(TASK.id, act("compute_linear_trend", y=means, x=[2019, 2020])))
                           ["observation"])
        done = await pool.step(TASK.id, act("answer", value="A" if slope > 0 else "B"))
        return first, means, slope, done, await pool.close(TASK.id)

    first, means, slope, done, closed = asyncio.run(episode())
    assert "Data folder: question1" in first
    assert (means, slope) == ([315.0, 318.0], 3.0)
    assert done["done"] and not done["error"] and done["answer"]["value"] == "A"


@pytest.fixture()
def eb_root(tmp_path):
    if not (EB / "question.json").is_file():
        pytest.skip(EARTHBENCH_MISSING)
    for name in ("question.json", "extracted_tool_calls_GT.json"):
        (tmp_path / name).symlink_to(EB / name)
    return tmp_path


def test_the_launcher_runs_execute_mode_when_every_task_folder_exists_and_names_the_first_missing(eb_root):
    from earthrl.envs.benchmarks.earthbench_rsclaw import TRAIN_IDS

    TRAIN_IDS = [t.removeprefix("earthbench/") for t in TRAIN_IDS]
    for n in TRAIN_IDS:
        (eb_root / "data" / f"question{n}").mkdir(parents=True)
    assert len(load_tasks("earthbench-rsclaw", "train", eb_root, mode="execute")) == 12
    (eb_root / "data" / f"question{TRAIN_IDS[0]}").rmdir()
    with pytest.raises(ConfigError, match=rf"^env\.mode=execute: tasks=earthbench-rsclaw has no rasters to run on for "
                                          rf"1 of 12 tasks \(.*/data/question{TRAIN_IDS[0]} does not exist\); "):
        load_tasks("earthbench-rsclaw", "train", eb_root, mode="execute")
