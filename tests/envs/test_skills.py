"""Skill tree (RS-Claw progressive disclosure): the seven skills, what opening them reveals, order
dependencies and parameter constraints, and the episode record MEFR reads."""

from __future__ import annotations

import json

import pytest

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.skills import SKILL_IDS, SKILLS, constraint_problems, order_problems, skill_tools
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.tools.registry import TOOLS

LT = "LT50350322008174PAC01"


def _call(_tool, **arguments):
    return "<tool_call>%s</tool_call>" % json.dumps({"name": _tool, "arguments": arguments})


def test_the_seven_skills_have_registered_tools():
    assert tuple(SKILLS) == SKILL_IDS == ("spectral_index", "lst_inversion", "water_flood",
                                          "vegetation_drought", "change_trend", "land_cover",
                                          "cloud_masking")
    for sid in SKILL_IDS:
        names = skill_tools(sid, TOOLS)
        assert names and all(n in TOOLS for n in names)
        # every EarthRL tool of the skill; Earth-Agent's tools (env.toolset=earthbench) never
        assert [t for t in TOOLS.values() if sid in t.skills and t.name not in names and t.surface == "earthrl"] == []
        assert not [n for n in names if TOOLS[n].surface != "earthrl"]
    assert {"qa_mask", "pixel_share"} <= set(skill_tools("cloud_masking", TOOLS))
    assert "raster_difference" in skill_tools("change_trend", TOOLS)
    with pytest.raises(KeyError, match="water_flood"):
        skill_tools("floods", TOOLS)


def test_order_and_constraints_apply_to_opened_skills_only():
    assert order_problems("threshold_mask", [], [], TOOLS) == []
    assert order_problems("threshold_mask", [], ["water_flood"], TOOLS) == [
        "skill water_flood: threshold_mask needs one of " + ", ".join(
            t for t in SKILLS["water_flood"].order["threshold_mask"] if t in TOOLS) + " first"]
    assert order_problems("threshold_mask", ["spectral_index"], ["water_flood"], TOOLS) == []
    assert constraint_problems("threshold_mask", {"value": 1.5}, []) == []
    assert constraint_problems("threshold_mask", {"value": 1.5}, ["water_flood"]) == [
        "argument 'value' = 1.5 is outside [-1, 1] (skill water_flood); give a value in that range"]
    assert constraint_problems("threshold_mask", {"value": -0.2}, ["water_flood"]) == []


def test_progressive_disclosure_episode(data_root, tmp_path):
    env = RSEnv(data_root, tmp_path / "ws", toolset="skills")
    env.reset(TaskSpec(id="t", question={"IF": "share of NDVI > 0.5"}, data=[LT], reference=[],
                       answer={"value": 0.0}, skill="vegetation_drought"))
    prompt = env.system_prompt()
    assert '"name":"open_skill"' in prompt and '"name":"spectral_index"' not in prompt
    r = env.step(_call("spectral_index", scene=LT, index="NDVI"))
    assert r.error_kind == "tool_not_opened" and "vegetation_drought" in r.observation
    r = env.step(_call("open_skill", skill="drought"))
    assert r.error_kind == "unknown_skill" and "vegetation_drought" in r.observation
    r = env.step(_call("open_skill", skill="vegetation_drought"))
    assert not r.error and r.result["tools"] == skill_tools("vegetation_drought", TOOLS)
    assert "threshold_mask(name, op=…, value): " in r.observation
    r = env.step(_call("read_tool_doc", tool="threshold_mask"))
    assert not r.error and '"required":["name","value"]' in r.observation
    r = env.step(_call("threshold_mask", name=f"{LT}:b4", value=0.3))   # before any index
    assert not r.error and r.verdict == "fail" and "needs one of" in r.verdict_reasons[0]
    r = env.step(_call("spectral_index", scene=LT, index="NDVI"))
    assert r.verdict == "pass"
    r = env.step(_call("threshold_mask", name=f"ndvi_{LT}", value=5))
    assert r.error_kind == "out_of_range" and "argument 'value' = 5" in r.observation
    r = env.step(_call("threshold_mask", name=f"ndvi_{LT}", value=0.5))
    assert r.verdict == "pass"
    r = env.step(_call("mask_area", name=f"ndvi_{LT}_gt0.5"))        # not a vegetation_drought tool
    assert r.error_kind == "tool_not_opened"
    rec = env.episode_record()
    assert rec["skills_opened"] == ["vegetation_drought"] and rec["docs_opened"] == ["threshold_mask"]
    assert [a["name"] for a in rec["artifacts"]] == [f"{LT}_b4_gt0.3", f"ndvi_{LT}", f"ndvi_{LT}_gt0.5"]
    assert rec["artifacts"][2] == {"name": f"ndvi_{LT}_gt0.5", "tool": "threshold_mask", "parents": [f"ndvi_{LT}"]}
    env.reset(env.task)
    assert env.episode_record() == {"artifacts": [], "skills_opened": [], "docs_opened": []}
    env.close()
