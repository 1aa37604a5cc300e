"""ThinkGeo loader (envs/benchmarks/thinkgeo.py) on a small hand-written file in ThinkGeo's layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from earthrl.envs.benchmarks.thinkgeo import ThinkGeoFormatError, build_thinkgeo, load_thinkgeo, thinkgeo_answers
from earthrl.envs.core.tasks import SKILLS, SUITES
from earthrl.rewards.metrics.thinkgeo import answer_score, score_thinkgeo, steps_from_calls


def _call(name, **args):
    return {"role": "assistant", "thought": "t", "tool_calls": [{"type": "function",
                                                                  "function": {"name": name, "arguments": args}}]}


SAMPLE = {
    "0": {"tools": [{"name": "ObjectDetection"}, {"name": "CountGivenObject"}],
          "files": [{"type": "image", "path": "image/harbor.png"}],
          "dialogs": [{"role": "user", "content": "How many ships are docked in the harbor? "},
                      _call("ObjectDetection", image="image/harbor.png"),
                      {"role": "tool", "name": "ObjectDetection", "content": {"type": "text", "content": "..."}},
                      _call("CountGivenObject", image="image/harbor.png", text="ship"),
                      {"role": "tool", "name": "CountGivenObject", "content": {"type": "text", "content": "3"}},
                      {"role": "assistant", "content": "There are three ships."}],
          "gt_answer": {"whitelist": [["3", "three"], ["ship", "ships"]], "blacklist": None}},
    "1": {"tools": [{"name": "DrawBox"}],
          "files": [{"type": "image", "path": "image/airport.png"}],
          "dialogs": [{"role": "user", "content": "Draw a box around the largest airplane."},
                      _call("TextToBbox", image="image/airport.png", text="largest airplane"),
                      _call("DrawBox", image="image/airport.png", bbox="(10, 20, 30, 40)"),
                      {"role": "assistant", "content": "Done."}],
          "gt_answer": None},
}


def _write(folder: Path, data) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "ThinkGeoBench.json").write_text(data if isinstance(data, str) else json.dumps(data))
    return folder


def test_loads_sample_in_thinkgeo_layout(tmp_path):
    tasks = load_thinkgeo(_write(tmp_path / "tg", SAMPLE))
    assert [t.id for t in tasks] == ["thinkgeo/0", "thinkgeo/1"]
    t0, t1 = tasks
    assert t0.question == {"AP": "How many ships are docked in the harbor?"}
    assert t0.data == ["image/harbor.png"]
    assert [c.model_dump() for c in t0.reference] == [
        {"name": "ObjectDetection", "arguments": {"image": "image/harbor.png"}},
        {"name": "CountGivenObject", "arguments": {"image": "image/harbor.png", "text": "ship"}}]
    assert (t0.answer.kind, t0.answer.value) == ("text", "3; ship")
    assert (t1.answer.kind, t1.answer.value) == ("text", "")  # image-generation task
    assert all(t.skill in SKILLS for t in tasks) and t0.split == "test"
    answers = thinkgeo_answers(tmp_path / "tg")
    assert answers["thinkgeo/1"] is None and answers["thinkgeo/0"]["whitelist"][0] == ["3", "three"]
    assert answer_score("I see 3 ships", answers["thinkgeo/0"]) == 1.0


def test_scoring_a_replayed_reference_is_perfect(tmp_path):
    """Replaying each reference (calls + the dialog's answer) scores 1 on all five metrics."""
    folder = _write(tmp_path / "tg", SAMPLE)
    answers = thinkgeo_answers(folder)
    episodes = []
    for t in load_thinkgeo(folder):
        final = SAMPLE[t.id.removeprefix("thinkgeo/")]["dialogs"][-1]["content"]
        gt = answers[t.id]
        ref = steps_from_calls([c.model_dump() for c in t.reference], answer=final if gt else None)
        episodes.append((list(ref), ref, gt))
    assert score_thinkgeo(episodes) == {"inst": 1.0, "tool": 1.0, "arg": 1.0, "ans": 1.0, "ans_i": 1.0}


@pytest.mark.parametrize("data, match", [
    ("{not json", "not valid JSON"),
    ({"0": {**SAMPLE["0"], "dialogs": []}}, r"thinkgeo/0: field 'dialogs'"),
    ({"0": {**SAMPLE["0"], "dialogs": [{"role": "assistant", "content": "x"}]}}, r"thinkgeo/0: field 'dialogs\[0\]\.content'"),
    ({"0": {k: v for k, v in SAMPLE["0"].items() if k != "gt_answer"}}, r"thinkgeo/0: field 'gt_answer'"),
    ({"0": {**SAMPLE["0"], "gt_answer": {"whitelist": []}}}, r"thinkgeo/0: field 'gt_answer\.whitelist'"),
    ({"0": {**SAMPLE["0"], "files": [{"type": "image"}]}}, r"thinkgeo/0: field 'files'"),
    ({"0": {**SAMPLE["0"], "dialogs": [SAMPLE["0"]["dialogs"][0],
                                       {"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}]}},
     r"thinkgeo/0: field 'dialogs\[1\]\.tool_calls\[\]\.function\.name'"),
])
def test_malformed_file_names_task_and_field(tmp_path, data, match):
    with pytest.raises(ThinkGeoFormatError, match=match):
        load_thinkgeo(_write(tmp_path / "bad", data))


def test_suite_registration(tmp_path, monkeypatch):
    assert SUITES["thinkgeo"] is build_thinkgeo
    monkeypatch.delenv("EARTHRL_THINKGEO", raising=False)
    with pytest.raises(FileNotFoundError, match="EARTHRL_THINKGEO"):
        build_thinkgeo(tmp_path)
    assert len(build_thinkgeo(_write(tmp_path / "tg", SAMPLE))) == 2
