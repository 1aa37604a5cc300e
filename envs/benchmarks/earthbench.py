"""Earth-Bench loader: Earth-Agent's 248 tasks as EarthRL TaskSpecs.

Earth-Bench (Earth-Agent, opendatalab/Earth-Agent) is read from a folder the user gives, laid
out as Earth-Agent distributes it::

    <folder>/question.json                 248 tasks keyed "1".."248"
    <folder>/extracted_tool_calls_GT.json  reference calls [{question_index, tool_calls, final_answer}]
    <folder>/data/questionN/...            rasters (optional; distributed separately)

Each task becomes ``TaskSpec(id="earthbench/N", question={"IF", "AP"}, data=[...],
reference=[ToolCall], answer=AnswerSpec, skill, template="earthbench", split="test")``:

- ``question``: the Instruction-Following and Autonomous-Planning phrasings from
  ``evaluation[*].question`` (matched by their ``type``, whose case and order vary: tasks
  189–248 list AP first). For a multiple-choice task the options are appended as lines
  ``"A. …"`` so that any prompt shows them.
- ``data``: the task's data path relative to ``<folder>/data`` (Earth-Bench's
  ``benchmark/data/`` prefix removed), e.g. ``"question1"`` or
  ``"question173/Reykholt_B10_2024-01-18.tif"``; the folder need not exist to load.
- ``answer``: ``AnswerSpec(kind="choice", value=letter, options={"A": …})``; the two tasks
  without choices (163, 173) are numeric with the tolerance of the stated rounding
  (half a unit of the last decimal of the whitelist value).
- ``skill``: one of the seven skill ids, from keywords of the question and the reference
  tool names (:data:`SKILL_KEYWORDS`, first match wins; default ``spectral_index``).

Known quirks of the files, and what EarthRL does (counts verified on commit 5df54a934f3e):

1. **Answer disagreements.** The answer exists three times: ``evaluation[*].gt_answer.whitelist``
   (question.json), the reference dialog's last assistant message, and ``final_answer`` of
   the reference-call file (which Earth-Agent's scripts score against). As letters they
   disagree on 33 tasks (:func:`answer_disagreements`; task 215 differs only in format,
   ``["A"]`` vs ``"A"``): 2 tasks lack a ``final_answer`` (43, 164); 4 dialogs end in a tool
   value, not a letter (110, 125, 182, 183); on 8 tasks the whitelist disagrees with both the
   dialog and ``final_answer`` (211, 213, 227, 232, 234, 240, 241, 246); on 19 the
   ``final_answer`` disagrees with both the dialog and the whitelist. We
   checked the reference dialog's own tool outputs against the options: on all 8 whitelist
   disagreements the dialog's letter is the one its evidence supports (e.g. 211: 9.3 courts,
   ceil 10 → "10" = B, whitelist D); of the 19 ``final_answer`` disagreements, the evidence
   supports the dialog's letter on 17 (e.g. 217: area 98963 → "About 90000" = C, as dialog
   and whitelist say, ``final_answer`` B), is a placeholder on 143, and supports
   ``final_answer`` only on 107 (difference 0.034472 → "0.034" = C; dialog and whitelist say B). **EarthRL's truth
   (``answer_source="dialog"``, default) is therefore the reference dialog's final letter,
   falling back to the whitelist when the dialog ends without a letter, with the evidence
   override of :data:`EVIDENCE_OVERRIDES`.** ``answer_source="whitelist"`` or
   ``"reference_file"`` select the other sources; :func:`answer_disagreements` lists them all.
   Earth-Agent-compatible scoring (:mod:`earthrl.rewards.metrics.earthbench`) always uses
   ``final_answer``, as Earth-Agent does.
2. **Question 43 has no reference calls** in ``extracted_tool_calls_GT.json`` (247 entries).
   EarthRL rebuilds its reference from the reference dialog's tool calls in question.json.
   Earth-Agent's scripts never score it.
3. **Batched reference calls.** Reference calls often run one tool over a list of files (e.g.
   ``compute_tvdi(lst_path=[91 paths], …)``) where a live agent calls it per file. The
   reference is kept exactly as published (so Earth-Bench metrics stay comparable): a per-file
   agent gets Efficiency > 1 and loses Exact-Match/Parameter credit from the first such step.
4. **Argument names differ from tool signatures** in some reference calls. The reference
   keeps Earth-Bench's names; mapping them to EarthRL tools is ``envs/benchmarks/earthbench_map.py``'s job.

Malformed files raise :class:`EarthBenchFormatError` naming the task and the field.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from earthrl.envs.core.tasks import AnswerSpec, TaskSpec, ToolCall, register_suite

ID_PREFIX = "earthbench/"
#: Earth-Agent scores entries [188:] of its reference file, i.e. questions 190..248.
OFFICIAL_TASK_IDS = tuple(f"{ID_PREFIX}{i}" for i in range(190, 249))
#: Environment variable naming the Earth-Bench folder for the ``earthbench`` suite.
FOLDER_ENV = "EARTHRL_EARTHBENCH"
QUESTION_FILE = "question.json"
REFERENCE_FILE = "extracted_tool_calls_GT.json"
ANSWER_SOURCES = ("dialog", "whitelist", "reference_file")

#: Answers fixed by the reference dialog's own tool evidence (see quirk 1): task -> letter.
EVIDENCE_OVERRIDES = {"107": "C"}

#: Skill by keywords (regex, searched in the lower-cased question + reference tool names);
#: the first skill with a hit wins.
SKILL_KEYWORDS: tuple[tuple[str, str], ...] = (
    ("vegetation_drought", r"tvdi|drought|dryness|\bvci\b|\bvhi\b|\btci\b|vegetation condition"),
    ("cloud_masking", r"cloud"),
    ("water_flood", r"flood|inundat|\bndwi\b|mndwi|water|turbidity|ndti|\blake\b|\briver\b"),
    ("lst_inversion", r"\blst\b|surface temperature|brightness temperature|thermal|\bb10\b|lst_"),
    ("change_trend", r"trend|change|mann|sen's|slope|increase|decrease|annual|year"),
    ("land_cover", r"land cover|landcover|classif|urban|building|detect|bounding box|bbox|"
                   r"centroid|segment|count|sam2|sm3det|instructsam|remotesam|remoteclip|mscn"),
)
DEFAULT_SKILL = "spectral_index"


class EarthBenchFormatError(ValueError):
    """An Earth-Bench file does not have the expected layout (the message names task and field)."""


def task_id(index: int | str) -> str:
    """EarthRL id of Earth-Bench question ``index`` (``"190"`` or ``"question190"``) → ``"earthbench/190"``."""
    return ID_PREFIX + str(index).removeprefix("question")


def guess_skill(text: str) -> str:
    """Skill id for a task text by :data:`SKILL_KEYWORDS` (default ``"spectral_index"``)."""
    low = text.lower()
    for skill, pattern in SKILL_KEYWORDS:
        if re.search(pattern, low):
            return skill
    return DEFAULT_SKILL


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: give the Earth-Bench folder that holds "
                                f"{QUESTION_FILE} and {REFERENCE_FILE}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise EarthBenchFormatError(f"{path.name} is not valid JSON ({e}); re-download it") from None


def _fail(task: str, field: str, problem: str) -> EarthBenchFormatError:
    return EarthBenchFormatError(f"Earth-Bench task {task}: field {field!r} {problem}")


def load_reference_file(folder: Path) -> dict[str, dict]:
    """The reference-call file as ``{"earthbench/N": {"calls": [{"name", "arguments"}], "final_answer": str | None}}``.

    Order is the file's (Earth-Agent's scoring slice is positional). Calls keep Earth-Bench's
    ``input`` dicts unchanged as ``arguments``.

    Raises:
        FileNotFoundError: the file is missing. EarthBenchFormatError: an entry lacks
        ``question_index``/``tool_calls``, a call is not ``{"name", "input": dict}``.
    """
    raw = _read_json(Path(folder) / REFERENCE_FILE)
    if not isinstance(raw, list):
        raise EarthBenchFormatError(f"{REFERENCE_FILE} must be a list of entries, got {type(raw).__name__}")
    out = {}
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or "question_index" not in entry:
            raise _fail(f"#{i} of {REFERENCE_FILE}", "question_index", "is missing")
        tid = task_id(entry["question_index"])
        calls = entry.get("tool_calls")
        if not isinstance(calls, list):
            raise _fail(tid, "tool_calls", f"must be a list, got {type(calls).__name__}")
        parsed = []
        for j, c in enumerate(calls):
            if not isinstance(c, dict) or not isinstance(c.get("name"), str):
                raise _fail(tid, f"tool_calls[{j}].name", "must be a string")
            if not isinstance(c.get("input", {}), dict):
                raise _fail(tid, f"tool_calls[{j}].input", f"must be a dict, got {type(c['input']).__name__}")
            parsed.append({"name": c["name"], "arguments": c.get("input", {})})
        fa = entry.get("final_answer")
        out[tid] = {"calls": parsed, "final_answer": None if fa is None else str(fa).strip()}
    return out


def dialog_tool_calls(dialogs: list, fail: Callable[[str, str], Exception]) -> list[dict]:
    """Tool calls ``[{"name", "arguments"}]`` of a GTA-style dialog (Earth-Bench's question.json
    and ThinkGeo share the layout: assistant turns carry ``tool_calls[].function.{name, arguments}``,
    arguments a dict or a JSON string).

    Args:
        fail: ``fail(field, problem) -> Exception`` raised for a malformed turn.
    """
    calls = []
    for i, turn in enumerate(dialogs):
        if not isinstance(turn, dict) or "role" not in turn:
            raise fail(f"dialogs[{i}].role", "is missing")
        for tc in turn.get("tool_calls") or []:
            fn = tc.get("function") if isinstance(tc, dict) else None
            where = f"dialogs[{i}].tool_calls[].function"
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise fail(f"{where}.name", "must be a string")
            args = fn.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:
                    raise fail(f"{where}.arguments", "is not JSON") from None
            if not isinstance(args, dict):
                raise fail(f"{where}.arguments", "must be a dict")
            calls.append({"name": fn["name"], "arguments": args})
    return calls


def _letter(value) -> str | None:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, str) and re.fullmatch(r"\s*\(?([A-Ha-h])\)?\s*", value):
        return value.strip().strip("()").upper()
    return None


def _phrasings(tid: str, evaluation) -> dict[str, dict]:
    if not isinstance(evaluation, list) or not evaluation:
        raise _fail(tid, "evaluation", "must be a non-empty list of phrasings")
    out = {}
    for k, ev in enumerate(evaluation):
        kind = str(ev.get("type", "")).lower() if isinstance(ev, dict) else ""
        key = {"instruction following": "IF", "autonomous planning": "AP"}.get(kind)
        if key is None:
            raise _fail(tid, f"evaluation[{k}].type", f"must be 'Instruction Following' or "
                                                     f"'Autonomous Planning', got {kind!r}")
        if not isinstance(ev.get("question"), str):
            raise _fail(tid, f"evaluation[{k}].question", "must be a string")
        if not isinstance(ev.get("gt_answer"), dict) or "whitelist" not in ev["gt_answer"]:
            raise _fail(tid, f"evaluation[{k}].gt_answer.whitelist", "is missing")
        out[key] = ev
    return out


def _answer(tid: str, task: dict, phr: dict, ref_final: str | None, source: str) -> AnswerSpec:
    choices = task.get("choices")
    whitelist = next(iter(phr.values()))["gt_answer"]["whitelist"]
    if not choices:
        text = str(whitelist[0] if isinstance(whitelist, list) else whitelist).strip()
        try:
            value = float(text)
        except ValueError:
            return AnswerSpec(kind="text", value=text)
        decimals = len(text.partition(".")[2])
        return AnswerSpec(kind="numeric", value=value, tolerance=0.5 * 10 ** -decimals)
    if not isinstance(choices, list):
        raise _fail(tid, "choices", f"must be a list, got {type(choices).__name__}")
    options = {chr(ord("A") + i): str(c) for i, c in enumerate(choices)}
    index = tid.removeprefix(ID_PREFIX)
    dialog = task["dialogs"][-1].get("content") if task.get("dialogs") else None
    candidates = {"whitelist": _letter(whitelist), "reference_file": _letter(ref_final),
                  "dialog": EVIDENCE_OVERRIDES.get(index) or _letter(dialog) or _letter(whitelist)}
    letter = candidates[source]
    if letter is None and source == "reference_file":
        letter = _letter(whitelist)  # 43 and 164 have no final_answer
    if letter is None or letter not in options:
        raise _fail(tid, "evaluation[].gt_answer.whitelist", f"gives no choice letter among {sorted(options)}")
    return AnswerSpec(kind="choice", value=letter, options=options)


def _data(tid: str, phr: dict) -> list[str]:
    paths = [ev["data"] for ev in phr.values() if ev.get("data")]
    if not paths:
        raise _fail(tid, "evaluation[].data", "is missing on both phrasings")
    # stripped: question 209's path ends in two spaces, which no folder of the distribution has
    return [re.sub(r"^(benchmark/)?data/", "", str(paths[0]).strip())]


def load_earthbench(folder: Path, *, answer_source: str = "dialog") -> list[TaskSpec]:
    """The 248 Earth-Bench tasks, ordered by question number.

    Args:
        folder: the Earth-Bench folder (module docstring).
        answer_source: which answer is the truth: ``"dialog"`` (default, quirk 1),
            ``"whitelist"`` or ``"reference_file"``.

    Raises:
        ValueError: unknown ``answer_source``. FileNotFoundError: a file is missing.
        EarthBenchFormatError: a malformed task (message names the task and the field).
    """
    if answer_source not in ANSWER_SOURCES:
        raise ValueError(f"answer_source must be one of {ANSWER_SOURCES}, got {answer_source!r}")
    folder = Path(folder)
    questions = _read_json(folder / QUESTION_FILE)
    if not isinstance(questions, dict):
        raise EarthBenchFormatError(f"{QUESTION_FILE} must map question numbers to tasks")
    refs = load_reference_file(folder)
    tasks = []
    for key in sorted(questions, key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0, k)):
        tid, task = task_id(key), questions[key]
        if not isinstance(task, dict):
            raise _fail(tid, "(task)", "must be an object")
        if not isinstance(task.get("dialogs"), list):
            raise _fail(tid, "dialogs", "must be a list")
        phr = _phrasings(tid, task.get("evaluation"))
        ref = refs.get(tid)
        calls = ref["calls"] if ref is not None else dialog_tool_calls(
            task["dialogs"], lambda field, problem, tid=tid: _fail(tid, field, problem))
        answer = _answer(tid, task, phr, ref and ref["final_answer"], answer_source)
        opts = "".join(f"\n{k}. {v}" for k, v in (answer.options or {}).items())
        question = {k: ev["question"].strip() + opts for k, ev in phr.items()}
        text = " ".join([*question.values(), *(c["name"] for c in calls)])
        tasks.append(TaskSpec(id=tid, question=question, data=_data(tid, phr),
                              reference=[ToolCall(**c) for c in calls], answer=answer,
                              skill=guess_skill(text), template="earthbench", toolset="full", split="test"))
    return tasks


def answer_disagreements(folder: Path) -> list[dict]:
    """Tasks whose answer sources disagree: ``[{"task", "whitelist", "dialog", "reference_file", "truth"}]``.

    ``truth`` is EarthRL's default (``answer_source="dialog"``); values are letters or None.
    """
    folder = Path(folder)
    questions = _read_json(folder / QUESTION_FILE)
    refs = load_reference_file(folder)
    truth = {t.id: t.answer.value for t in load_earthbench(folder)}
    out = []
    for key, task in questions.items():
        tid = task_id(key)
        if not task.get("choices"):
            continue
        wl = _letter(task["evaluation"][0]["gt_answer"]["whitelist"])
        dl = _letter(task["dialogs"][-1].get("content"))
        rf = _letter(refs[tid]["final_answer"]) if tid in refs else None
        if len({wl, dl, rf}) > 1:
            out.append({"task": tid, "whitelist": wl, "dialog": dl, "reference_file": rf, "truth": truth[tid]})
    return sorted(out, key=lambda d: int(d["task"].removeprefix(ID_PREFIX)))


@register_suite("earthbench")
def build_earthbench(data_root: Path) -> list[TaskSpec]:
    """Suite builder: Earth-Bench from ``$EARTHRL_EARTHBENCH``, else from ``data_root`` if it
    holds ``question.json``.

    Raises:
        FileNotFoundError: neither names an Earth-Bench folder (says to set ``EARTHRL_EARTHBENCH``).
    """
    return load_earthbench(benchmark_folder(FOLDER_ENV, data_root, QUESTION_FILE, "Earth-Bench"))


def benchmark_folder(env_var: str, data_root: Path, marker: str, what: str) -> Path:
    """Folder of an external benchmark: ``$env_var`` if set, else ``data_root`` if it holds ``marker``.

    Raises:
        FileNotFoundError: neither (the message says to give ``tasks.data`` or set ``env_var``).
    """
    folder = os.environ.get(env_var)
    if folder:
        return Path(folder).expanduser()
    if (Path(data_root) / marker).is_file():
        return Path(data_root)
    raise FileNotFoundError(f"{what} is not bundled with EarthRL and {data_root} does not hold {marker}: give "
                            f"its folder (the one with {marker}) as tasks.data=/path/to/folder, or set {env_var}")
