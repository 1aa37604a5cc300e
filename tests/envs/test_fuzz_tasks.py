"""Fuzzed task files (hypothesis, fixed seed, bounded count): valid and mutated JSON/JSONL tasks,
random bytes, deep nesting and lone surrogates either load as tasks or stop with ONE line that
names the file — never another exception."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from earthrl.envs.core.tasks import TaskFileError, TaskSpec, load_suite, load_tasks_file

FUZZ = settings(max_examples=150, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _task(i: int = 0) -> dict:
    return {"id": f"fuzz/t{i}", "question": {"IF": "Mean NDVI of scene S2_T33UUU_20170216?"},
            "data": ["S2_T33UUU_20170216"],
            "reference": [{"name": "spectral_index", "arguments": {"scene": "S2_T33UUU_20170216", "index": "NDVI"}}],
            "answer": {"kind": "numeric", "value": 0.18, "tolerance": 0.01}, "skill": "spectral_index", "split": "test"}


# JSON-ish values, strings with lone surrogates and control characters included
_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=20)
_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), _text)
_value = st.recursive(_scalar, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                     st.dictionaries(_text, kids, max_size=3)), max_leaves=8)
_paths = st.sampled_from(["id", "question", "question.IF", "data", "data.0", "reference", "reference.0.name",
                          "reference.0.arguments", "answer", "answer.kind", "answer.value", "answer.tolerance",
                          "answer.options", "skill", "family", "toolset", "split", "extra"])


def _set(task: dict, path: str, value) -> dict:
    """Set ``path`` in ``task``; where an earlier mutation removed the parent, set the top key."""
    *parents, leaf = path.split(".")
    try:
        node = task
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(leaf) if isinstance(node, list) else leaf] = value
    except (KeyError, IndexError, TypeError, ValueError):
        task[parents[0] if parents else leaf] = value
    return task


@st.composite
def task_files(draw) -> tuple[str, bytes]:
    """(suffix, content): a valid file with mutations of its tasks, or raw trouble."""
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "bytes", "deep", "surrogate", "truncated"]))
    suffix = draw(st.sampled_from([".jsonl", ".json"]))
    tasks = [_task(i) for i in range(draw(st.integers(1, 3)))]
    if kind == "mutated":
        for _ in range(draw(st.integers(0, 3))):
            _set(tasks[draw(st.integers(0, len(tasks) - 1))], draw(_paths), draw(_value))
    elif kind == "surrogate":
        _set(tasks[0], draw(_paths.filter(lambda p: p in ("id", "question.IF", "data.0", "skill"))),
             "a" + chr(draw(st.integers(0xD800, 0xDFFF))) + "b")
    elif kind == "bytes":
        return suffix, draw(st.binary(max_size=200))
    elif kind == "deep":
        depth = draw(st.sampled_from([33, 200, 5000, 100_000]))
        tasks[0]["reference"][0]["arguments"]["x"] = "@"
        line = json.dumps(tasks[0]).replace('"@"', "[" * depth + "]" * depth)
        return suffix, (line if suffix == ".jsonl" else f"[{line}]").encode()
    text = ("".join(json.dumps(t) + "\n" for t in tasks) if suffix == ".jsonl" else json.dumps(tasks))
    if kind == "truncated":
        text = text[: draw(st.integers(0, len(text)))]
    return suffix, text.encode("utf-8", "surrogatepass")


@FUZZ
@given(task_files())
def test_fuzzed_task_files_load_or_fail_with_one_line(case):
    suffix, content = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"fuzz{suffix}"
        path.write_bytes(content)
        for load in (load_tasks_file, lambda p: load_suite(str(p))):
            try:
                tasks = load(path)
            except TaskFileError as exc:
                msg = str(exc)
                assert "\n" not in msg and str(path) in msg, msg
            else:
                assert tasks and all(isinstance(t, TaskSpec) for t in tasks)
                for t in tasks:  # what loads is usable: valid UTF-8, serialisable
                    t.model_dump_json().encode("utf-8")


@FUZZ
@given(st.binary(min_size=1, max_size=64))
def test_random_bytes_never_raise_another_exception(content):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "raw.jsonl"
        path.write_bytes(content)
        try:
            load_tasks_file(path)
        except TaskFileError as exc:
            assert "\n" not in str(exc) and str(path) in str(exc)
