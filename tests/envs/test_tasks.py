"""TaskSpec / AnswerSpec validation and task files: round trip, one-line errors naming task and field."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from earthrl.envs.core.tasks import AnswerSpec, TaskFileError, TaskSpec, load_suite, load_tasks_file, save_tasks_file


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


def _line(tid: str = "my/t1", **changes) -> str:
    return json.dumps(_raw(tid, **changes)) + "\n"


def test_every_kind_of_unreadable_task_file_is_one_line_naming_it(tmp_path, monkeypatch):
    import os

    import earthrl.envs.core.tasks as tasks_mod

    folder = tmp_path / "x.jsonl"
    folder.mkdir()
    assert "is a folder, not a file" in _one_line_error(folder)
    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    assert "is a fifo, not a file" in _one_line_error(fifo)  # and does not block on open
    assert "no such file" in _one_line_error(tmp_path / "missing.jsonl")
    p = tmp_path / "none.json"
    p.write_text('{"tasks": []}')
    assert "holds no tasks" in _one_line_error(p)
    cases = {b"": "empty file", b"\n \n": "empty file", b"[]": "field (task): Input should be a valid dictionary",
             _line().encode()[:30] + b"\xff\xfe" + b"\n": "line 1: not UTF-8 (byte 0xff at offset 30)",
             b"[" * 100_000 + b"]" * 100_000: "nested deeper than 32 levels",
             _line(answer={"value": float("nan")}).encode(): "NaN is not JSON",
             _line().replace('"split"', '"x": ' + "9" * 5000 + ', "split"').encode(): "an integer of 5000 digits",
             _line().replace('"split"', '"skill": "a", "split"').encode(): "duplicate key 'skill'",
             _line(question={"IF": "mean \ud800 NDVI"}).encode(): "field question.IF: invalid unicode (lone surrogate",
             _line(data=["LT5", "\udfff"]).encode(): "field data.1: invalid unicode",
             _line(reference=[{"name": "a", "arguments": {"k\ud801": 1}}]).encode(): "field reference.0.arguments.k",
             _line(answer={"value": 0.5, "tolerance": -1}).encode(): "field answer.tolerance: Input should be greater",
             _line(question={"IF": "  "}).encode(): "field question: Value error, phrasing IF is empty",
             _line(split="validation").encode(): "field split: Input should be 'train' or 'test'",
             _line(id="").encode(): "field id: String should have at least 1 character",
             _line(data=[""]).encode(): "field data: Value error, a scene id is empty",
             _line(family="XYZ").encode(): "field family: Input should be 'SPA', 'PRA' or 'SAA'",
             _line(answer={"value": True}).encode(): "field answer.value: Value error, must be a number or a string"}
    for i, (content, expected) in enumerate(cases.items()):
        p = tmp_path / f"c{i}.jsonl"
        p.write_bytes(content)
        msg = _one_line_error(p)
        assert msg.startswith(str(p)) and expected in msg, (expected, msg)
    monkeypatch.setattr(tasks_mod, "MAX_TASK_FILE_BYTES", 100)
    big = tmp_path / "big.jsonl"
    big.write_text(_line() * 2)
    assert "larger than the 0 MiB cap on task files; split it" in _one_line_error(big)


def test_line_separators_inside_strings_do_not_split_jsonl_lines(tmp_path):
    p = tmp_path / "s.jsonl"
    p.write_text(_line(question={"IF": "a\u2028b\x1cc"}) + _line("my/t2"), encoding="utf-8")
    loaded = load_tasks_file(p)
    assert [t.question["IF"] for t in loaded][0] == "a\u2028b\x1cc" and loaded[1].origin == f"{p}:line 2"
    assert loaded[0].origin == f"{p}:line 1" and TaskSpec.model_validate(_raw()).origin == ""
