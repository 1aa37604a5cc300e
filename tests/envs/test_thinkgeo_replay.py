"""ThinkGeo as a live environment in replay mode: recordings from ThinkGeo's dialogs
(envs/benchmarks/thinkgeo_replay.py), ThinkGeo's tools (envs/tools/thinkgeo_tools.py, env.toolset=thinkgeo), the
suite preset (conf/tasks/thinkgeo.yaml) and ThinkGeo's answer grading, on a hand-written file in ThinkGeo's layout."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hydra import initialize_config_dir

from earthrl.envs.benchmarks.thinkgeo import load_thinkgeo
from earthrl.envs.benchmarks.thinkgeo_replay import thinkgeo_recordings
from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.pool import EnvPool, EnvWorker
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.errors import ConfigError
from earthrl.envs.tools.registry import TOOLS, openai_schema
from earthrl.envs.tools.thinkgeo_tools import SOURCES, SPECS
from earthrl.envs.tools.toolsets import resolve_toolset
from earthrl.launch.job_inputs import check_replay, load_tasks
from earthrl.launch.overrides import CONF_DIR, compose_job
from earthrl.rewards.metrics.thinkgeo import score_thinkgeo, steps_from_calls
from earthrl.rewards.outcome import answer_correct
from tests.conftest import InProcessActor


def _call(name, **args):
    return {"role": "assistant", "thought": "t", "tool_calls": [{"type": "function",
                                                                  "function": {"name": name, "arguments": args}}]}


def _out(name, content, kind="text"):
    return {"role": "tool", "name": name, "content": {"type": kind, "content": content}}


BBOX = "(112, 40, 180, 96)"
FIXTURE = {
    "0": {"tools": [{"name": "ObjectDetection"}, {"name": "CountGivenObject"}],
          "files": [{"type": "image", "path": "image/harbor.png"}],
          "dialogs": [{"role": "user", "content": "How many ships are docked in the harbor?"},
                      _call("ObjectDetection", image="image/harbor.png"),
                      _out("ObjectDetection", "ship (10, 12, 40, 30), score 91\nship (50, 12, 80, 30), score 88\n"
                                              "ship (90, 14, 120, 33), score 80"),
                      _call("CountGivenObject", image="image/harbor.png", text="ship"),
                      _out("CountGivenObject", "3"),
                      {"role": "assistant", "content": "There are three ships docked in the harbor."}],
          "gt_answer": {"whitelist": [["3", "three"], ["ship", "ships"]], "blacklist": [["4", "four"]]}},
    "1": {"tools": [{"name": "TextToBbox"}, {"name": "RegionAttributeDescription"}, {"name": "Calculator"}],
          "files": [{"type": "image", "path": "image/airport.png"}],
          "dialogs": [{"role": "user", "content": "What colour is the largest airplane, and how long is it if a "
                                                  "pixel is 0.5 m?"},
                      _call("TextToBbox", image="image/airport.png", text="largest airplane"),
                      _out("TextToBbox", f"{BBOX}, score 93"),
                      _call("RegionAttributeDescription", image="image/airport.png", bbox=BBOX, attribute="color"),
                      _out("RegionAttributeDescription", "The airplane is white with a blue tail."),
                      _call("Calculator", expression="(180 - 112) * 0.5"),
                      _out("Calculator", "34.0"),
                      {"role": "assistant", "content": "It is white, about 34 m long."}],
          "gt_answer": {"whitelist": [["white"], ["34"]], "blacklist": None}},
    "2": {"tools": [{"name": "TextToBbox"}, {"name": "DrawBox"}],
          "files": [{"type": "image", "path": "image/port.png"}],
          "dialogs": [{"role": "user", "content": "Draw a box around the largest ship."},
                      _call("TextToBbox", image="image/port.png", text="largest ship", top1=True),
                      _out("TextToBbox", "(5, 6, 70, 20), score 90"),
                      _call("DrawBox", image="image/port.png", bbox="(5, 6, 70, 20)", annotation="largest ship"),
                      _out("DrawBox", "image/port_box.png", kind="image"),
                      {"role": "assistant", "content": "The box is drawn."}],
          "gt_answer": None},
}


@pytest.fixture()
def folder(tmp_path) -> Path:
    (tmp_path / "tg").mkdir()
    (tmp_path / "tg" / "ThinkGeoBench.json").write_text(json.dumps(FIXTURE))
    return tmp_path / "tg"


def _action(name: str, arguments: dict) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_the_thinkgeo_toolset_is_thinkgeos_14_tools_with_their_published_signatures():
    shown = resolve_toolset("thinkgeo", TOOLS)
    assert len(shown) == len(SPECS) + 1 == 15 and shown[-1] == "answer"
    assert all(TOOLS[n].surface == "thinkgeo" for n in shown[:-1])
    assert not [n for n in resolve_toolset("all", TOOLS) + resolve_toolset("earthbench", TOOLS) if n in SPECS]
    # ThinkGeo's TextToBbox(image, text, top1=True) (its agentlego copy); GTA's RegionAttributeDescription
    p = openai_schema(TOOLS["TextToBbox"])["function"]["parameters"]
    assert p["required"] == ["image", "text"] and p["properties"]["top1"]["default"] is True
    p = openai_schema(TOOLS["RegionAttributeDescription"])["function"]["parameters"]
    assert p["required"] == ["image", "bbox", "attribute"]
    assert sum(s.startswith("not in") for s in SOURCES.values()) == 1  # ChangeDetection: not published
    assert TOOLS["ChangeDetection"].args_model.model_validate({"pre": "a.png", "post": "b.png"}).model_dump() == \
        {"pre": "a.png", "post": "b.png"}


def test_recordings_pair_each_call_with_the_following_tool_turn(folder):
    rec = thinkgeo_recordings(folder)
    assert sorted(rec) == ["thinkgeo/0", "thinkgeo/1", "thinkgeo/2"]
    assert [(c.name, c.output) for c in rec["thinkgeo/0"]][1] == ("CountGivenObject", "3")
    assert rec["thinkgeo/2"][1].arguments == {"image": "image/port.png", "bbox": "(5, 6, 70, 20)",
                                              "annotation": "largest ship"}
    assert rec["thinkgeo/2"][1].output == "image/port_box.png"


def test_every_reference_dialog_replays_without_errors_to_its_graded_answer(folder, tmp_path):
    """A scripted policy emits each dialog's calls, then its final answer, through the env pool and worker."""
    tasks = load_thinkgeo(folder)
    worker = EnvWorker(str(folder), str(tmp_path / "ws"), {"mode": "replay", "toolset": "thinkgeo",
                                                           "max_obs_chars": 600})
    assert "RegionAttributeDescription" in worker.system_prompt()
    pool = EnvPool.__new__(EnvPool)
    pool.workers = [InProcessActor(worker)]

    async def episode(t: TaskSpec) -> tuple[list, list, dict]:
        first = await pool.reset(t.id, t.model_dump(), "AP")
        assert first.startswith(t.question["AP"]) and t.data[0] in first
        errors, observations, pred = [], [], []
        for c in t.reference:
            res = await pool.step(t.id, _action(c.name, c.arguments))
            pred += res["tool_calls"]
            observations.append(res["observation"])
            if res["error"]:
                errors.append((c.name, res["observation"]))
        final = FIXTURE[t.id.removeprefix("thinkgeo/")]["dialogs"][-1]["content"]
        res = await pool.step(t.id, _action("answer", {"value": final}))
        await pool.close(t.id)
        return errors, observations, {**res, "pred": pred}

    async def run_all():
        return [await episode(t) for t in tasks]

    results = asyncio.run(run_all())
    assert [e for e, _, _ in results] == [[], [], []]
    assert results[0][1] == [FIXTURE["0"]["dialogs"][2]["content"]["content"], "3"]
    assert results[1][1][2] == "34.0" and results[2][1][1] == "image/port_box.png"
    assert all(res["done"] and not res["error"] for _, _, res in results)
    # graded as ThinkGeo grades: both whitelist groups named, no blacklist alias; the image task has no answer
    assert [answer_correct(res["answer"], t.answer.model_dump()) for t, (_, _, res) in zip(tasks, results)] == \
        [True, True, False]
    # ThinkGeo's five numbers of the replayed references: the calls are recorded as written
    episodes = []
    for t, (_, _, res) in zip(tasks, results):
        gt = FIXTURE[t.id.removeprefix("thinkgeo/")]["gt_answer"]
        pred = steps_from_calls(res["pred"], answer=res["answer"]["value"] if gt else None)
        ref = steps_from_calls([c.model_dump() for c in t.reference], answer=True if gt else None)
        episodes.append((pred, ref, gt))
    assert score_thinkgeo(episodes) == {"inst": 1.0, "tool": 1.0, "arg": 1.0, "ans": 1.0, "ans_i": 1.0}


@pytest.fixture()
def env(folder, tmp_path):
    e = RSEnv(folder, tmp_path / "ws", mode="replay", toolset="thinkgeo")
    e.reset(load_thinkgeo(folder)[1], "AP")
    yield e
    e.close()


@pytest.mark.parametrize(("rule", "arguments"), [
    ("argument order, an absolute path, case", {"attribute": "Color ", "bbox": BBOX, "image": "/data/TG/image/AIRPORT.png"}),
    ("a path by its file name", {"image": "airport.png", "bbox": BBOX, "attribute": "color"}),
])
def test_a_reformatted_argument_call_matches(env, rule, arguments):
    r = env.step(_action("RegionAttributeDescription", arguments))
    assert not r.error, (rule, r.observation)
    assert r.observation == "The airplane is white with a blue tail."


@pytest.mark.parametrize(("tool", "arguments"), [
    ("RegionAttributeDescription", {"image": "image/airport.png", "bbox": BBOX, "attribute": "size"}),
    ("Calculator", {"expression": "(180 - 112) * 0.6"}),
    ("TextToBbox", {"image": "image/airport.png", "text": "largest airplane", "top1": False}),  # default changed
    ("OCR", {"image": "image/airport.png"}),  # a tool the reference never calls
])
def test_a_changed_value_returns_off_record(env, tool, arguments):
    r = env.step(_action(tool, arguments))
    assert r.error and r.error_kind == "off_record"
    assert r.observation.startswith(f"Error (off_record): no recorded result exists for this call of {tool}")
    assert not env.done
    assert not env.step(_action("TextToBbox", {"image": "image/airport.png", "text": "largest airplane",
                                               "top1": True})).error  # the default, written out: the same call


def test_the_preset_brings_thinkgeos_keys_and_other_modes_are_refused_in_one_line(folder):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for command in ("config", "eval"):
            cfg = compose_job(command, ["logger=none", "tasks=thinkgeo", f"tasks.data={folder}", "env.mode=replay"])
            assert (cfg.tasks.name, cfg.tasks.split, cfg.tasks.phrasing) == ("thinkgeo", "test", "AP")
            assert (cfg.env.toolset, cfg.env.max_context_tokens, cfg.env.max_turns, cfg.env.max_action_tokens) == (
                "thinkgeo", 8192, 10, 512)
            assert cfg.cluster.vllm.max_model_len == 8192 + 512
        assert list(cfg.eval.modes) == ["AP"]  # eval runs the suite's phrasing
        assert list(compose_job("eval", ["logger=none"]).eval.modes) == ["IF"]
    assert len(load_tasks("thinkgeo", "test", folder, check_data=False, mode="replay")) == 3
    for mode in ("execute", "mock"):
        with pytest.raises(ConfigError, match=rf"^env\.mode={mode}: tasks=thinkgeo \(template thinkgeo\) runs in "
                                              r"env\.mode=replay only: EarthRL does not run its tools, a call "
                                              r"answers from its recorded output \(docs/tasks\.md\)$"):
            load_tasks("thinkgeo", "test", folder, check_data=False, mode=mode)
    check_replay(load_tasks("thinkgeo", "test", folder, check_data=False, mode="replay"), folder)
