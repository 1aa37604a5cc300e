"""Audit of a benchmark's reference answers: re-run each task's reference workflow through
:class:`~earthrl.envs.core.env.RSEnv` (json actions, real tools, no model) and check whether the
stored answer follows from the data.

This module holds what every suite's audit shares: the table of documented alternative
conventions (:data:`CONVENTIONS`), the per-task record (:class:`TaskAudit`), the replay of
tool calls through the env (:func:`play`, the action texts of the scripted policy
:func:`~earthrl.envs.core.reference_actions.scripted_actions`), the answer given back through the env's
``answer`` tool and judged by the caller's checker (:func:`judge_answer`; the launcher passes
:func:`earthrl.rewards.outcome.answer_correct`, the check the rewards use), the nearest option of
a multiple-choice task (:func:`nearest_choice`), and the reports (:func:`summary`,
:func:`markdown_report`, :func:`write_reports`). How a suite turns the results of its reference
calls into the value to compare is the suite's part: :mod:`earthrl.envs.suites.audit`
(earthrl-mini, by the task's template) and :mod:`earthrl.envs.benchmarks.earthbench_audit`
(Earth-Bench, mapped calls on a folder of its rasters).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from earthrl.envs.core.reference_actions import scripted_actions
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.tools.registry import TOOLS

Judge = Callable[[dict | None, dict], bool]
"""``judge(answer, truth) -> bool``: ``answer`` is ``{"value", "unit"}`` as the env's ``answer``
tool returns it, ``truth`` the task's answer as a dict."""

REPRODUCED, NOT_REPRODUCED, COULD_NOT_RUN = "reproduced", "not_reproduced", "could_not_run"
STATUSES = (REPRODUCED, NOT_REPRODUCED, COULD_NOT_RUN)


@dataclass(frozen=True)
class Convention:
    """A documented alternative convention: the tool arguments that select it.

    Attributes:
        name: short name (report column).
        tool: the EarthRL tool whose calls get ``overrides``.
        overrides: argument values merged into every call of ``tool`` of a reference workflow.
        doc: what the convention is, and its source.
    """

    name: str
    tool: str
    overrides: dict
    doc: str


CONVENTIONS: tuple[Convention, ...] = (
    Convention("tvdi_wet_edge_min", "tvdi", {"wet_edge": "min"},
               "TVDI wet edge horizontal at the lowest per-interval LST minimum (Sandholt et al. 2002, "
               "RSE 79:213, Ts_min) instead of fitted to the per-interval minima"),
    Convention("tvdi_theil_sen", "tvdi", {"fit": "theil_sen"},
               "TVDI edges fitted with Theil-Sen (robust to outlier bins) instead of least squares"),
    Convention("tvdi_20_bins", "tvdi", {"bins": 20},
               "TVDI edges from 20 NDVI bins instead of NDVI intervals of 0.01"),
    Convention("tvdi_no_valid_ranges", "tvdi",
               {"ndvi_min": -1.0, "lst_min": 150.0, "lst_max": 400.0, "min_pixels": 1},
               "TVDI without valid-range masks (water NDVI < 0, frozen LST < 273 K and very hot pixels "
               "enter the edges) and without a minimum pixel count per bin, NDVI bins over [-1, 1]: "
               "the pre-correction rule, except that it binned each date's own NDVI range"),
    Convention("lst_emissivity_mixture", "land_surface_temperature", {"emissivity": "mixture_no_cavity"},
               "LST with the soil/vegetation mixture emissivity (no cavity term) instead of Sobrino et "
               "al. 2004's NDVI thresholds method (NDVI^THM)"),
)
"""Alternative conventions the audit re-runs each task under, when its workflow calls the tool."""


def convention_problem(conv: Convention, tools: dict | None = None) -> str | None:
    """Why ``conv`` cannot be applied with the registered tools (tool or argument missing), or
    None when it can."""
    tools = TOOLS if tools is None else tools
    tool = tools.get(conv.tool)
    if tool is None:
        return f"tool {conv.tool!r} is not registered"
    missing = [a for a in conv.overrides if a not in tool.args_model.model_fields]
    return f"tool {conv.tool} has no argument {', '.join(missing)}" if missing else None


def with_overrides(calls: list[dict], conv: Convention | None) -> list[dict] | None:
    """``calls`` with ``conv.overrides`` merged into each call of ``conv.tool``; None when no call
    uses that tool (the convention does not apply); ``calls`` unchanged for ``conv=None``."""
    if conv is None:
        return calls
    if not any(c["name"] == conv.tool for c in calls):
        return None
    return [{"name": c["name"], "arguments": {**c["arguments"], **conv.overrides}}
            if c["name"] == conv.tool else c for c in calls]


# ----------------------------------------------------------------------------- replay in the env


class ReplayError(RuntimeError):
    """A reference call ended in an error observation. Attributes: step (1-based), call, message."""

    def __init__(self, step: int, call: dict, message: str):
        super().__init__(f"step {step} {call['name']}: {message}")
        self.step, self.call, self.message = step, call, message


def _renamed(value, names: dict[str, str]):
    if isinstance(value, list):
        return [_renamed(v, names) for v in value]
    return names.get(value, value) if isinstance(value, str) else value


def play(env, calls: list[dict], expected: list[str | None] | None = None) -> list[dict]:
    """Step ``calls`` through ``env`` (reset, json format) as the scripted policy's actions.

    Args:
        expected: the artifact each step made in the default run; where a step now makes
            another name (a convention's argument is part of the output name), later arguments
            naming the expected artifact get the new name.

    Returns:
        each call's structured result (``StepResult.result``).

    Raises:
        ReplayError: a call's turn was an error (names the step, the call and the observation).
    """
    names: dict[str, str] = {}
    results = []
    for step, raw in enumerate(calls, 1):
        call = {"name": raw["name"], "arguments": {k: _renamed(v, names) for k, v in raw["arguments"].items()}}
        res = env.step(scripted_actions({"reference": [call], "answer": {"value": 0}}, "json")[0])
        if res.error:
            raise ReplayError(step, call, res.observation)
        results.append(res.result or {})
        want = expected[step - 1] if expected and step <= len(expected) else None
        made = results[-1].get("artifact")
        if want and made and made != want:
            names[want] = made
    return results


def judge_answer(env, value, truth: dict, judge: Judge) -> bool:
    """Give ``value`` (with the truth's unit) to the env's ``answer`` tool and judge what it
    records against ``truth`` with ``judge``. False when the answer turn was an error."""
    action = scripted_actions({"reference": [], "answer": {"value": value, "unit": truth.get("unit") or ""}},
                              "json")[0]
    res = env.step(action)
    return bool(res.done and not res.error and judge(res.answer, truth))


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def nearest_choice(value, options: dict[str, str] | None) -> str | None:
    """The option letter nearest to ``value``: the letter itself when ``value`` is one, else the
    option whose first number is closest to the number ``value`` (ties: the first). None
    without options, for a non-numeric value, or when no option holds a number."""
    if not options or value is None:
        return None
    if isinstance(value, str) and value.strip().upper() in options:
        return value.strip().upper()
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    nums = {k: float(m.group().replace(",", "")) for k, t in options.items()
            if (m := _NUMBER.search(str(t).replace(",", "")))}
    return min(nums, key=lambda k: abs(nums[k] - v)) if nums else None


# ------------------------------------------------------------------------------------ records


@dataclass
class Evaluation:
    """What one run of a task's workflow gave (under the default or one alternative convention).

    Attributes:
        computed: the value EarthRL computes (number rounded as the task's answer, option
            letter or text), None when the workflow did not run.
        nearest_choice: option letter nearest ``computed`` (multiple-choice tasks), else None.
        reproduced: the answer given back (the nearest letter for a choice task, else
            ``computed``) is judged correct; None when it could not run.
        reason: why it could not run (None when it ran).
        independent: the value re-derived without the tools (a suite's own float64 numpy code
            from the raw data, rounded as the answer; earthrl-mini threshold tasks), else None.
        independent_ok: the stored answer is judged correct against ``independent``; None
            when there is no independent value.
    """

    computed: Any = None
    nearest_choice: str | None = None
    reproduced: bool | None = None
    reason: str | None = None
    independent: Any = None
    independent_ok: bool | None = None


@dataclass
class TaskAudit:
    """The audit of one task.

    Attributes:
        id: task id; expected: the stored answer (value, unit, tolerance, kind, options).
        status: ``"reproduced"`` | ``"not_reproduced"`` | ``"could_not_run"``.
        result: the default-convention :class:`Evaluation`.
        alternatives: ``{name: Evaluation + "verdict_changes"}`` for each applicable convention.
    """

    id: str
    expected: dict
    result: Evaluation
    alternatives: dict[str, dict] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """Reproduced / not reproduced / could not run (of the default convention). Not
        reproduced as well when an independent re-derivation disagrees with the stored answer
        (``result.independent_ok`` False), even where the tools reproduce it."""
        if self.result.reproduced is None:
            return COULD_NOT_RUN
        return REPRODUCED if self.result.reproduced and self.result.independent_ok is not False else NOT_REPRODUCED

    def as_dict(self) -> dict:
        """JSON-friendly record."""
        return {"id": self.id, "status": self.status, "expected": self.expected,
                **asdict(self.result), "alternatives": self.alternatives}


class Auditor:
    """One suite's replay of its tasks (subclasses: :class:`earthrl.envs.suites.audit.MiniAuditor`,
    :class:`earthrl.envs.benchmarks.earthbench_audit.EarthBenchAuditor`)."""

    def calls(self, task: TaskSpec) -> list[dict]:
        """The EarthRL calls the task's workflow makes (a convention applies when one calls its
        tool); default: the task's reference."""
        return [c.model_dump() for c in task.reference]

    def __call__(self, task: TaskSpec, conv: Convention | None) -> Evaluation:
        """Run ``task``'s workflow under ``conv`` (None: the default convention)."""
        raise NotImplementedError


def audit_task(task: TaskSpec, run: Auditor, conventions: tuple[Convention, ...] = CONVENTIONS) -> TaskAudit:
    """Audit ``task`` with ``run`` under the default convention and every applicable one of
    ``conventions`` (those whose tool the workflow calls and whose arguments exist).

    ``verdict_changes`` of an alternative: its verdict (reproduced or not) differs from the
    default's; None when either could not run.
    """
    base = run(task, None)
    audit = TaskAudit(task.id, task.answer.model_dump(), base)
    calls = run.calls(task)
    for conv in conventions:
        if convention_problem(conv) or with_overrides(calls, conv) is None:
            continue
        alt = run(task, conv)
        changes = (None if alt.reproduced is None or base.reproduced is None
                   else alt.reproduced != base.reproduced)
        audit.alternatives[conv.name] = {**asdict(alt), "verdict_changes": changes}
    return audit


# ------------------------------------------------------------------------------------ reports


def summary(audits: list[TaskAudit]) -> dict[str, int]:
    """Counts ``{"tasks", "reproduced", "not_reproduced", "could_not_run", "verdict_changes"}``
    (``verdict_changes``: tasks whose verdict some alternative convention changes)."""
    out = {"tasks": len(audits), **{s: sum(a.status == s for a in audits) for s in STATUSES}}
    out["verdict_changes"] = sum(any(v.get("verdict_changes") for v in a.alternatives.values()) for a in audits)
    return out


def _cell(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def _independent(r: Evaluation) -> str:
    if r.independent is None:
        return "–"
    return f"{_cell(r.independent)} ({'agrees' if r.independent_ok else 'DISAGREES'})"


def markdown_report(suite: str, audits: list[TaskAudit], meta: dict | None = None,
                    conventions: tuple[Convention, ...] = CONVENTIONS) -> str:
    """The audit as markdown: summary counts, the conventions table (with why one is not
    available), then one row per task (status, expected, computed, nearest choice, the
    alternatives' values and whether they change the verdict, the reason a task could not run,
    the independent value and whether the stored answer agrees with it)."""
    s = summary(audits)
    lines = [f"# Audit of {suite}", ""]
    lines += [f"- {k.replace('_', ' ')}: {v}" for k, v in {**s, **(meta or {})}.items()]
    lines += ["", "## Alternative conventions", "", "| name | tool | overrides | what | available |",
              "|---|---|---|---|---|"]
    for c in conventions:
        lines.append(f"| {c.name} | {c.tool} | `{json.dumps(c.overrides)}` | {_cell(c.doc)} | "
                     f"{_cell(convention_problem(c) or 'yes')} |")
    lines += ["", "## Tasks", "", "| task | status | expected | computed | nearest | alternatives | reason | "
              "independent |", "|---|---|---|---|---|---|---|---|"]
    order = {NOT_REPRODUCED: 0, COULD_NOT_RUN: 1, REPRODUCED: 2}
    for a in sorted(audits, key=lambda a: order[a.status]):
        exp = a.expected
        want = f"{exp['value']} {exp.get('unit') or ''}".strip() + (
            f" ±{exp['tolerance']:g}" if exp.get("kind") == "numeric" else "")
        alts = "; ".join(f"{n}: {_cell(v['computed'])}" + (" (verdict changes)" if v["verdict_changes"] else "")
                         for n, v in a.alternatives.items())
        r = a.result
        lines.append(f"| {a.id} | {a.status} | {_cell(want)} | {_cell(r.computed)} | {_cell(r.nearest_choice)} | "
                     f"{_cell(alts or None)} | {_cell(r.reason)} | {_independent(r)} |")
    return "\n".join(lines) + "\n"


def write_reports(out: Path, suite: str, audits: list[TaskAudit], meta: dict | None = None) -> tuple[Path, Path]:
    """Write ``out/report.md`` and ``out/report.json`` (``{"suite", "summary", "meta",
    "conventions", "tasks"}``); returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / "report.md", out / "report.json"
    md.write_text(markdown_report(suite, audits, meta))
    convs = [{**asdict(c), "available": convention_problem(c) is None, "problem": convention_problem(c)}
             for c in CONVENTIONS]
    js.write_text(json.dumps({"suite": suite, "summary": summary(audits), "meta": meta or {},
                              "conventions": convs, "tasks": [a.as_dict() for a in audits]},
                             indent=1, default=str) + "\n")
    return md, js
