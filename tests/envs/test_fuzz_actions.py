"""Fuzzing (hypothesis, fixed seed): no model output in any action format raises out of
``env.step``; each step keeps the StepResult contract (``fuzz_cases.step_problem``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from earthrl.bench.fuzz_cases import OBS_CHARS, TASK, codeact_parse_problem, fuzz_settings, model_outputs, step_problem
from earthrl.envs.core.env import RSEnv
from earthrl.envs.formats.parsers import MAX_ACTION_CHARS
from earthrl.envs.tools.registry import TOOLS


@pytest.mark.parametrize("fmt,n", [("json", 150), ("hierarchical", 120)])
def test_fuzzed_model_outputs_never_raise_out_of_step(data_root, tmp_path, fmt, n):
    env = RSEnv(data_root, tmp_path / "ws", mode="mock", action_format=fmt, toolset="all", max_obs_chars=OBS_CHARS)
    seen = []

    @fuzz_settings(n)
    @given(st.lists(model_outputs(TOOLS, fmt), min_size=1, max_size=3))
    def run(turns):
        env.reset(TASK)
        for text in turns:
            res = env.step(text)
            assert step_problem(res, env.max_obs_chars) is None, (text[:300], step_problem(res, env.max_obs_chars))
            seen.append(res.error_kind)

    run()
    env.close()
    # the generator reaches the parser's errors, the pipeline's errors and successful calls
    assert {"parse_error", "schema_error", None} <= set(seen)


def test_fuzzed_codeact_turns_parse_or_give_a_parse_error():
    @fuzz_settings(150)
    @given(model_outputs(TOOLS, "codeact"))
    def run(text):
        if len(text) <= MAX_ACTION_CHARS:  # longer turns are refused by env.step before parsing
            assert codeact_parse_problem(text) is None

    run()
