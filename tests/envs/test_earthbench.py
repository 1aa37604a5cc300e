"""Earth-Bench loader (envs/benchmarks/earthbench.py) on the real Earth-Bench files and on small bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from earthrl.envs.benchmarks.earthbench import (
    EarthBenchFormatError,
    answer_disagreements,
    build_earthbench,
    load_earthbench,
    load_reference_file,
)
from earthrl.envs.core.tasks import SKILLS, SUITES
from tests.paths import EARTHBENCH as EB
from tests.paths import EARTHBENCH_MISSING


@pytest.fixture(scope="module")
def eb() -> Path:
    if not (EB / "question.json").is_file():
        pytest.skip(reason=EARTHBENCH_MISSING)
    return EB


@pytest.fixture(scope="module")
def tasks(eb):
    return {t.id: t for t in load_earthbench(eb)}


def test_counts_and_question_43(eb, tasks):
    refs = load_reference_file(eb)
    assert len(tasks) == 248 and len(refs) == 247
    assert "earthbench/43" not in refs and "earthbench/43" in tasks
    raw = json.loads((eb / "question.json").read_text())["43"]
    dialog_names = [tc["function"]["name"] for d in raw["dialogs"] for tc in d.get("tool_calls") or []]
    assert [c.name for c in tasks["earthbench/43"].reference] == dialog_names == \
        ["get_filelist", "ATI", "calc_batch_image_mean_threshold"]
    # every other reference equals the reference file, arguments untouched
    for tid, r in refs.items():
        assert [c.model_dump() for c in tasks[tid].reference] == r["calls"]


def test_phrasings_choices_and_data(eb, tasks):
    assert all(set(t.question) == {"IF", "AP"} for t in tasks.values())
    t1 = tasks["earthbench/1"]
    assert t1.question["IF"].startswith("Based on temperature and vegetation data (NDVI and LST)")
    assert t1.question["AP"].endswith("A. Increasing dryness at 0.015 per year\nB. Decreasing dryness at 0.037 "
                                      "per year\nC. Decreasing dryness at 0.006 per year\nD. No significant trend "
                                      "observed")
    assert t1.answer.kind == "choice" and t1.answer.value == "B" and len(t1.answer.options) == 4
    assert t1.data == ["question1"] and t1.split == "test"
    # tasks 189-248 list the AP phrasing first (lower-case types): still mapped by type
    ev = json.loads((eb / "question.json").read_text())["200"]["evaluation"]
    assert [e["type"] for e in ev] == ["autonomous planning", "instruction following"]
    assert tasks["earthbench/200"].question["IF"].startswith(ev[1]["question"].strip())
    assert tasks["earthbench/200"].question["AP"].startswith(ev[0]["question"].strip())
    assert tasks["earthbench/173"].data == ["question173/Reykholt_B10_2024-01-18.tif"]
    raw209 = [e.get("data") for e in json.loads((eb / "question.json").read_text())["209"]["evaluation"]]
    assert "benchmark/data/question209  " in raw209  # the file's path ends in two spaces; the folder does not
    assert tasks["earthbench/209"].data == ["question209"]
    assert all(d == d.strip() for t in tasks.values() for d in t.data)
    kinds = {tid: t.answer.kind for tid, t in tasks.items() if t.answer.kind != "choice"}
    assert kinds == {"earthbench/163": "numeric", "earthbench/173": "numeric"}
    assert tasks["earthbench/163"].answer.value == 0.408 and tasks["earthbench/163"].answer.tolerance == 0.0005
    assert tasks["earthbench/173"].answer.value == -15.95
    assert all(t.skill in SKILLS for t in tasks.values())


def test_batched_reference_calls_kept_as_published(tasks):
    call = tasks["earthbench/1"].reference[1]
    assert call.name == "compute_tvdi" and isinstance(call.arguments["lst_path"], list)
    assert len(call.arguments["lst_path"]) > 50


def test_answer_truth_and_disagreements(eb, tasks):
    rows = {r["task"]: r for r in answer_disagreements(eb)}
    assert len(rows) == 33
    # whitelist disagrees with the dialog and the reference file: dialog evidence wins
    assert rows["earthbench/211"] == {"task": "earthbench/211", "whitelist": "D", "dialog": "B",
                                      "reference_file": "B", "truth": "B"}
    # reference file disagrees: dialog + whitelist win, except the documented override 107 -> C
    assert rows["earthbench/9"]["truth"] == "B" and rows["earthbench/9"]["reference_file"] == "A"
    assert rows["earthbench/107"]["truth"] == "C"
    # a dialog ending in a tool value falls back to the whitelist
    assert rows["earthbench/110"]["dialog"] is None and rows["earthbench/110"]["truth"] == "A"
    by_file = {t.id: t.answer.value for t in load_earthbench(eb, answer_source="reference_file")}
    by_list = {t.id: t.answer.value for t in load_earthbench(eb, answer_source="whitelist")}
    assert (by_file["earthbench/211"], by_list["earthbench/211"]) == ("B", "D")
    assert (by_file["earthbench/9"], by_list["earthbench/9"]) == ("A", "B")
    assert by_file["earthbench/43"] == "A"  # no final_answer: whitelist
    with pytest.raises(ValueError, match="answer_source"):
        load_earthbench(eb, answer_source="nope")


def test_suite_registration(eb, tmp_path, monkeypatch):
    assert SUITES["earthbench"] is build_earthbench
    monkeypatch.setenv("EARTHRL_EARTHBENCH", str(eb))
    assert len(build_earthbench(tmp_path)) == 248
    monkeypatch.delenv("EARTHRL_EARTHBENCH")
    with pytest.raises(FileNotFoundError, match="EARTHRL_EARTHBENCH"):
        build_earthbench(tmp_path)


def _task(**over):
    t = {"dialogs": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "A"}],
         "choices": ["x", "y"],
         "evaluation": [{"question": "if", "gt_answer": {"whitelist": "A"}, "data": "benchmark/data/question1",
                         "type": "Instruction Following"},
                        {"question": "ap", "gt_answer": {"whitelist": "A"}, "type": "Autonomous Planning"}]}
    t.update(over)
    return t


def _write(folder: Path, questions, refs):
    folder.mkdir(exist_ok=True)
    (folder / "question.json").write_text(questions if isinstance(questions, str) else json.dumps(questions))
    (folder / "extracted_tool_calls_GT.json").write_text(refs if isinstance(refs, str) else json.dumps(refs))
    return folder


def test_small_valid_folder_without_data(tmp_path):
    ref = [{"question_index": "question1", "tool_calls": [{"name": "get_filelist", "input": {"dir_path": "d"}}],
            "final_answer": "A"}]
    (t,) = load_earthbench(_write(tmp_path / "ok", {"1": _task()}, ref))
    assert t.id == "earthbench/1" and t.question == {"IF": "if\nA. x\nB. y", "AP": "ap\nA. x\nB. y"}
    assert [c.model_dump() for c in t.reference] == [{"name": "get_filelist", "arguments": {"dir_path": "d"}}]


@pytest.mark.parametrize("questions, refs, match", [
    ({"1": _task(evaluation=[{"question": "q", "gt_answer": {"whitelist": "A"}, "type": "Other"}])}, [],
     r"task earthbench/1: field 'evaluation\[0\]\.type'"),
    ({"1": _task(dialogs="nope")}, [], r"earthbench/1: field 'dialogs'"),
    ({"1": _task(choices=["x", "y"], evaluation=[{"question": "q", "gt_answer": {"whitelist": "Q"},
                                                   "data": "d", "type": "Autonomous Planning"}],
                 dialogs=[{"role": "assistant", "content": "nothing"}])}, [],
     r"earthbench/1: field 'evaluation\[\]\.gt_answer\.whitelist'"),
    ({"1": _task()}, [{"question_index": "question1", "tool_calls": [{"name": "f", "input": [1, 2]}]}],
     r"earthbench/1: field 'tool_calls\[0\]\.input'"),
    ({"1": _task()}, [{"tool_calls": []}], r"field 'question_index'"),
    ({"1": _task()}, "[{broken", r"extracted_tool_calls_GT.json is not valid JSON"),
])
def test_malformed_files_name_task_and_field(tmp_path, questions, refs, match):
    with pytest.raises(EarthBenchFormatError, match=match):
        load_earthbench(_write(tmp_path / "bad", questions, refs))


def test_missing_file_says_what_to_give(tmp_path):
    with pytest.raises(FileNotFoundError, match="Earth-Bench folder"):
        load_earthbench(tmp_path)
