"""Evaluation metrics over episode records, with bootstrap 95% intervals.

:func:`compute_all` scores a list of :class:`~earthrl.rewards.episode.EpisodeRecord` against
the reference calls of their tasks with every registered metric (:data:`METRICS`):

- ``accuracy``: mean of ``record.correct`` (Earth-Bench);
- ``efficiency``, ``tool_any_order``, ``tool_in_order``, ``tool_exact_match``, ``parameter``:
  :mod:`~earthrl.rewards.metrics.toolcalls` (Earth-Bench, Earth-Agent's evaluation code);
- ``eir``, ``avg_turns``, ``action_tokens``, ``observation_tokens``:
  :mod:`~earthrl.rewards.metrics.agent` (RS-Claw-Evolution);
- ``psr``, ``tsa``, ``aem``, ``plan_psr``, ``plan_tsa``, ``hal_rate``, ``fmt_err``: :mod:`~earthrl.rewards.metrics.agent`
  (SimCRAFT; ``plan_*`` on the planner's output of a planning loop);
- ``inst``, ``tool``, ``arg``, ``ans``, ``ans_i``: :mod:`~earthrl.rewards.metrics.thinkgeo` (ThinkGeo),
  applied position by position to the record's calls + answer against the reference calls +
  an answer step. On ThinkGeo's own tasks (template ``thinkgeo``) they follow ThinkGeo's rules with
  the task's ``gt_answer``: Ans. grades the answer text (:func:`~earthrl.rewards.answer_rules.answer_score`)
  over the tasks with a textual answer, and Ans_I adds the image-generation tasks, scored by the arguments
  of their image tools; on other tasks (all have an answer) ``ans`` and ``ans_i`` equal Accuracy.

All values are fractions in [0, 1] (Accuracy 0.5932 is the published 59.32%), except
Efficiency (a ratio), Avg Turns (turns) and the token means (tokens per episode).

Modes:

- ``"earthrl"`` (default): every metric; the scored tasks are ``task_ids`` or all tasks of
  ``references``; a task with no record (missing prediction) scores 0 on Accuracy, the
  Earth-Bench step metrics, PSR/TSA/AEM and Inst./Tool./Arg./Ans./Ans_I, and is left out of
  Efficiency (it has no call count; 0 would look "efficient") and of the per-turn metrics
  (it has no turns).
- ``"earthbench"``: Earth-Agent's own protocol, which reproduces its published numbers:
  only its six metrics; only its scored slice (questions 190–248 by default,
  :data:`earthrl.envs.benchmarks.earthbench.OFFICIAL_TASK_IDS`); missing predictions are
  skipped (not scored).

Records with ``faulted`` set are left out of every metric; records of tasks without a
reference are left out too. What was left out is listed under ``result["skipped"]``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from earthrl.envs.benchmarks.earthbench import OFFICIAL_TASK_IDS
from earthrl.envs.registry import Registry
from earthrl.rewards.episode import EpisodeRecord
from earthrl.rewards.metrics import agent, thinkgeo, toolcalls
from earthrl.rewards.metrics.bootstrap import bootstrap_ci, ratio_of_sums

MODES = ("earthrl", "earthbench")


@dataclass(frozen=True)
class MetricSpec:
    """A registered metric.

    Attributes:
        name: key in the result dict.
        fn: ``fn(record, reference_calls) -> float`` (a per-episode value, averaged over
            episodes) or ``-> (numerator, denominator)`` when ``ratio`` (aggregated as
            Σ numerators / Σ denominators).
        ratio: see ``fn``.
        needs_turns: the metric reads ``record.turns``; records without turns are left out.
        needs_calls: the metric reads ``record.calls``; records whose calls were not logged
            (``calls is None``) are left out.
        judged: the metric reads ``record.correct``; records not judged (None) are left out.
        needs_plan: the metric reads ``record.plan``; records of loops that do not plan (None) are left out.
        scores_missing: in ``"earthrl"`` mode a missing prediction enters this metric as an
            empty episode (no calls, no answer, not correct).
        source: paper and section.
    """

    name: str
    fn: Callable
    ratio: bool = False
    needs_turns: bool = False
    needs_calls: bool = True
    judged: bool = False
    needs_plan: bool = False
    scores_missing: bool = True
    source: str = ""


METRICS: Registry = Registry("metric")

#: The six metrics Earth-Agent publishes, in its table order.
EARTHBENCH_METRICS = ("tool_any_order", "tool_in_order", "tool_exact_match", "parameter",
                      "efficiency", "accuracy")


def register_metric(spec: MetricSpec) -> MetricSpec:
    """Add ``spec`` to :data:`METRICS`.

    Raises:
        ValueError: a different metric is already registered under ``spec.name``.
    """
    return METRICS.add(spec.name, spec)


def _correct(rec: EpisodeRecord, ref) -> float:
    return float(bool(rec.correct))


def _on_calls(fn: Callable) -> Callable:
    """Adapt ``fn(pred_calls, ref_calls)`` to the ``(record, ref)`` signature."""
    return lambda rec, ref: fn(rec.calls, ref)


def _on_record(fn: Callable) -> Callable:
    """Adapt ``fn(record)`` to the ``(record, ref)`` signature."""
    return lambda rec, ref: fn(rec)


def _answer_text(answer):
    """The text of a record's answer: the ``value`` of EarthRL's ``{"value", "unit"}``, else the answer itself."""
    return answer.get("value") if isinstance(answer, dict) else answer


def _thinkgeo_metric(name: str) -> Callable:
    """``(record, ref) -> (numerator, denominator)`` of ThinkGeo's metric ``name``
    (:func:`~earthrl.rewards.metrics.thinkgeo.episode_scores`).

    A ThinkGeo task (``record.template == "thinkgeo"``) is scored by ThinkGeo's rules with its
    ``gt_answer``: an image-generation task (no ``gt_answer``) has no answer step, is out of Ans.
    and enters Ans_I by its image tool's arguments. Every other task has a textual answer judged
    by the outcome check: the reference ends with an answer step and Ans. = Ans_I = ``record.correct``.
    """
    def fn(rec: EpisodeRecord, ref) -> tuple[float, int]:
        calls = rec.calls or []
        if rec.template == "thinkgeo":
            gt = rec.gt_answer
            return thinkgeo.episode_scores(
                thinkgeo.steps_from_calls(calls, _answer_text(rec.answer) if gt else None),
                thinkgeo.steps_from_calls(ref, answer=True if gt else None), gt)[name]
        if name in ("ans", "ans_i"):
            return float(bool(rec.correct)), 1
        scores = thinkgeo.episode_scores(thinkgeo.steps_from_calls(calls, rec.answer),
                                         thinkgeo.steps_from_calls(ref, answer=True), True)
        return scores[name]

    return fn


_EB = "Earth-Agent evaluation code (Earth-Bench)"
_RS = "RS-Claw-Evolution §IV, Fig. 4"
_SC = "SimCRAFT §4.3"
_TG = "ThinkGeo evaluator (every_with_gt / every), as reported by HiRS-Agent §5"
_TURNS = dict(needs_turns=True, needs_calls=False, scores_missing=False)
_ANSWER = dict(needs_calls=False, judged=True)
for _spec in (
    MetricSpec("accuracy", _correct, **_ANSWER, source=_EB),
    MetricSpec("efficiency", _on_calls(toolcalls.efficiency), scores_missing=False, source=_EB),
    *(MetricSpec(n, _on_calls(f), source=_EB) for n, f in toolcalls.EARTHBENCH_STEP_METRICS.items()),
    MetricSpec("eir", _on_record(agent.error_turns), ratio=True, **_TURNS, source=_RS),
    MetricSpec("avg_turns", _on_record(agent.num_turns), **_TURNS, source=_RS),
    MetricSpec("action_tokens", _on_record(agent.action_tokens), **_TURNS, source=_RS),
    MetricSpec("observation_tokens", _on_record(agent.observation_tokens), **_TURNS, source=_RS),
    MetricSpec("psr", agent.plan_success, source=_SC),
    MetricSpec("tsa", agent.tool_set_accuracy, source=_SC),
    MetricSpec("aem", agent.argument_exact_match, source=_SC),
    MetricSpec("plan_psr", agent.plan_success_of_plan, needs_calls=False, needs_plan=True, scores_missing=False,
               source=_SC),
    MetricSpec("plan_tsa", agent.tool_set_accuracy_of_plan, needs_calls=False, needs_plan=True, scores_missing=False,
               source=_SC),
    MetricSpec("hal_rate", _on_record(agent.hallucinated_calls), ratio=True, scores_missing=False, source=_SC),
    MetricSpec("fmt_err", _on_record(agent.format_errors), ratio=True, **_TURNS, source=_SC),
    *(MetricSpec(n, _thinkgeo_metric(n), ratio=True, source=_TG) for n in ("inst", "tool", "arg")),
    *(MetricSpec(n, _thinkgeo_metric(n), ratio=True, **_ANSWER, source=_TG) for n in ("ans", "ans_i")),
):
    register_metric(_spec)


def references_of(tasks: Iterable) -> dict[str, list[dict]]:
    """``{task id: reference calls as dicts}`` from TaskSpec objects (or their dicts), in order."""
    out = {}
    for t in tasks:
        d = t if isinstance(t, dict) else t.model_dump()
        out[d["id"]] = [{"name": c["name"], "arguments": c.get("arguments", {})} for c in d["reference"]]
    return out


def enters_metric(spec: MetricSpec, rec: EpisodeRecord, missing: bool = False) -> bool:
    """Whether ``rec`` enters metric ``spec``: not a missing prediction the metric leaves out, and it has
    the turns, calls and judgement the metric reads (``needs_turns``, ``needs_calls``, ``judged``)."""
    return not ((missing and not spec.scores_missing) or (spec.needs_turns and not rec.turns)
                or (spec.needs_calls and rec.calls is None) or (spec.judged and rec.correct is None)
                or (spec.needs_plan and rec.plan is None))


def compute_all(records: Sequence[EpisodeRecord], references: Mapping[str, Sequence[dict]], *,
                mode: str = "earthrl", task_ids: Sequence[str] | None = None,
                metrics: Sequence[str] | None = None, n_resamples: int = 1000, alpha: float = 0.05,
                seed: int = 0) -> dict:
    """Every metric with its bootstrap interval.

    Args:
        records: scored episodes (several per task allowed, e.g. G samples).
        references: ``{task_id: [{"name", "arguments"}, ...]}`` reference calls (see
            :func:`references_of`).
        mode: ``"earthrl"`` or ``"earthbench"`` (module docstring).
        task_ids: the tasks to score; default all of ``references`` (``"earthrl"``) or
            Earth-Agent's scored slice (``"earthbench"``).
        metrics: names to compute; default all (``"earthrl"``) or :data:`EARTHBENCH_METRICS`.
        n_resamples, alpha, seed: bootstrap settings (:func:`~earthrl.rewards.metrics.bootstrap.bootstrap_ci`).

    Returns:
        ``{"mode", "n_tasks", "n_records", "metrics": {name: {"value", "ci95": [low, high], "n"}},
        "skipped": {"faulted": [ids], "no_reference": [ids], "missing_prediction": [ids],
        "outside_tasks": int, "efficiency_inf": [ids], "no_turns": int}}``. ``n`` is the
        number of episodes (or, for ratio metrics, of episodes with a non-zero denominator)
        that entered the metric; a metric with none has value NaN.

    Raises:
        ValueError: unknown mode or metric name.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if task_ids is None and mode == "earthbench":
        task_ids = OFFICIAL_TASK_IDS
    universe = [t for t in (task_ids if task_ids is not None else references)]
    wanted = set(universe)
    names = list(metrics or (EARTHBENCH_METRICS if mode == "earthbench" else METRICS))
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"unknown metrics {unknown}; registered: {', '.join(METRICS)}")

    skipped = {"faulted": [], "no_reference": [], "missing_prediction": [], "outside_tasks": 0,
               "efficiency_inf": [], "no_turns": 0, "no_calls": 0, "not_judged": 0}
    scored: list[tuple[EpisodeRecord, list[dict], bool]] = []  # (record, reference, is_missing)
    seen = set()
    for rec in records:
        if rec.task_id not in references:
            skipped["no_reference"].append(rec.task_id)
        elif rec.task_id not in wanted:
            skipped["outside_tasks"] += 1
        elif rec.faulted:
            skipped["faulted"].append(rec.task_id)
        else:
            scored.append((rec, list(references[rec.task_id]), False))
            seen.add(rec.task_id)
    for tid in universe:
        if tid in seen or tid in skipped["faulted"]:
            continue
        if tid not in references:
            if tid not in skipped["no_reference"]:
                skipped["no_reference"].append(tid)
            continue
        skipped["missing_prediction"].append(tid)
        if mode == "earthrl":
            scored.append((EpisodeRecord(task_id=tid, calls=[], correct=False), list(references[tid]), True))
    present = [r for r, _, miss in scored if not miss]
    skipped["no_turns"] = sum(1 for r in present if not r.turns)
    skipped["no_calls"] = sum(1 for r in present if r.calls is None)
    skipped["not_judged"] = sum(1 for r in present if r.correct is None)

    out = {}
    for name in names:
        spec = METRICS[name]
        rows = [(r, ref) for r, ref, miss in scored if enters_metric(spec, r, missing=miss)]
        vals = [spec.fn(r, ref) for r, ref in rows]
        if name == "efficiency":
            skipped["efficiency_inf"] = [r.task_id for (r, _), v in zip(rows, vals) if not np.isfinite(v)]
            vals = [v for v in vals if np.isfinite(v)]
        out[name] = _aggregate(vals, spec.ratio, n_resamples, alpha, seed)
    return {"mode": mode, "n_tasks": len(universe), "n_records": len(records), "metrics": out,
            "skipped": skipped}


def _aggregate(vals: list, ratio: bool, n_resamples: int, alpha: float, seed: int) -> dict:
    if ratio:
        num = np.array([v[0] for v in vals], dtype=float)
        den = np.array([v[1] for v in vals], dtype=float)
        keep = den > 0
        num, den = num[keep], den[keep]
        if not len(den):
            return {"value": float("nan"), "ci95": [float("nan"), float("nan")], "n": 0}
        value = float(num.sum() / den.sum())
        low, high = bootstrap_ci((num, den), stat=ratio_of_sums, n_resamples=n_resamples, alpha=alpha, seed=seed)
        return {"value": value, "ci95": [low, high], "n": int(len(den))}
    arr = np.asarray(vals, dtype=float)
    if not len(arr):
        return {"value": float("nan"), "ci95": [float("nan"), float("nan")], "n": 0}
    low, high = bootstrap_ci(arr, n_resamples=n_resamples, alpha=alpha, seed=seed)
    return {"value": float(arr.mean()), "ci95": [low, high], "n": int(len(arr))}


def breakdown(records: Sequence[EpisodeRecord], references: Mapping[str, Sequence[dict]], *,
              by: str | Callable[[EpisodeRecord], str] = "skill", **kwargs) -> dict[str, dict]:
    """:func:`compute_all` per group of records.

    Args:
        by: a record attribute (``"skill"``, ``"mode"``, ``"action_format"``) or a function
            ``record -> group key``.
        **kwargs: passed to :func:`compute_all` (``mode``, ``metrics``, bootstrap settings).
            Each group is scored on the tasks its records cover (intersected with
            ``task_ids`` when given), so missing predictions only appear in the overall result.

    Returns:
        ``{group key: compute_all result}``, keys sorted.
    """
    key = by if callable(by) else (lambda r: getattr(r, by))
    groups: dict[str, list[EpisodeRecord]] = defaultdict(list)
    for r in records:
        groups[str(key(r))].append(r)
    restrict = kwargs.pop("task_ids", None)
    result = {}
    for g in sorted(groups):
        ids = list(dict.fromkeys(r.task_id for r in groups[g]))
        if restrict is not None:
            ids = [t for t in ids if t in set(restrict)]
        result[g] = compute_all(groups[g], references, task_ids=ids, **kwargs)
    return result
