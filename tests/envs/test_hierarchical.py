"""Hierarchical format (HiRS-Agent manager / specialists): routing, role prompts, out-of-family
tools, roles and sub-goals on every StepResult."""

from __future__ import annotations

import json

import numpy as np
import pytest

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.formats.hierarchical import parse_route
from earthrl.envs.formats.parsers import ActionError

LT = "LT50350322008174PAC01"


def _call(_tool, **arguments):
    return "<tool_call>%s</tool_call>" % json.dumps({"name": _tool, "arguments": arguments})


def _route(family, subgoal):
    return "<route>%s</route>" % json.dumps({"family": family, "subgoal": subgoal})


def test_parse_route():
    assert parse_route('I will route.\n<route>{"family": "pra", "subgoal": " NDVI "}</route>') == {
        "family": "PRA", "subgoal": "NDVI"}
    for text, needle in [('<route>{"family": "GIS", "subgoal": "x"}</route>', "'family'"),
                         ('<route>{"family": "SAA", "subgoal": ""}</route>', "'subgoal'"),
                         ('<route>{"family": "SAA", "subgoal": "x"</route>', "invalid JSON")]:
        with pytest.raises(ActionError, match=needle):
            parse_route(text)


def test_manager_specialist_episode(data_root, tmp_path, raw):
    env = RSEnv(data_root, tmp_path / "ws", action_format="hierarchical")
    env.reset(TaskSpec(id="t", question={"IF": "mean NDVI"}, data=[LT], reference=[],
                       answer={"value": 0.0}, skill="spectral_index"))
    system = env.system_prompt()
    assert "PRA: physical retrieval" in system and "tools: spectral_index, band_math" in system
    assert "<route>" in system and '"answer"' in system

    r = env.step(_route("PRA", "NDVI of the scene"))
    sub = {"family": "PRA", "subgoal": "NDVI of the scene"}
    assert (r.role, r.subgoal, r.error, r.tool_calls, r.verdict) == ("manager", sub, False, [], None)
    assert "You are the PRA specialist" in r.observation and '"name":"spectral_index"' in r.observation
    assert '"name":"raster_stats"' not in r.observation  # only the routed family's tools

    r = env.step(_call("raster_stats", name=f"{LT}:b4"))  # an SAA tool in a PRA turn
    assert (r.role, r.subgoal, r.error_kind, r.verdict) == ("specialist", sub, "out_of_family", "fail")
    assert r.tool_call == {"name": "raster_stats", "arguments": {"name": f"{LT}:b4"}}
    assert r.observation.startswith("[PRA specialist] Error (out_of_family)")
    assert env.registry.artifacts == {}  # it did not run

    r = env.step(_call("raster_stats", name=f"{LT}:b4"))  # the manager may not call tools
    assert (r.role, r.error_kind) == ("manager", "wrong_role")
    r = env.step(_route("PRA", "NDVI of the scene"))
    r = env.step(_call("spectral_index", scene=LT, index="NDVI"))
    assert (r.role, r.error, r.verdict) == ("specialist", False, "pass")
    r = env.step(_route("SAA", "mean NDVI"))
    r = env.step(_call("answer", value=1))
    assert (r.role, r.error_kind) == ("specialist", "wrong_role") and not r.done
    r = env.step(_route("SAA", "mean NDVI"))
    r = env.step(_call("raster_stats", name=f"ndvi_{LT}"))
    n, red = raw.ls(LT, "b4"), raw.ls(LT, "b3")
    assert r.result["mean"] == pytest.approx(np.nanmean((n - red) / (n + red)), abs=1e-6)
    assert r.subgoal == {"family": "SAA", "subgoal": "mean NDVI"}
    r = env.step("I think we are done.")
    assert (r.role, r.error_kind) == ("manager", "parse_error")
    r = env.step(_call("answer", value=0.6956, unit=""))
    assert (r.role, r.done, r.answer) == ("manager", True, {"value": 0.6956, "unit": ""})
    roles = [h.role for h in env.history]
    assert roles == ["manager", "specialist", "manager", "manager", "specialist", "manager",
                     "specialist", "manager", "specialist", "manager", "manager"]
    env.close()
