"""Replay mode (``env.mode=replay``): a call that matches a recorded call of the task's reference
returns that call's recorded output; no raster is read.

A *recording* is the list of calls a benchmark's reference trajectory made, each with the output
the tool gave (:class:`RecordedCall`); recording sources are registered by task template in
:data:`RECORDINGS` (Earth-Bench's: :mod:`earthrl.envs.benchmarks.earthbench_replay`; ThinkGeo's:
:mod:`earthrl.envs.benchmarks.thinkgeo_replay`; each from the folder the user gives). Per episode a :class:`ReplayBook` answers the calls.

**When two calls match** (each rule is tested in ``tests/envs/test_replay.py``):

1. *Same tool*, and the same arguments after validation by the tool's argument model: an alias
   of an argument name counts as the name (``image_path`` = ``input_image_path`` where the tool
   declares it), and an argument left out equals the argument at its default (``None`` and the
   model's default are dropped on both sides).
2. *Argument order* does not matter (arguments are compared as a mapping).
3. *Numbers*: ints, floats and numeric strings are one number, compared at 9 significant digits
   (``1``, ``1.0``, ``"1.0"`` and ``"1.000000000"`` match; ``0.5`` and ``0.6`` do not); ``true`` /
   ``false`` and the strings ``"true"`` / ``"false"`` are one boolean.
4. *Paths*: a string holding ``/`` or ``\\`` or ending in a file suffix is reduced to its last
   component (trailing slashes dropped), so ``benchmark/data/question1/a.tif``,
   ``question1/a.tif``, ``./a.tif`` and ``a.tif`` match, and a data folder
   ``benchmark/data/question1`` matches ``question1``.
5. *Spellings*: strings are compared stripped, case-folded and with runs of white space as one
   space (``"Mean"`` = ``"mean "``).
6. *Lists* are compared element by element, in order (a batch's order is its outputs' order); a
   one-element list equals its element (one file given as a batch of one).
7. *Output names* (arguments that only name the files a call writes: ``output_path``,
   ``output_filename``, ``save_name``, ``output_path_list`` … — :data:`~earthrl.envs.core.mock.OUTPUT_FIELDS`)
   are not compared. The files are registered under the names the call gave; a later call may
   name them by those names or by the recorded ones.
8. *Tool names*: one function served under two names (:data:`TOOL_ALIASES`: Earth-Agent's MCP base server
   serves ``get_filelist`` as ``mcp-base_get_filelist``, and Earth-Bench's references use both) is one tool.

A call matches the first unused recorded call with an equal key; once every such call was used,
the last one answers again (a repeated call of a deterministic tool returns the same output).

**Anything else** is an error observation of kind ``off_record`` (E = 1; not a hallucination:
the tool and the files exist, the recording has no result for these arguments). A call that
matches but reads a file the recording writes in an earlier step that this episode has not run
yet is ``hallucinated_path`` (the file would not exist).

**Artifacts**: the files a matched call lists (a folder listing) or writes (its output arguments,
and paths named in its recorded output such as ``"Result saved at …/ndwi.tif"``) are registered
as placeholder artifacts (no pixels, ``units="mock"``) with the call's lineage, so the episode
record, anchor states and later calls see them.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from earthrl.envs.core.mock import OUTPUT_FIELDS, register_placeholder
from earthrl.envs.data.artifacts import _EXTS, ArtifactRegistry, ToolError
from earthrl.envs.registry import Registry
from earthrl.envs.tools.registry import Tool, ToolResult

OFF_RECORD = "off_record"

RECORDINGS: Registry = Registry("recording source", ("earthrl.envs.benchmarks.earthbench_replay",
                                                     "earthrl.envs.benchmarks.thinkgeo_replay"))
"""Recording sources by task template: ``fn(folder: Path) -> {task id: [RecordedCall]}``."""

DATA_FOLDERS: Registry = Registry("task data folder", ("earthrl.envs.benchmarks.earthbench_replay",))
"""Benchmarks whose tasks read files by path (Earth-Bench), by task template: ``fn(root: Path, data: list[str])
-> Path``, the folder of a task's files under the data root ``root`` (``tasks.data``); execute mode runs their
tools on that folder (:attr:`~earthrl.envs.tools.registry.ToolContext.folder`)."""

_SUFFIX = re.compile(r"\.[A-Za-z][A-Za-z0-9]{1,4}$")
_SAVED = re.compile(r"[\w./\\ -]*?[\w.-]+\.(?:tif|tiff|png|jpg|jpeg|json|geojson|npy|csv)\b", re.IGNORECASE)
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")


@dataclass(frozen=True)
class RecordedCall:
    """One call of a reference trajectory with the output its tool gave.

    Attributes:
        name: the tool name; arguments: the call's arguments as recorded.
        output: the recorded output (any JSON value: a number, a list of file names, a text).
    """

    name: str
    arguments: dict
    output: Any


@functools.lru_cache(maxsize=4)
def load_recordings(source: str, folder: str) -> dict[str, list[RecordedCall]]:
    """The recordings ``{task id: [RecordedCall]}`` of source ``source`` (a task template in
    :data:`RECORDINGS`) read from ``folder``; cached per process (an env worker reads them once).

    Raises:
        KeyError: no recording source for ``source`` (names the ones there are).
        FileNotFoundError / ValueError: the source's files are missing or malformed.
    """
    if source not in RECORDINGS:
        raise KeyError(f"replay mode needs recorded tool outputs; tasks of template {source!r} have none "
                       f"(recorded suites: {', '.join(RECORDINGS)}); use env.mode=execute or mock")
    return RECORDINGS[source](Path(folder))


def is_path(text: str) -> bool:
    """Whether a string names a file or folder (rule 4): it holds ``/`` or ``\\`` or ends in a file suffix."""
    return "/" in text or "\\" in text or bool(_SUFFIX.search(text.strip()))


def file_name(text: str) -> str:
    """The last component of a path (trailing slashes dropped), stripped and case-folded."""
    return re.split(r"[/\\]", text.strip().rstrip("/\\"))[-1].strip().casefold()


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def normalise(value: Any, aliases: dict[str, str] | None = None) -> Any:
    """The comparison form of an argument value (rules 3-6 of the module docstring); ``aliases``
    maps a file name the episode gave an output to the recorded one.

    Returns a JSON-able value: ``["n", "1"]`` for numbers, ``["b", true]`` for booleans,
    ``["s", text]`` for strings (a path's last component, rule 4), lists and dicts recursively.
    """
    aliases = aliases or {}
    if isinstance(value, bool) or (isinstance(value, str) and value.strip().lower() in ("true", "false")):
        return ["b", value if isinstance(value, bool) else value.strip().lower() == "true"]
    num = _number(value)
    if num is not None:
        return ["n", f"{num:.9g}"]
    if isinstance(value, str):
        if is_path(value):
            name = file_name(value)
            return ["s", aliases.get(name, name)]
        return ["s", " ".join(value.split()).casefold()]
    if isinstance(value, (list, tuple)):
        if len(value) == 1:
            return normalise(value[0], aliases)
        return [normalise(v, aliases) for v in value]
    if isinstance(value, dict):
        return {str(k): normalise(v, aliases) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    return ["o", str(value)]


def validated(tool: Tool | None, arguments: dict) -> dict:
    """``arguments`` through ``tool``'s argument model (aliases merged, defaults filled); the raw
    arguments when there is no tool or they do not validate."""
    if tool is None:
        return dict(arguments)
    try:
        return tool.args_model.model_validate(arguments).model_dump()
    except ValidationError:
        return dict(arguments)


TOOL_ALIASES = {"mcp-base_get_filelist": "get_filelist"}
"""Rule 8: tool name -> the name of the same function that a recording may use instead."""


def call_key(tool: Tool | None, name: str, arguments: dict, aliases: dict[str, str] | None = None) -> str:
    """The match key of a call (rules 1-8): the tool name (:data:`TOOL_ALIASES` resolved) and its compared
    arguments, as canonical JSON. ``arguments`` are validated ones (:func:`validated`)."""
    name = TOOL_ALIASES.get(name, name)
    defaults = {}
    if tool is not None:
        defaults = {k: f.default for k, f in tool.args_model.model_fields.items() if not f.is_required()}
    kept = {k: normalise(v, aliases) for k, v in arguments.items()
            if v is not None and k not in OUTPUT_FIELDS and not (k in defaults and normalise(defaults[k]) == normalise(v))}
    return json.dumps([name, kept], sort_keys=True)


def output_text(output: Any) -> str:
    """The observation of a recorded output: a string as is, anything else as JSON."""
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def written_files(arguments: dict) -> list[str]:
    """The files a call writes: the path strings of its output arguments, in order."""
    return [s for k, v in arguments.items() if k in OUTPUT_FIELDS for s in _strings(v) if s.strip()]


def saved_files(output: Any) -> list[str]:
    """File paths named in a recorded output (a list of file names, ``"Result saved at x.tif"``)."""
    if isinstance(output, list):
        return [s for s in _strings(output) if _SUFFIX.search(s.strip())]
    if isinstance(output, str):
        return [_path_start(m.group(0).strip()) for m in _SAVED.finditer(output)]
    return []


def _path_start(text: str) -> str:
    """``text`` from the start of its path: the words before the first folder (``"Result save at"``) dropped;
    a file name with spaces after the last ``/`` (``out/Dead Sea_B5.tif``) kept."""
    head, sep, _ = text.partition("/")
    if not sep:
        return text
    if not head or head[-1].isspace():  # an absolute path: it starts at its "/"
        return text[len(head):]
    return text[len(head) - len(head.split()[-1]):]


def artifact_name(path: str) -> str:
    """The artifact name of a file: its last component with characters outside ``[A-Za-z0-9_.-]`` as ``_``
    and a raster or vector suffix (``.tif``, ``.json`` …) removed, as the artifact registry names it."""
    name = _BAD_CHARS.sub("_", re.split(r"[/\\]", path.strip().rstrip("/\\"))[-1])
    for ext in _EXTS:
        name = name.removesuffix(ext)
    return name[:96]


class ReplayBook:
    """The replay of one episode: answers calls from ``calls`` and registers their files.

    Args:
        task_id: the task (named in messages).
        calls: the task's recording.
        tools: name -> Tool (argument models for rule 1).
        registry: the episode's artifact registry (placeholders are added).
        inputs: the task's own files (``TaskSpec.data``): they exist from the start, even where a recorded
            output names one (a ThinkGeo tool returning its input image), so reading one is never a
            ``hallucinated_path``.
    """

    def __init__(self, task_id: str, calls: list[RecordedCall], tools: dict, registry: ArtifactRegistry,
                 inputs: list[str] | tuple[str, ...] = ()):
        self.task_id = task_id
        self.calls = list(calls)
        self.tools = tools
        self.registry = registry
        self.used = [False] * len(self.calls)
        self.aliases: dict[str, str] = {}
        self.made: set[str] = set()
        self.keys = [call_key(tools.get(c.name), c.name, validated(tools.get(c.name), c.arguments))
                     for c in self.calls]
        # files the recording writes (a call reading one needs the writing call first)
        self.writes = {file_name(f): c.name for c in self.calls
                       for f in written_files(c.arguments) + saved_files(c.output) if not c.name.endswith("filelist")}
        self.listed = {file_name(f) for c in self.calls if c.name.endswith("filelist") for f in saved_files(c.output)}
        self.listed |= {file_name(f) for f in inputs}

    def answer(self, tool: Tool, arguments: dict) -> ToolResult:
        """The recorded output of the call ``tool(arguments)`` (validated arguments).

        Raises:
            ToolError: ``off_record`` (no recorded call matches) or ``hallucinated_path`` (it
                reads a file of a recorded step this episode has not run).
        """
        key = call_key(tool, tool.name, arguments, self.aliases)
        hits = [i for i, k in enumerate(self.keys) if k == key]
        if not hits:
            same = sum(c.name == tool.name for c in self.calls)
            raise ToolError(OFF_RECORD, f"no recorded result exists for this call of {tool.name}: replay mode answers "
                            "only calls that match a call of the task's reference (same tool, same inputs and "
                            f"values); the reference calls {tool.name} {same} time(s)")
        for arg, value in arguments.items():
            if arg in OUTPUT_FIELDS:
                continue
            for s in _strings(value):
                name = self.aliases.get(file_name(s), file_name(s)) if is_path(s) else None
                if name in self.writes and name not in self.made and name not in self.listed:
                    raise ToolError("hallucinated_path", f"argument '{arg}': {s} is written by a "
                                    f"{self.writes[name]} call that this episode has not run yet")
        i = next((i for i in hits if not self.used[i]), hits[-1])
        self.used[i] = True
        rec = self.calls[i]
        return self._result(tool, arguments, rec)

    def _result(self, tool: Tool, arguments: dict, rec: RecordedCall) -> ToolResult:
        parents = [artifact_name(s) for k, v in arguments.items() if k not in OUTPUT_FIELDS
                   for s in _strings(v) if is_path(s) and artifact_name(s) in self.registry.artifacts]
        call = {"name": tool.name, "arguments": arguments}
        given, recorded = written_files(arguments), written_files(rec.arguments)
        for mine, theirs in zip(given, recorded):
            if file_name(mine) != file_name(theirs):
                self.aliases[file_name(mine)] = file_name(theirs)
        listing = tool.name.endswith("filelist")
        files = list({file_name(f): f for f in recorded + saved_files(rec.output) + given}.values())
        names = []
        for f in files:
            self.made.add(file_name(f))
            try:
                art = register_placeholder(self.registry, artifact_name(f), kind="raster",
                                           parents=[] if listing else parents, call=None if listing else call)
                names.append(art.name)
            except ToolError:  # a name EarthRL cannot use as an artifact: left unregistered
                pass
        data = {"replay": True, "output": rec.output, "artifacts": names}
        return ToolResult(output_text(rec.output), data, names[0] if names and not listing else None)
