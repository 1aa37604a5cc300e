"""Fuzzing (hypothesis, fixed seed): arguments generated from every tool's schema, in ``mock``
mode for all tools and in ``execute`` mode for the raster tools whose size an argument sets;
``env.step`` never raises and never reports an internal error for them."""

from __future__ import annotations

import json

import pytest
from hypothesis import given

from earthrl.bench.fuzz_cases import OBS_CHARS, TASK, fuzz_settings, step_problem, tool_arguments
from earthrl.envs.core.env import RSEnv
from earthrl.envs.tools.registry import TOOLS

EXECUTE_TOOLS = ("resample", "reproject", "crop_bbox", "mosaic", "band_math", "threshold_mask",
                 "raster_stats", "percentiles", "search_catalog", "answer")


def _fuzz(env, tool: str, n: int) -> list:
    kinds = []

    @fuzz_settings(n)
    @given(tool_arguments(TOOLS[tool]))
    def run(arguments):
        env.reset(TASK)
        text = "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"
        res = env.step(text)
        assert step_problem(res, env.max_obs_chars) is None, (text[:300], step_problem(res, env.max_obs_chars))
        kinds.append(res.error_kind)

    run()
    return kinds


@pytest.fixture(scope="module")
def envs(data_root, tmp_path_factory):
    made = {m: RSEnv(data_root, tmp_path_factory.mktemp(m), mode=m, toolset="all", max_obs_chars=OBS_CHARS)
            for m in ("mock", "execute")}
    yield made
    for env in made.values():
        env.close()


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_fuzzed_arguments_of_every_tool_in_mock_mode(envs, tool):
    kinds = _fuzz(envs["mock"], tool, 6)
    assert len(kinds) == 6


@pytest.mark.parametrize("tool", EXECUTE_TOOLS)
def test_fuzzed_arguments_in_execute_mode(envs, tool):
    kinds = _fuzz(envs["execute"], tool, 5)
    assert len(kinds) == 5
