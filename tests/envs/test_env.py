"""RSEnv: reset/step/close, error observations never raise, truncation, the prompt budget."""

from __future__ import annotations

import json

import pytest

from earthrl.envs.core.env import RSEnv, StepResult
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.formats.prompts import system_prompt

S2 = "S2_T33UUU_20170216"
LT = "LT50350322008174PAC01"


def _task(**kw):
    base = dict(id="t1", question={"IF": "Compute NDVI with spectral_index, then raster_stats.",
                                   "AP": "What is the mean NDVI?"},
                data=[LT], reference=[], answer={"value": 0.7, "tolerance": 0.01}, skill="vegetation")
    base.update(kw)
    return TaskSpec(**base)


def test_reset_gives_question_and_manifest(data_root, tmp_path):
    env = RSEnv(data_root, tmp_path / "ws")
    first = env.reset(_task(), phrasing="AP")
    assert first.startswith("What is the mean NDVI?")
    assert f"{LT} | landsat-5 | 2008-06-22 | b3,b4,b5,fmask" in first
    assert "spectral_index" not in first
    assert "with spectral_index" in env.reset(_task())
    with pytest.raises(KeyError, match="phrasing"):
        env.reset(_task(), phrasing="OW")
    with pytest.raises(KeyError, match="LT59999"):
        env.reset(_task(data=["LT59999"]))
    with pytest.raises(ValueError, match="mode"):
        RSEnv(data_root, tmp_path / "x", mode="simulate")


def test_episode_with_errors_then_answer(data_root, tmp_path):
    env = RSEnv(data_root, tmp_path / "ws")
    env.reset(_task())
    bad = ["no call here", '<tool_call>{"name": "ndvi", "arguments": {}}</tool_call>',
           '<tool_call>{"name": "spectral_index", "arguments": {"scene": 1}}</tool_call>',
           '<tool_call>{"name": "raster_stats", "arguments": {"name": "ndvi_x"}}</tool_call>',
           '<tool_call>{"name": "spectral_index", "arguments": {"scene": "%s", "index": "NDWI"}}</tool_call>' % LT]
    kinds = []
    for text in bad:
        r = env.step(text)
        assert isinstance(r, StepResult) and r.error and not r.done and r.answer is None
        assert r.observation.startswith(f"Error ({r.error_kind}):")
        kinds.append(r.error_kind)
    assert kinds == ["parse_error", "unknown_tool", "schema_error", "hallucinated_path", "tool_error"]
    r = env.step('<tool_call>{"name": "spectral_index", "arguments": {"scene": "%s", "index": "NDVI"}}</tool_call>' % LT)
    assert not r.error and r.tool_call == {"name": "spectral_index", "arguments": {"scene": LT, "index": "NDVI"}}
    r = env.step('<tool_call>{"name": "raster_stats", "arguments": {"name": "ndvi_%s"}}</tool_call>' % LT)
    assert not r.error and "mean" in r.result
    r = env.step('<tool_call>{"name": "answer", "arguments": {"value": 0.696, "unit": ""}}</tool_call>')
    assert r.done and not r.error and r.answer == {"value": 0.696, "unit": ""}
    r = env.step('<tool_call>{"name": "list_files", "arguments": {}}</tool_call>')
    assert r.error and r.error_kind == "episode_done"
    assert len(env.history) == 9 and sum(h.error for h in env.history) == 6
    ws = env.workspace
    assert (ws / f"ndvi_{LT}.tif").exists()
    env.close()
    assert not ws.exists()


def test_reset_starts_a_fresh_registry(data_root, tmp_path):
    env = RSEnv(data_root, tmp_path / "ws")
    env.reset(_task())
    env.step(json.dumps({"name": "spectral_index", "arguments": {"scene": LT, "index": "NDVI"}}))
    env.reset(_task())
    r = env.step(json.dumps({"name": "raster_stats", "arguments": {"name": f"ndvi_{LT}"}}))
    assert r.error_kind == "hallucinated_path"
    env.close()


def test_observations_are_truncated(data_root, tmp_path):
    env = RSEnv(data_root, tmp_path / "ws", max_obs_chars=60)
    env.reset(_task(data=[S2, LT]))
    r = env.step(json.dumps({"name": "read_metadata", "arguments": {"name": S2}}))
    assert len(r.observation) == 60 and r.observation.endswith("…[truncated]")
    assert len(json.dumps(r.result)) > 60  # the structured result is complete
    env.close()
    # from Python, no budget: nothing is cut (the agent loop's envs get the config's env.max_obs_chars,
    # the one home of its default)
    whole = RSEnv(data_root, tmp_path / "ws2")
    assert whole.max_obs_chars is None and whole.truncate("x" * 5000) == "x" * 5000
    whole.close()


def test_step_before_reset_is_a_programming_error(data_root, tmp_path):
    with pytest.raises(RuntimeError, match="reset"):
        RSEnv(data_root, tmp_path / "ws").step("{}")


def test_system_prompt_is_short_and_complete(data_root, tmp_path):
    env = RSEnv(data_root, tmp_path / "ws")
    schemas = env.tool_schemas()
    p = system_prompt(schemas)
    for s in schemas:
        assert f'"name":"{s["function"]["name"]}"' in p
    assert p.count("<tools>") == 1 and "</tools>" in p and "<tool_call>" in p
    assert "answer tool" in p
    # Budget: <= 600 Qwen tokens. JSON-dense English runs >= 3 chars per Qwen token.
    assert len(p) <= 1800, len(p)


# -- error kinds, StepResult contract, formats, episode record ---------------------------------

def _call(_tool, **arguments):
    return "<tool_call>%s</tool_call>" % json.dumps({"name": _tool, "arguments": arguments})


@pytest.mark.parametrize("kwargs,action,kind,needle", [
    ({}, '<tool_call>{"name": "raster_stats", "arguments": {"name": "x"', "parse_error", "invalid JSON"),
    ({}, "<tool_call>\n", "parse_error", "no tool call"),
    ({}, _call("compute_ndvi", scene=LT), "unknown_tool", "spectral_index"),
    ({}, _call("crop_bbox", name=f"{LT}:b4", bbox=[0, 0, 1, 1]), "unknown_tool", "tools: list_files"),
    ({}, _call("spectral_index", scene=LT, index=["NDVI"]), "schema_error", "argument 'index'"),
    ({}, _call("threshold_mask", name=f"{LT}:b4", value="high"), "schema_error", "argument 'value'"),
    ({"toolset": "all"}, _call("water_mask", scene=S2, threshold=5), "schema_error", "argument 'threshold'"),
    ({"toolset": "all"}, _call("crop_bbox", name=f"{LT}:b4", bbox=[5, 5, 5, 9]), "empty_aoi", "argument 'bbox'"),
    ({}, _call("raster_stats", name=f"ndvi_{LT}"), "hallucinated_path", "does not exist"),
    ({}, _call("spectral_index", scene=LT, index="NDWI"), "tool_error", "lacks"),
    ({"toolset": "skills"}, _call("spectral_index", scene=LT, index="NDVI"), "tool_not_opened", "open_skill"),
    ({"mode": "mock"}, _call("qa_mask", scene=S2, classes=[4]), "sensor_mismatch", "sentinel-2"),
    ({"inject_errors": {"rate": 1.0, "seed": 0}}, _call("spectral_index", scene=LT, index="NDVI"),
     "injected_error", "retry"),
])
def test_each_error_kind_is_an_error_observation(data_root, tmp_path, kwargs, action, kind, needle):
    env = RSEnv(data_root, tmp_path / "ws", **kwargs)
    env.reset(_task(data=[LT, S2]))
    r = env.step(action)
    assert (r.error, r.error_kind, r.done, r.verdict) == (True, kind, False, "fail")
    assert r.observation.startswith(f"Error ({kind}):") and needle in r.observation
    assert r.verdict_reasons[0].startswith(kind)
    if kind != "parse_error":
        assert r.tool_calls == [{**r.tool_call, "error": True, "error_kind": kind}]
    # the episode continues: a good call runs right after
    ok = env.step(_call("list_skills"))
    assert not ok.error and ok.verdict == "pass" and "water_flood:" in ok.observation
    env.close()


def test_step_result_contract_and_episode_record(data_root, tmp_path):
    env = RSEnv(data_root, tmp_path / "ws")
    env.reset(_task())
    r = env.step(_call("spectral_index", scene=LT, index="NDVI"))
    assert (r.role, r.subgoal, r.verdict, r.verdict_reasons) == ("agent", None, "pass", [])
    assert r.tool_calls == [{"name": "spectral_index", "arguments": {"scene": LT, "index": "NDVI"},
                             "error": False, "error_kind": None}]
    assert r.tool_s > 0
    env.step(_call("threshold_mask", name=f"ndvi_{LT}", value=0.5))
    env.step(_call("read_tool_doc", tool="pixel_share"))
    env.step(_call("pixel_share", name=f"ndvi_{LT}_gt0.5"))
    assert env.episode_record() == {
        "artifacts": [{"name": f"ndvi_{LT}", "tool": "spectral_index", "parents": [LT]},
                      {"name": f"ndvi_{LT}_gt0.5", "tool": "threshold_mask", "parents": [f"ndvi_{LT}"]}],
        "skills_opened": [], "docs_opened": ["pixel_share"]}
    env.close()


def test_unknown_mode_format_and_toolset_are_refused(data_root, tmp_path):
    with pytest.raises(ValueError, match="action_format 'xml'"):
        RSEnv(data_root, tmp_path / "a", action_format="xml")
    with pytest.raises(ValueError, match="toolset 'some'"):
        RSEnv(data_root, tmp_path / "b", toolset="some")
    with pytest.raises(ValueError, match="unknown tools"):
        RSEnv(data_root, tmp_path / "c", toolset=["spectral_index", "ndvi_magic"])


def test_toolsets_shape_the_prompt(data_root, tmp_path):
    from earthrl.envs.tools.toolsets import MINI_TOOLS

    mini = RSEnv(data_root, tmp_path / "a")
    assert [s["function"]["name"] for s in mini.tool_schemas()] == list(MINI_TOOLS)
    few = RSEnv(data_root, tmp_path / "b", toolset=["spectral_index", "raster_stats"])
    assert [s["function"]["name"] for s in few.tool_schemas()] == ["spectral_index", "raster_stats", "answer"]
    sk = RSEnv(data_root, tmp_path / "c", toolset="skills")
    names = [s["function"]["name"] for s in sk.tool_schemas()]
    assert names == ["list_skills", "open_skill", "read_tool_doc", "answer"]
    assert len(sk.system_prompt()) < len(mini.system_prompt()) / 2


def test_codeact_turn_runs_several_calls_in_the_sandbox(data_root, tmp_path, raw):
    import numpy as np

    env = RSEnv(data_root, tmp_path / "ws", action_format="codeact")
    env.reset(_task())
    assert "def spectral_index(" in env.system_prompt()
    r = env.step('```python\nr = spectral_index(scene="%s", index="NDVI")\n'
                 's = raster_stats(name=r["artifact"])\nprint(round(s["mean"], 5))\n```' % LT)
    n, red = raw.ls(LT, "b4"), raw.ls(LT, "b3")
    want = (n - red) / (n + red)
    assert not r.error and float(r.observation) == pytest.approx(np.nanmean(want), abs=1e-5)
    assert [c["name"] for c in r.tool_calls] == ["spectral_index", "raster_stats"]
    assert r.verdict == "pass" and r.tool_call["name"] == "spectral_index"
    r = env.step('```python\nraster_stats(name="nope")\n```')
    assert r.error and r.error_kind == "hallucinated_path" and r.tool_calls[0]["error"]
    r = env.step("```python\n1/0\n```")
    assert r.error and r.error_kind == "code_error" and r.tool_calls == [] and "ZeroDivisionError" in r.observation
    r = env.step('```python\nanswer(value=0.7, unit="")\n```')
    assert r.done and r.answer == {"value": 0.7, "unit": ""} and r.observation.startswith("answer recorded")
    env.close()


# -- internal errors and the raster cap ----------------------------------------------------------
def _broken_env(data_root, tmp_path, exc: BaseException):
    import dataclasses

    from earthrl.envs.tools.registry import TOOLS

    def boom(ctx, args):
        raise exc

    env = RSEnv(data_root, tmp_path / "ws")
    env.tools = {**TOOLS, "raster_stats": dataclasses.replace(TOOLS["raster_stats"], fn=boom)}
    env.reset(_task())
    return env


@pytest.mark.parametrize("exc", [KeyError("secret/host/path"), MemoryError(),
                                 FileNotFoundError("/data/missing.tif"), ZeroDivisionError("x")])
def test_a_bug_in_a_tool_is_an_internal_error_with_its_traceback(data_root, tmp_path, exc):
    env = _broken_env(data_root, tmp_path, exc)
    r = env.step('<tool_call>{"name": "raster_stats", "arguments": {"name": "%s:b3"}}</tool_call>' % LT)
    assert r.error and r.error_kind == "internal_error" and not r.done
    assert r.observation.startswith("Error (internal_error): EarthRL hit an internal error in "
                                    f"raster_stats ({type(exc).__name__})")
    assert "Traceback" not in r.observation and "/" not in r.observation  # nothing of the host
    assert r.internal_error.startswith("Traceback (most recent call last)")
    assert f"{type(exc).__name__}" in r.internal_error.splitlines()[-1] and "def boom" not in r.observation
    assert r.tool_calls[0]["error_kind"] == "internal_error"
    ok = env.step('<tool_call>{"name": "list_files", "arguments": {}}</tool_call>')  # the episode goes on
    assert not ok.error and ok.internal_error is None


def test_an_exception_in_the_format_is_an_internal_error(data_root, tmp_path, monkeypatch):
    env = RSEnv(data_root, tmp_path / "ws")
    env.reset(_task())
    monkeypatch.setattr(env.format, "step", lambda text: 1 / 0)
    r = env.step("anything")
    assert r.error and r.error_kind == "internal_error" and "ZeroDivisionError" in r.internal_error
    assert "this json turn (ZeroDivisionError)" in r.observation
    assert env.history[-1] is r


def test_agent_errors_carry_no_internal_error(data_root, tmp_path):
    env = RSEnv(data_root, tmp_path / "ws")
    env.reset(_task())
    r = env.step('<tool_call>{"name": "raster_stats", "arguments": {"name": "nope"}}</tool_call>')
    assert r.error_kind == "hallucinated_path" and r.internal_error is None


@pytest.mark.parametrize("call,needle", [
    ({"name": "resample", "arguments": {"name": f"{S2}:B04", "resolution": 0.1}},
     "resample: resolution=0.1 would make a 76800×153600 raster (1.18e+10 pixels); the largest "
     "allowed is 2e+08 pixels: use resolution >= 0.78"),
    ({"name": "mosaic", "arguments": {"names": [f"{S2}:B04", "far"]}}, "names=['"),
])
def test_rasters_over_the_cap_are_refused_before_allocating(data_root, tmp_path, call, needle):
    from earthrl.envs.tools.common import MAX_RASTER_PIXELS

    env = RSEnv(data_root, tmp_path / "ws", toolset="all", max_obs_chars=2000)
    env.reset(_task(data=[S2]))
    if call["name"] == "mosaic":  # a copy of the band shifted 1e5 km east: the union is huge
        from affine import Affine

        from earthrl.envs.tools.common import load_layer

        layer = load_layer(env.registry, f"{S2}:B04")
        t = layer.transform
        env.registry.write("far", layer.arr, kind="raster", crs=layer.crs, units="reflectance",
                           transform=Affine(t.a, t.b, t.c + 1e8, t.d, t.e, t.f), parents=[S2], call=None)
    r = env.step(json.dumps(call))
    assert r.error_kind == "raster_too_large" and needle in r.observation, r.observation
    assert f"{MAX_RASTER_PIXELS:.0e}" in r.observation
    ok = env.step(json.dumps({"name": "resample", "arguments": {"name": f"{S2}:B04", "resolution": 20}}))
    assert not ok.error and ok.result["shape"] == [384, 768]
