"""The evaluation report: metrics with 95% CIs, per-skill and per-mode breakdowns, plots.

:func:`build_report` turns recorded trajectories into a report dict with the metrics of
:mod:`earthrl.rewards.metrics.compute`; :func:`write_report` writes it as JSON and Markdown and
draws the plots (accuracy by skill, EIR by skill, histogram of turns, action/observation
tokens by action format).
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path

from earthrl.rewards.episode import EpisodeRecord
from earthrl.rewards.metrics.compute import compute_all
from earthrl.rewards.metrics.earthbench import score_run
from earthrl.rewards.metrics.error_kinds import error_kinds, error_kinds_markdown
from earthrl.rewards.metrics.roles import role_metrics, roles_markdown
from earthrl.rollout.trajectory import Trajectory

# metrics shown in the Markdown tables, in order: key -> (label, format)
TABLE_METRICS = {
    "accuracy": ("Accuracy", "{:.1%}"),
    "eir": ("EIR", "{:.3f}"),
    "avg_turns": ("Avg turns", "{:.2f}"),
    "tool_any_order": ("Tool-Any-Order", "{:.4f}"),
    "tool_in_order": ("Tool-In-Order", "{:.4f}"),
    "tool_exact_match": ("Tool-Exact-Match", "{:.4f}"),
    "parameter": ("Parameter", "{:.4f}"),
    "efficiency": ("Efficiency", "{:.4f}"),
    "action_tokens": ("Action tokens", "{:.1f}"),
    "observation_tokens": ("Observation tokens", "{:.1f}"),
    "psr": ("PSR", "{:.3f}"),
    "tsa": ("TSA", "{:.3f}"),
    "aem": ("AEM", "{:.3f}"),
    "plan_psr": ("Plan PSR", "{:.3f}"),
    "plan_tsa": ("Plan TSA", "{:.3f}"),
    "hal_rate": ("Hal.Rate", "{:.3f}"),
    "fmt_err": ("Fmt.Err", "{:.3f}"),
    "inst": ("Inst.", "{:.3f}"),
    "tool": ("Tool.", "{:.3f}"),
    "arg": ("Arg.", "{:.3f}"),
    "ans": ("Ans.", "{:.3f}"),
    "ans_i": ("Ans_I", "{:.3f}"),
}

#: ThinkGeo's metrics (:mod:`earthrl.rewards.metrics.thinkgeo`): a table of their own in the Markdown of a report
#: whose tasks include ThinkGeo's (``report["thinkgeo"]``); in ``report.json`` for every suite.
THINKGEO_COLUMNS = ("inst", "tool", "arg", "ans", "ans_i")


def episode_records(entries: list[dict], tasks_by_id: dict[str, dict]) -> list[EpisodeRecord]:
    """Scored :class:`EpisodeRecord` of ``trajectories.jsonl`` lines (``task_id``, ``mode``, ``trajectory``,
    ``action_format``); correctness by each task's outcome check.

    Raises:
        KeyError: an entry's task is not in ``tasks_by_id``.
    """
    out = []
    for e in entries:
        traj = Trajectory.from_dict(e["trajectory"])
        task = tasks_by_id[e["task_id"]]  # the record judges correctness by the outcome check
        out.append(EpisodeRecord.from_trajectory(traj, task, mode=e["mode"],
                                                 action_format=e.get("action_format", "json")))
    return out


def build_report(entries: list[dict], tasks_by_id: dict[str, dict], *, mode: str = "earthrl",
                 n_resamples: int = 1000, seed: int = 0) -> dict:
    """Report dict of recorded trajectories.

    Args:
        entries: ``trajectories.jsonl`` lines (``task_id``, ``mode``, ``trajectory``, ``action_format``).
        tasks_by_id: TaskSpec dicts of the suite (answers and reference workflows).
        mode: ``"earthrl"`` or ``"earthbench"`` (see :func:`earthrl.rewards.metrics.compute.compute_all`).
        n_resamples: bootstrap resamples of the 95% CIs.

    Returns:
        ``{"n_trajectories", "n_tasks", "metrics": {"n": int, name: {"value", "ci95", "n"}}, "by_skill": {skill: metrics},
        "by_mode": {mode: metrics}, "turns_histogram": {turns: count},
        "tokens_by_format": {format: {"action_tokens", "observation_tokens"}},
        "roles": :func:`earthrl.rewards.metrics.roles.role_metrics`, "error_kinds": the count and per-episode
        rate of each error kind over the episodes not faulted, per tool too
        (:func:`earthrl.rewards.metrics.error_kinds.error_kinds`)}``, and, when ThinkGeo tasks were run,
        ``"thinkgeo": {"tasks", "image_tasks"}`` (how many; image-generation tasks are out of Ans. and in Ans_I).
    """
    records = episode_records(entries, tasks_by_id)
    refs = {tid: t["reference"] for tid, t in tasks_by_id.items()}

    def metrics_of(recs) -> dict:
        res = compute_all(recs, {r.task_id: refs[r.task_id] for r in recs}, mode=mode,
                          n_resamples=n_resamples, seed=seed)
        return {"n": res["n_records"], **res["metrics"]}

    groups: dict[str, dict[str, list]] = {"by_skill": defaultdict(list), "by_mode": defaultdict(list),
                                          "by_format": defaultdict(list)}
    for r in records:
        groups["by_skill"][tasks_by_id[r.task_id]["skill"]].append(r)
        groups["by_mode"][r.mode].append(r)
        groups["by_format"][r.action_format].append(r)
    turns = defaultdict(int)
    for r in records:
        turns[len(r.turns)] += 1
    overall = compute_all(records, {r.task_id: refs[r.task_id] for r in records}, mode=mode,
                          n_resamples=n_resamples, seed=seed) if records else {"metrics": {}, "skipped": {}}
    report = {
        "skipped": overall["skipped"],
        "n_trajectories": len(records),
        "n_tasks": len({r.task_id for r in records}),
        "metrics_mode": mode,
        "metrics": {"n": len(records), **overall["metrics"]},
        "by_skill": {k: metrics_of(v) for k, v in sorted(groups["by_skill"].items())},
        "by_mode": {k: metrics_of(v) for k, v in sorted(groups["by_mode"].items())},
        "turns_histogram": dict(sorted(turns.items())),
        "tokens_by_format": {
            fmt: {key: sum(sum(t[key] for t in r.turns) for r in recs) / len(recs)
                  for key in ("action_tokens", "observation_tokens")}
            for fmt, recs in sorted(groups["by_format"].items())},
        "roles": role_metrics(records, refs),
        "error_kinds": error_kinds([r.turns for r in records if not r.faulted],
                                   Counter(e["trajectory"].get("failure") or "fault" for e in entries
                                           if e["trajectory"].get("faulted"))),
    }
    thinkgeo = {r.task_id: r.gt_answer for r in records if r.template == "thinkgeo"}
    if thinkgeo:
        report["thinkgeo"] = {"tasks": len(thinkgeo), "image_tasks": sum(not gt for gt in thinkgeo.values())}
    return report


def build_earthbench_report(pred_dir: Path, earthbench: Path, *, mode: str = "earthbench",
                            n_resamples: int = 1000, seed: int = 0) -> dict:
    """Report of an Earth-Agent run folder scored against Earth-Bench
    (:func:`earthrl.rewards.metrics.earthbench.score_run`); ``mode="earthbench"`` reproduces
    Earth-Agent's published numbers, ``"earthrl"`` scores all 248 tasks (missing = 0).
    Same shape as :func:`build_report`; the prediction files carry no turns or tokens."""
    res = score_run(Path(pred_dir), Path(earthbench), mode=mode, n_resamples=n_resamples, seed=seed)
    scored = res["metrics"]["accuracy"]["n"]
    return {"n_trajectories": scored, "n_tasks": res["n_tasks"], "metrics_mode": mode, "source": str(pred_dir),
            "predictions_loaded": res["n_records"], "metrics": {"n": scored, **res["metrics"]},
            "by_skill": {}, "by_mode": {}, "turns_histogram": {}, "tokens_by_format": {}, "skipped": res["skipped"]}


# keys of compute_all's "skipped" -> what they mean in the report
SKIPPED_LABELS = {
    "faulted": "trajectories ended by a fault outside the agent (out of every metric)",
    "no_reference": "tasks without reference calls (out of the call metrics)",
    "missing_prediction": "tasks without a prediction (0 in the earthrl mode, skipped in the earthbench mode)",
    "outside_tasks": "predictions for tasks outside the scored set",
    "efficiency_inf": "tasks whose reference has no calls (out of Efficiency)",
    "no_turns": "records without turns, e.g. prediction files (out of EIR, turns, tokens)",
    "no_calls": "records whose calls were not logged (out of the call metrics)",
    "not_judged": "answers not judged (out of Accuracy)",
}


def _cell(m: dict, key: str) -> str:
    if key not in m:
        return "–"
    label, fmt = TABLE_METRICS[key]
    value, ci = m[key]["value"], m[key].get("ci95")
    if value != value:  # NaN: no episode entered the metric
        return "–"
    text = fmt.format(value)
    has_ci = ci and all(c is not None and c == c for c in ci)  # no interval: eval.bootstrap=0 (NaN ends)
    return f"{text} [{fmt.format(ci[0])}, {fmt.format(ci[1])}]" if has_ci else text


def _has_intervals(report: dict) -> bool:
    """Whether any overall metric has a finite interval (none when the bootstrap was off)."""
    return any(isinstance(m, dict) and m.get("ci95") and all(c is not None and c == c for c in m["ci95"])
               for m in report["metrics"].values())


def _table(rows: dict[str, dict], first: str, columns=None) -> list[str]:
    """Markdown table of ``rows`` (``{row name: metrics}``) over ``columns`` (default: every metric of
    :data:`TABLE_METRICS` but ThinkGeo's), each column shown when a row has it."""
    columns = columns or [k for k in TABLE_METRICS if k not in THINKGEO_COLUMNS]
    keys = [k for k in columns if any(k in m for m in rows.values())]
    lines = [f"| {first} | n | " + " | ".join(TABLE_METRICS[k][0] for k in keys) + " |",
             "|" + "---|" * (len(keys) + 2)]
    for name, m in rows.items():
        lines.append(f"| {name} | {m.get('n', '')} | " + " | ".join(_cell(m, k) for k in keys) + " |")
    return lines


def to_markdown(report: dict) -> str:
    """The report as Markdown: overall metrics with 95% CIs, ThinkGeo's metrics when ThinkGeo tasks were run, then
    the per-skill and per-mode tables, turns and tokens (sections without data are left out)."""
    what = "scored predictions" if "predictions_loaded" in report else "trajectories"
    tg = report.get("thinkgeo")
    lines = [f"# EarthRL evaluation: {report['n_tasks']} tasks, {report['n_trajectories']} {what} "
             f"(metrics mode: {report['metrics_mode']})", "",
             "Values are means with bootstrap 95% confidence intervals [low, high]." if _has_intervals(report)
             else "Values are means (no intervals: eval.bootstrap=0).", "",
             *_table({"all": report["metrics"]}, "split")]
    if tg:
        lines += ["", "## ThinkGeo's metrics", "",
                  f"As ThinkGeo's evaluator defines them (Shabbir et al. 2025): Inst., Tool., Arg. step by step against "
                  f"the reference calls; Ans. over the {tg['tasks'] - tg['image_tasks']} tasks with a textual answer; "
                  f"Ans_I over all {tg['tasks']}, with the image-generation tasks ({tg['image_tasks']}) scored by "
                  "the arguments of their image tools.", "",
                  *_table({"all": report["metrics"], **report["by_skill"]}, "split / skill", THINKGEO_COLUMNS)]
    if report["by_skill"]:
        lines += ["", "## By skill", "", *_table(report["by_skill"], "skill")]
    if report["by_mode"]:
        lines += ["", "## By mode", "", *_table(report["by_mode"], "mode")]
    if report["turns_histogram"]:
        lines += ["", "## Turns per trajectory", "", "| turns | trajectories |", "|---|---|",
                  *[f"| {k} | {v} |" for k, v in report["turns_histogram"].items()]]
    if report["tokens_by_format"]:
        lines += ["", "## Tokens per trajectory by action format", "", "| format | action | observation |",
                  "|---|---|---|", *[f"| {f} | {v['action_tokens']:.1f} | {v['observation_tokens']:.1f} |"
                                     for f, v in report["tokens_by_format"].items()]]
    if report.get("roles"):
        lines += roles_markdown(report["roles"])
    lines += error_kinds_markdown(report.get("error_kinds", {}))
    skipped = {k: (len(v) if isinstance(v, list) else v) for k, v in report.get("skipped", {}).items()}
    if any(skipped.values()):
        lines += ["", "Left out of some metrics:", "",
                  *[f"- {SKIPPED_LABELS.get(k, k)}: {v}" for k, v in skipped.items() if v]]
    return "\n".join(lines) + "\n"


def plot_report(report: dict, folder: Path) -> list[Path]:
    """PNG plots: accuracy and EIR by skill (with CIs), histogram of turns, tokens by action format."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    skills = list(report["by_skill"])
    for key, label in (("accuracy", "Accuracy"), ("eir", "Error-turn rate (EIR)")):
        vals = [report["by_skill"][s].get(key, {"value": 0.0}) for s in skills]
        fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(skills)), 3.2))
        means = [v["value"] for v in vals]
        err = [[max(0.0, v["value"] - v.get("ci95", [v["value"]] * 2)[0]) for v in vals],
               [max(0.0, v.get("ci95", [v["value"]] * 2)[1] - v["value"]) for v in vals]]
        ax.bar(skills, means, yerr=err, capsize=3, color="#4c72b0")
        ax.set_ylabel(label)
        ax.set_title(f"{label} by skill (95% CI)")
        ax.tick_params(axis="x", labelrotation=30)
        fig.tight_layout()
        paths.append(folder / f"{key}_by_skill.png")
        fig.savefig(paths[-1], dpi=100)
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(4, 3))
    hist = report["turns_histogram"]
    ax.bar([str(k) for k in hist], list(hist.values()), color="#55a868")
    ax.set_xlabel("assistant turns")
    ax.set_ylabel("trajectories")
    ax.set_title("Turns per trajectory")
    fig.tight_layout()
    paths.append(folder / "turns_histogram.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(4, 3))
    fmts = list(report["tokens_by_format"])
    act = [report["tokens_by_format"][f]["action_tokens"] for f in fmts]
    obs = [report["tokens_by_format"][f]["observation_tokens"] for f in fmts]
    ax.bar(fmts, act, label="action", color="#c44e52")
    ax.bar(fmts, obs, bottom=act, label="observation", color="#8172b2")
    ax.set_ylabel("tokens per trajectory")
    ax.set_title("Action / observation tokens")
    ax.legend()
    fig.tight_layout()
    paths.append(folder / "tokens_by_format.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    return paths


def strict_json(value):
    """``value`` with every NaN or infinite float (a metric with nothing to average, an interval of one value)
    replaced by None, so that the file is JSON by RFC 8259 (no bare ``NaN``) and every reader can load it."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value


def write_report(report: dict, out_dir: Path, plots: bool = True) -> dict:
    """Write ``report.json`` (strict JSON: a value that is not a finite number is null), ``report.md`` and
    (optionally) ``plots/*.png``; returns their paths."""
    paths = {"json": out_dir / "report.json", "markdown": out_dir / "report.md"}
    paths["json"].write_text(json.dumps(strict_json(report), indent=2, allow_nan=False))
    paths["markdown"].write_text(to_markdown(report))
    paths["plots"] = plot_report(report, out_dir / "plots") if plots and report["by_skill"] else []
    return paths
