"""Replay of the fuzz regression corpus (``tests/fuzz_corpus/*.jsonl``): every input that ever
raised out of ``env.step``, hung a parser or exhausted memory. Each row: ``format`` (an action
format, or ``codeact_parse`` for the parser only), ``mode``, ``turns`` (stepped in order), the
``kind`` and an observation ``needle`` expected of the last turn, and ``why`` it is there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from earthrl.bench.fuzz_cases import OBS_CHARS, TASK, codeact_parse_problem, step_problem
from earthrl.envs.core.env import RSEnv

CORPUS = Path(__file__).parents[1] / "fuzz_corpus"
ROWS = [json.loads(line) for p in sorted(CORPUS.glob("*.jsonl"))
        for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_corpus_holds_every_class_of_issue_9():
    ids = {r["id"] for r in ROWS}
    assert {"deep-list", "huge-integer", "quadratic-tag-whitespace", "submetre-resample"} <= ids
    assert len(ids) == len(ROWS)  # ids are unique


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_corpus_input_is_an_observation(data_root, tmp_path, row):
    if row["format"] == "codeact_parse":
        assert codeact_parse_problem(row["turns"][-1]) is None
        return
    env = RSEnv(data_root, tmp_path / "ws", mode=row["mode"], action_format=row["format"],
                toolset="all", max_obs_chars=OBS_CHARS)
    env.reset(TASK)
    for text in row["turns"]:
        res = env.step(text)
        assert step_problem(res, env.max_obs_chars) is None, step_problem(res, env.max_obs_chars)
    env.close()
    assert res.error_kind == row["kind"], res.observation
    assert row["needle"] in res.observation
