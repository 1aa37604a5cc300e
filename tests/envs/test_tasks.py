"""TaskSpec / AnswerSpec validation and task files: round trip, one-line errors naming task and field."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from earthrl.envs.tasks import (AnswerSpec, TaskFileError, TaskSpec, load_suite, load_tasks_file,
                                save_tasks_file)


def _raw(tid="my/t1", **kw):
    d = {"id": tid, "question": {"IF": "1. spectral_index ...", "AP": "Mean NDVI?",
                                  "OW": "How green? Data: one Landsat scene."},
         "data": ["LT50350322008174PAC01"],
         "reference": [{"name": "spectral_index", "arguments": {"scene": "LT50350322008174PAC01", "index": "NDVI"}}],
         "answer": {"kind": "numeric", "value": 0.696, "unit": "", "tolerance": 0.01},
         "skill": "vegetation_drought", "split": "test"}
    d.update(kw)
    return d


def test_answer_kinds_validate():
    assert AnswerSpec(kind="numeric", value="0.5").value == 0.5
    ch = AnswerSpec(kind="choice", value="B", options={"A": "increase", "B": "decrease"})
    assert ch.options["B"] == "decrease"
    with pytest.raises(ValidationError, match="not one of the option letters"):
        AnswerSpec(kind="choice", value="C", options={"A": "x", "B": "y"})
    with pytest.raises(ValidationError, match="needs options"):
        AnswerSpec(kind="choice", value="A")
    with pytest.raises(ValidationError, match="needs a number"):
        AnswerSpec(kind="numeric", value="about half")
    with pytest.raises(ValidationError, match="greater than or equal"):
        AnswerSpec(value=1.0, tolerance=-0.1)
    with pytest.raises(ValidationError, match="phrasings"):
        TaskSpec.model_validate(_raw(question={"IF": "a", "XX": "b"}))


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_save_load_round_trip(tmp_path, suffix):
    tasks = [TaskSpec.model_validate(_raw()),
             TaskSpec.model_validate(_raw("my/t2", answer={"kind": "choice", "value": "A",
                                                           "options": {"A": "0.70", "B": "0.31"}}))]
    path = save_tasks_file(tasks, tmp_path / f"suite{suffix}")
    assert load_tasks_file(path) == tasks
    assert [t.id for t in load_suite(str(path), split="test")] == ["my/t1", "my/t2"]


def _one_line_error(path) -> str:
    with pytest.raises(TaskFileError) as e:
        load_tasks_file(path)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_malformed_jsonl_names_line_task_and_field(tmp_path):
    bad = _raw("my/t2")
    del bad["answer"]["value"]
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps(_raw()) + "\n" + json.dumps(bad) + "\n")
    msg = _one_line_error(p)
    assert msg.startswith(f"{p}:line 2: task 'my/t2': field answer.value:")
    assert "Field required" in msg


def test_malformed_json_choice_and_missing_id(tmp_path):
    p = tmp_path / "s.json"
    bad = _raw("my/t9", answer={"kind": "choice", "value": "D", "options": {"A": "x", "B": "y"}})
    p.write_text(json.dumps({"tasks": [_raw(), bad]}))
    msg = _one_line_error(p)
    assert "task 1: task 'my/t9': field answer:" in msg and "option letters ['A', 'B']" in msg
    noid = _raw()
    del noid["id"]
    p.write_text(json.dumps([noid]))
    assert "task without id: field id: Field required" in _one_line_error(p)
    p.write_text(json.dumps([_raw(), _raw()]))
    assert "task 'my/t1': field id: duplicate id" in _one_line_error(p)
    p.write_text("[{")
    assert "not JSON" in _one_line_error(p)
