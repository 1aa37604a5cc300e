"""RSEnv: reset/step/close, error observations never raise, truncation, the prompt budget."""

from __future__ import annotations

import json

import pytest

from earthrl.envs.env import RSEnv, StepResult
from earthrl.envs.prompts import system_prompt
from earthrl.envs.tasks import TaskSpec

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
