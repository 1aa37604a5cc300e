"""Earth-Bench's recorded tool outputs: the recording source of replay mode for Earth-Bench tasks
(template ``earthbench``; :mod:`earthrl.envs.core.replay`).

Earth-Bench records each reference call's output twice, and the two records differ on 89 tasks
(verified on commit 5df54a934f3e):

- ``extracted_tool_calls_GT.json``: 247 entries ``{question_index, tool_calls: [{name, input,
  output}]}``, every call with its output — the reference Earth-Agent's metrics compare against
  and the one :func:`~earthrl.envs.benchmarks.earthbench.load_earthbench` puts in
  ``TaskSpec.reference``;
- ``question.json``'s dialogs: assistant turns with ``tool_calls`` followed by ``tool`` turns whose
  ``content`` is ``{"type", "content"}``. On 5 tasks a call has no tool turn (6, 8, 10, 14) or a
  tool turn has no call (155); a tool turn is paired with the first pending call of the same tool
  name, and a call without one is left out (nothing was recorded for it).

A task's recording is the reference file's calls, in order, followed by the dialog's calls whose
tool and arguments are not already among them (so either trajectory replays); question 43, absent
from the reference file, is its dialog's calls.
"""

from __future__ import annotations

import json
from pathlib import Path

from earthrl.envs.benchmarks.earthbench import QUESTION_FILE, REFERENCE_FILE, _read_json, task_id
from earthrl.envs.core.replay import DATA_FOLDERS, RECORDINGS, RecordedCall


def dialog_recording(dialogs: list) -> list[RecordedCall]:
    """The calls of a question.json dialog paired with their tool turns' outputs (see module doc);
    malformed turns are skipped (the loader reports them)."""
    out, pending = [], []
    for turn in dialogs:
        if not isinstance(turn, dict):
            continue
        if turn.get("role") == "assistant":
            pending = []
            for tc in turn.get("tool_calls") or []:
                fn = tc.get("function") if isinstance(tc, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                    args = fn.get("arguments", {})
                    if isinstance(args, str):
                        try:
                            args = json.loads(args)
                        except json.JSONDecodeError:
                            continue
                    if isinstance(args, dict):
                        pending.append((fn["name"], args))
        elif turn.get("role") == "tool":
            j = next((j for j, (name, _) in enumerate(pending) if name == turn.get("name")), None)
            if j is None:
                continue
            name, args = pending.pop(j)
            content = turn.get("content")
            output = content.get("content") if isinstance(content, dict) and "content" in content else content
            out.append(RecordedCall(name, args, output))
    return out


def _same(a: RecordedCall, b: RecordedCall) -> bool:
    return a.name == b.name and json.dumps(a.arguments, sort_keys=True) == json.dumps(b.arguments, sort_keys=True)


@RECORDINGS.register("earthbench")
def earthbench_recordings(folder: Path) -> dict[str, list[RecordedCall]]:
    """``{"earthbench/N": [RecordedCall]}`` for the 248 tasks of the Earth-Bench folder ``folder``
    (the one holding question.json and extracted_tool_calls_GT.json).

    Raises:
        FileNotFoundError: a file is missing (names the folder to give).
        EarthBenchFormatError: a file is not the expected JSON.
    """
    folder = Path(folder)
    questions = _read_json(folder / QUESTION_FILE)
    reference = _read_json(folder / REFERENCE_FILE)
    out: dict[str, list[RecordedCall]] = {}
    for entry in reference if isinstance(reference, list) else []:
        if isinstance(entry, dict) and "question_index" in entry:
            out[task_id(entry["question_index"])] = [
                RecordedCall(c["name"], dict(c.get("input") or {}), c.get("output"))
                for c in entry.get("tool_calls") or [] if isinstance(c, dict) and isinstance(c.get("name"), str)]
    for key, task in (questions.items() if isinstance(questions, dict) else ()):
        calls = out.setdefault(task_id(key), [])
        dialogs = task.get("dialogs") if isinstance(task, dict) else None
        for rec in dialog_recording(dialogs if isinstance(dialogs, list) else []):
            if not any(_same(rec, c) for c in calls):
                calls.append(rec)
    return out


@DATA_FOLDERS.register("earthbench")
def earthbench_folder(root: Path, data: list[str]) -> Path:
    """The folder of an Earth-Bench task's rasters: ``<root>/data/questionN``, Earth-Agent's
    ``benchmark/data/questionN`` beside ``question.json`` (``data``: the task's ``TaskSpec.data``,
    ``["questionN"]`` or ``["questionN/<file>"]``).

    Raises:
        ValueError: the task names no data.
    """
    if not data:
        raise ValueError("an Earth-Bench task without a data folder")
    return Path(root) / "data" / data[0].replace("\\", "/").split("/")[0]
