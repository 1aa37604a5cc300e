"""ThinkGeo loader: ThinkGeo's benchmark file as EarthRL TaskSpecs.

ThinkGeo (Shabbir et al. 2025, mbzuai-oryx/ThinkGeo; 486 tasks, 1,778 tool steps over
optical RGB and SAR imagery) ships one JSON file, ``ThinkGeoBench.json``, read by its
OpenCompass loader (``ThinkGeoBenchDataset.load``) in GTA's layout::

    {"<idx>": {
        "tools":   [{"name": "ObjectDetection", ...}, ...],        # tools offered
        "files":   [{"type": "image", "path": "image/xyz.png"}],   # relative to the folder
        "dialogs": [{"role": "user", "content": "<query>"},
                    {"role": "assistant", "thought": "...",
                     "tool_calls": [{"type": "function",
                                     "function": {"name": "...", "arguments": {...}}}]},
                    {"role": "tool", "name": "...", "content": {...}},
                    ...,
                    {"role": "assistant", "content": "<final answer>"}],
        "gt_answer": {"whitelist": [[alias, ...], ...], "blacklist": [[...]] | null}
                     | ["free-text reference", ...]      # open answers
                     | null,                             # image-generation tasks
        "evaluation": [{"question": "..."}]              # optional LLM-judge checks
    }, ...}

(The dataset itself is on Hugging Face and is not fetched by EarthRL; this layout is the one
ThinkGeo's own loader reads, and the tests use a small hand-written file in it.)

Each task becomes ``TaskSpec(id="thinkgeo/<idx>", question={"AP": query}, data=[file paths],
reference=[assistant tool calls], answer, skill, template="thinkgeo", split="test")``.
ThinkGeo queries state only the goal, hence the ``AP`` phrasing. The answer is
``AnswerSpec(kind="text", gt_answer=<the task's gt_answer>)`` whose value joins the first alias of each
whitelist group with ``"; "`` (a list answer gives its first text; an image-generation task gives ``""``
and no ``gt_answer``); the outcome check grades a final answer against ``gt_answer`` as ThinkGeo's Ans. does
(:func:`earthrl.rewards.metrics.thinkgeo.answer_score`: every whitelist group named, no blacklist alias;
or equal to one of the reference texts). :func:`thinkgeo_answers` gives the file's ``gt_answer`` by task.

Malformed files raise :class:`ThinkGeoFormatError` naming the task and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from earthrl.envs.benchmarks.earthbench import benchmark_folder, dialog_tool_calls, guess_skill
from earthrl.envs.core.tasks import AnswerSpec, TaskSpec, ToolCall, register_suite

ID_PREFIX = "thinkgeo/"
DATA_FILE = "ThinkGeoBench.json"
#: Environment variable naming the ThinkGeo folder for the ``thinkgeo`` suite.
FOLDER_ENV = "EARTHRL_THINKGEO"


class ThinkGeoFormatError(ValueError):
    """ThinkGeoBench.json does not have the expected layout (the message names task and field)."""


def _fail(tid: str, field: str, problem: str) -> ThinkGeoFormatError:
    return ThinkGeoFormatError(f"ThinkGeo task {tid}: field {field!r} {problem}")


def read_thinkgeo(folder: Path) -> dict[str, Any]:
    """The parsed ``<folder>/ThinkGeoBench.json``: ``{index: task}``.

    Raises:
        FileNotFoundError: the file is missing. ThinkGeoFormatError: not JSON, or not an object.
    """
    path = Path(folder) / DATA_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: give the ThinkGeo folder that holds {DATA_FILE}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ThinkGeoFormatError(f"{DATA_FILE} is not valid JSON ({e}); re-download it") from None
    if not isinstance(data, dict):
        raise ThinkGeoFormatError(f"{DATA_FILE} must map task indices to tasks, got {type(data).__name__}")
    return data


def _answer(tid: str, gt) -> AnswerSpec:
    if gt is None:
        return AnswerSpec(kind="text", value="")
    if isinstance(gt, dict):
        groups = gt.get("whitelist")
        if not isinstance(groups, list) or not groups:
            raise _fail(tid, "gt_answer.whitelist", "must be a non-empty list of alias lists")
        first = [g if isinstance(g, str) else (g[0] if g else "") for g in groups]
        return AnswerSpec(kind="text", value="; ".join(str(a) for a in first), gt_answer=gt)
    if isinstance(gt, list) and gt:
        return AnswerSpec(kind="text", value=str(gt[0]), gt_answer=[str(t) for t in gt])
    raise _fail(tid, "gt_answer", "must be a whitelist dict, a list of texts or null")


def load_thinkgeo(folder: Path) -> list[TaskSpec]:
    """ThinkGeo tasks from ``<folder>/ThinkGeoBench.json``, ordered by index.

    Raises:
        FileNotFoundError: the file is missing. ThinkGeoFormatError: malformed JSON or task
        (the message names the task and the field).
    """
    data = read_thinkgeo(folder)
    tasks = []
    for key in sorted(data, key=lambda k: (not str(k).isdigit(), int(k) if str(k).isdigit() else 0, str(k))):
        tid, item = ID_PREFIX + str(key), data[key]
        if not isinstance(item, dict):
            raise _fail(tid, "(task)", "must be an object")
        dialogs = item.get("dialogs")
        if not isinstance(dialogs, list) or not dialogs:
            raise _fail(tid, "dialogs", "must be a non-empty list")
        query = dialogs[0].get("content") if isinstance(dialogs[0], dict) else None
        if not isinstance(query, str) or dialogs[0].get("role") != "user":
            raise _fail(tid, "dialogs[0].content", "must be the user's query (a string)")
        files = item.get("files") or []
        if not isinstance(files, list) or any(not isinstance(f, dict) or "path" not in f for f in files):
            raise _fail(tid, "files", "must be a list of {type, path}")
        if "gt_answer" not in item:
            raise _fail(tid, "gt_answer", "is missing (use null for image-generation tasks)")
        calls = [ToolCall(**c) for c in dialog_tool_calls(dialogs, lambda f, p, tid=tid: _fail(tid, f, p))]
        tasks.append(TaskSpec(id=tid, question={"AP": query.strip()}, data=[str(f["path"]) for f in files],
                              reference=calls, answer=_answer(tid, item["gt_answer"]),
                              skill=guess_skill(" ".join([query, *(c.name for c in calls)])),
                              template="thinkgeo", toolset="full", split="test"))
    return tasks


def thinkgeo_answers(folder: Path) -> dict[str, Any]:
    """``{task id: gt_answer as in the file}`` (whitelist dict, list of texts, or None)."""
    return {ID_PREFIX + str(k): v.get("gt_answer") for k, v in read_thinkgeo(folder).items() if isinstance(v, dict)}


@register_suite("thinkgeo")
def build_thinkgeo(data_root: Path) -> list[TaskSpec]:
    """Suite builder: ThinkGeo from ``$EARTHRL_THINKGEO``, else from ``data_root`` if it holds the file.

    Raises:
        FileNotFoundError: neither names a ThinkGeo folder (says to set ``EARTHRL_THINKGEO``).
    """
    return load_thinkgeo(benchmark_folder(FOLDER_ENV, data_root, DATA_FILE, "ThinkGeo"))
