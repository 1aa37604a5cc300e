"""Hostile argument values (overflowing expressions, non-finite numbers, deep nesting, huge
integers and strings, types JSON cannot carry) are tool errors naming the argument, through JSON
tool calls and through CodeAct's tool functions; never an ``internal_error``, and the interpreter
answers the turn after."""

from __future__ import annotations

import json

import pytest
from hypothesis import given

from earthrl.bench.fuzz_cases import OBS_CHARS, TASK, codeact_tool_turns, fuzz_settings, hostile_arguments, step_problem
from earthrl.envs.core.env import RSEnv
from earthrl.envs.tools.registry import TOOLS

S2 = "S2_T33UUU_20170216"
RASTER_TOOLS = ("crop_bbox", "band_math", "threshold_mask", "resample", "raster_stats", "answer")
ALIVE = '```python\nprint("alive")\n```'


def _json_step(env, name: str, arguments: dict):
    return env.step("<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>")


@pytest.fixture(scope="module")
def json_env(data_root, tmp_path_factory):
    env = RSEnv(data_root, tmp_path_factory.mktemp("json"), toolset="all", max_obs_chars=OBS_CHARS)
    yield env
    env.close()


@pytest.fixture(scope="module")
def codeact_env(data_root, tmp_path_factory):
    env = RSEnv(data_root, tmp_path_factory.mktemp("codeact"), toolset="all", action_format="codeact",
                max_obs_chars=OBS_CHARS)
    yield env
    env.close()


def test_band_math_overflowing_expression_is_a_tool_error_naming_expr(json_env):
    json_env.reset(TASK)
    res = _json_step(json_env, "band_math", {"expr": "9**9**9", "inputs": {"a": f"{S2}:B04"}})
    assert (res.error, res.error_kind, res.internal_error) == (True, "tool_error", None)
    assert res.observation.startswith("Error (tool_error): expr: '9 ** 9 ** 9' is not a finite number")
    assert "within ±1.8e+308" in res.observation


def test_band_math_constant_parts_are_checked_and_pixels_overflow_to_nan(json_env):
    json_env.reset(TASK)
    for expr, needle in [("a + 1/0", "'1 / 0' is not a finite number"),
                         ("where(a)", "where() takes 3 argument(s) (condition, x, y), got 1")]:
        res = _json_step(json_env, "band_math", {"expr": expr, "inputs": {"a": f"{S2}:B04"}})
        assert (res.error_kind, res.internal_error) == ("tool_error", None), res.observation
        assert f"expr: {needle}" in res.observation
    res = _json_step(json_env, "band_math", {"expr": "a / 0 + a ** 1e6", "inputs": {"a": f"{S2}:B04"}})
    assert res.error_kind is None  # a pixel that overflows is NaN, not an error
    assert res.result["nodata_px"] == res.result["shape"][0] * res.result["shape"][1]


def test_crop_bbox_infinite_bbox_is_a_schema_error_naming_bbox(json_env):
    json_env.reset(TASK)
    res = _json_step(json_env, "crop_bbox", {"name": f"{S2}:B04", "bbox": [0, 0, float("inf"), 1]})
    assert (res.error, res.error_kind, res.internal_error) == (True, "schema_error", None)
    assert "argument 'bbox.2': Input should be a finite number (got inf)" in res.observation


def test_crop_bbox_huge_and_out_of_range_boxes(json_env):
    json_env.reset(TASK)
    res = _json_step(json_env, "crop_bbox", {"name": f"{S2}:B04", "bbox": [-1e300, -1e300, 1e300, 1e300]})
    assert res.error_kind is None, res.observation  # cut to the raster's extent: the whole band
    assert res.result["shape"] == [768, 1536]
    res = _json_step(json_env, "crop_bbox", {"name": f"{S2}:B04", "bbox": [0, 0, 1, 1e300],
                                             "bbox_crs": "lonlat"})
    assert (res.error_kind, res.internal_error) == ("schema_error", None)
    assert "latitudes in [-90, 90]" in res.observation


DEEP = ("```python\nimport sys\nsys.setrecursionlimit(50_000)\nx = 1\nfor _ in range(5000):\n"
        "    x = [x]\nprint(raster_stats(name=x))\n```")


def test_deep_argument_via_codeact_is_a_schema_error_and_the_next_turn_answers(codeact_env):
    codeact_env.reset(TASK)
    res = codeact_env.step(DEEP)
    assert (res.error, res.error_kind, res.internal_error) == (True, "schema_error", None)
    assert ("raster_stats: argument 'name' nests more than 32 levels of lists/dicts; the deepest "
            "allowed is 32") in res.observation
    nxt = codeact_env.step(ALIVE)
    assert (nxt.error, nxt.observation) == (False, "alive")  # a hung bridge says "timeout"


def test_a_forged_deep_tool_request_is_a_violation_and_the_next_turn_restarts(codeact_env):
    """Code that writes the protocol itself gets past the interpreter's check; the parent
    refuses the message it cannot decode instead of failing inside the bridge."""
    codeact_env.reset(TASK)
    forged = ("```python\nimport sys\nsys.setrecursionlimit(50_000)\nx = 1\nfor _ in range(5000):\n"
              "    x = [x]\nch = next(c.cell_contents for c in raster_stats.__closure__\n"
              "          if type(c.cell_contents).__name__ == '_Channel')\n"
              "ch.send({'t': 'tool', 'name': 'raster_stats', 'kwargs': {'name': x}})\n"
              "print(ch.recv())\n```")
    res = codeact_env.step(forged)
    assert (res.error, res.error_kind, res.internal_error) == (True, "sandbox_violation", None)
    assert "broke the protocol" in res.observation and "the interpreter restarts" in res.observation
    nxt = codeact_env.step(ALIVE)
    assert (nxt.error, nxt.observation) == (False, "alive")  # a fresh interpreter, not a hang


def test_hostile_json_tool_calls_give_no_internal_error(json_env):
    kinds = []

    @fuzz_settings(90)
    @given(st_tool_calls(READABLE))
    def run(call):
        json_env.reset(TASK)
        res = _json_step(json_env, *call)
        assert step_problem(res, json_env.max_obs_chars) is None, (call, res.observation)
        kinds.append(res.error_kind)

    run()
    assert "internal_error" not in kinds
    assert {"schema_error", "tool_error"} <= set(kinds), kinds


#: arguments that make a call read real data, so that the hostile values of the others reach
#: the tool's computation
READABLE = {"crop_bbox": {"name": f"{S2}:B04"}, "band_math": {"inputs": {"a": f"{S2}:B04"}},
            "threshold_mask": {"name": f"{S2}:B04"}}


def st_tool_calls(readable: dict):
    from hypothesis import strategies as st

    return st.sampled_from(sorted(readable)).flatmap(lambda n: st.tuples(
        st.just(n), hostile_arguments(TOOLS[n]).map(lambda a: {**a, **readable[n]})))


def test_hostile_codeact_tool_calls_give_no_internal_error_and_the_interpreter_answers(codeact_env):
    kinds = []
    codeact_env.reset(TASK)

    @fuzz_settings(25)
    @given(codeact_tool_turns({n: TOOLS[n] for n in RASTER_TOOLS}))
    def run(text):
        if codeact_env.done:
            codeact_env.reset(TASK)
        res = codeact_env.step(text)
        assert step_problem(res, codeact_env.max_obs_chars) is None, (text[-300:], res.observation)
        kinds.append(res.error_kind)
        if not codeact_env.done:
            nxt = codeact_env.step(ALIVE)
            assert not nxt.error and nxt.observation.endswith("alive"), (text[-300:], nxt.observation)

    run()
    assert "internal_error" not in kinds
    assert "schema_error" in kinds, kinds
