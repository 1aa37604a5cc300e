"""Scoring Earth-Agent prediction folders: Earth-Bench compatibility mode and EarthRL's mode.

An Earth-Agent run folder holds ``extracted_tool_calls.json`` (``[{question_index, query,
tool_calls: [{name, input, output}]}]``) and ``results_summary_polished.json``
(``[{question_id, original_answer, final_answer}]``). :func:`load_run` turns it into
:class:`~earthrl.rewards.episode.EpisodeRecord` objects, counting (never raising on) bad input;
:func:`score_run` scores it.

Compatibility mode (``mode="earthbench"``) reproduces Earth-Agent's own evaluation scripts
(step-by-step and end-to-end; opendatalab/Earth-Agent) and thus its published table:

- the scored tasks are entries 188: of ``extracted_tool_calls_GT.json`` in file order, which
  — question 43 being absent from that file — are questions 190–248 (59 tasks, the RGB
  slice): :data:`OFFICIAL_TASK_IDS`;
- reference calls and the answer key come from that file (``final_answer``, not the
  question file's whitelist);
- a task missing from a prediction file is skipped (neither scored nor counted);
- the answer letter is extracted with Earth-Agent's rule (:func:`~earthrl.rewards.episode.extract_choice`);
  ``FAIL``/``UNKNOWN`` answers count as wrong;
- every metric is the plain mean over the evaluated tasks; Efficiency includes
  episodes with no calls (efficiency 0).

EarthRL mode (``mode="earthrl"``) differs only in: all 248 tasks; references and answers from
:func:`earthrl.envs.benchmarks.earthbench.load_earthbench` (question 43 scored with its dialog reference,
answers from its documented truth); a missing prediction counts 0 (except in Efficiency);
the answer letter is read strictly (``<Answer>X<Answer>`` or a bare letter — Earth-Agent's
"last standalone letter" fallback scores HTML error pages as answer "C").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from earthrl.envs.benchmarks.earthbench import (
    ID_PREFIX,
    load_earthbench,
    load_reference_file,
    task_id,
)
from earthrl.rewards.episode import EpisodeRecord
from earthrl.rewards.metrics.compute import compute_all, references_of

CALLS_FILE = "extracted_tool_calls.json"
ANSWERS_FILE = "results_summary_polished.json"


def _read_list(path: Path, problems: dict) -> list:
    if not path.is_file():
        problems["missing_file"].append(path.name)
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        problems["broken_file"].append(f"{path.name}: {e}")
        return []
    if not isinstance(data, list):
        problems["broken_file"].append(f"{path.name}: expected a list, got {type(data).__name__}")
        return []
    return data


def _index(entries: list, key: str, problems: dict) -> dict[str, dict]:
    out = {}
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not isinstance(e.get(key), (str, int)):
            problems["bad_entry"].append(f"#{i}: no {key!r}")
            continue
        out[task_id(e[key])] = e  # a repeated task keeps its last entry, as Earth-Agent's dict does
    return out


def load_run(pred_dir: Path, *, truth: Mapping[str, str | dict | None], mode: str,
             skills: Mapping[str, str] | None = None, known_tools: Iterable[str] | None = None,
             lenient: bool = True) -> tuple[list[EpisodeRecord], dict]:
    """Records of one Earth-Agent run folder.

    Args:
        pred_dir: folder with :data:`CALLS_FILE` and :data:`ANSWERS_FILE`.
        truth: ``{task id: choice letter | AnswerSpec dict | None}``: the answer key.
        mode: the phrasing the run used (``"IF"``/``"AP"``).
        skills: ``{task id: skill id}`` to fill ``record.skill``.
        known_tools: names of existing tools; calls to other names are marked
            ``error_kind="unknown_tool"`` (None: no check).
        lenient: Earth-Agent's answer extraction (True) or EarthRL's strict one
            (:func:`~earthrl.rewards.episode.extract_choice`).

    Returns:
        ``(records, problems)``: one record per task present in either file (a task with no
        calls entry has ``calls=None``; with no answer entry ``correct=None``), and
        ``{"missing_file": [...], "broken_file": [...], "bad_entry": [...],
        "bad_tool_calls": [ids], "non_dict_arguments": int, "unknown_tools": int,
        "no_answer": [ids], "no_calls": [ids]}``. Never raises on bad content.
    """
    pred_dir = Path(pred_dir)
    problems = {"missing_file": [], "broken_file": [], "bad_entry": [], "bad_tool_calls": [],
                "non_dict_arguments": 0, "unknown_tools": 0, "no_answer": [], "no_calls": []}
    calls = _index(_read_list(pred_dir / CALLS_FILE, problems), "question_index", problems)
    answers = _index(_read_list(pred_dir / ANSWERS_FILE, problems), "question_id", problems)
    known = set(known_tools) if known_tools is not None else None
    records = []
    for tid in sorted(set(calls) | set(answers), key=_order):
        entry = calls.get(tid)
        tool_calls = None if entry is None else entry.get("tool_calls")
        if entry is not None and not isinstance(tool_calls, list):
            problems["bad_tool_calls"].append(tid)
            tool_calls = None
        if tool_calls is None:
            problems["no_calls"].append(tid)
        ans = answers.get(tid)
        if ans is None:
            problems["no_answer"].append(tid)
        text = None if ans is None else (ans.get("final_answer") or ans.get("polished_answer") or "")
        rec = EpisodeRecord.from_earthbench_prediction(
            tid, tool_calls, text, None if ans is None else truth.get(tid), mode=mode,
            skill=(skills or {}).get(tid, ""), known_tools=known, lenient=lenient)
        for c in rec.calls or []:
            problems["non_dict_arguments"] += not isinstance(c["arguments"], dict)
            problems["unknown_tools"] += c.get("error_kind") == "unknown_tool"
        records.append(rec)
    return records, problems


def _order(tid: str):
    tail = tid.removeprefix(ID_PREFIX)
    return (0, int(tail), "") if tail.isdigit() else (1, 0, tail)


def score_run(pred_dir: Path, earthbench: Path, *, mode: str = "earthbench", phrasing: str | None = None,
              known_tools: Iterable[str] | None = None, **kwargs) -> dict:
    """Score an Earth-Agent run folder.

    Args:
        pred_dir: the run folder. earthbench: the Earth-Bench folder (question.json and the
            reference-call file).
        mode: ``"earthbench"`` (compatibility: reproduces Earth-Agent's numbers) or ``"earthrl"``.
        phrasing: ``"IF"``/``"AP"``; default from the folder name's suffix (``gpt5_AP`` → AP).
        **kwargs: passed to :func:`earthrl.rewards.metrics.compute.compute_all` (bootstrap settings,
            ``metrics``, ``task_ids``).

    Returns:
        :func:`~earthrl.rewards.metrics.compute.compute_all`'s dict, its ``skipped`` extended with the
        problems :func:`load_run` counted.
    """
    pred_dir = Path(pred_dir)
    phrasing = phrasing or ("IF" if pred_dir.name.upper().endswith("IF") else "AP")
    tasks = load_earthbench(earthbench)
    skills = {t.id: t.skill for t in tasks}
    if mode == "earthbench":
        ref_file = load_reference_file(earthbench)
        references = {tid: r["calls"] for tid, r in ref_file.items()}
        truth = {tid: r["final_answer"] or "" for tid, r in ref_file.items()}
    else:
        references = references_of(tasks)
        truth = {t.id: t.answer.model_dump() for t in tasks}
    records, problems = load_run(pred_dir, truth=truth, mode=phrasing, skills=skills, known_tools=known_tools,
                                 lenient=mode == "earthbench")
    result = compute_all(records, references, mode=mode, **kwargs)
    result["skipped"].update(problems)
    return result
