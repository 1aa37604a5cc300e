"""The learning recipe's tables (``earthrl learn``'s ``learning.{md,json,png}``): every stage's held-out
metrics with bootstrap 95% intervals and the paired differences between stages.

A table has one row per stage — the base model, the SFT warm start, each RL row trained from it
(``learn.rows``), each untuned comparison model (``learn.compare_models``) and each comparison SFT mode
— in the shape of RS-Claw-Evolution's Table III. Its differences are paired over tasks
(:func:`earthrl.rewards.metrics.paired.paired_difference`): SFT − base, each RL row − SFT, the SFT
warm start − each comparison SFT, and each comparison model − the best trained stage (the SFT or RL
row with the highest accuracy on the held-out table). The transfer table (``learn.transfer_eval``) is the
same over the episodes of the same evaluations in the phrasings unlike training, with the best trained
stage of the held-out table (chosen there, never on the transfer episodes).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf

from earthrl.launch.config_schema.logger import LoggerConfig
from earthrl.launch.override_text import CONF_DIR
from earthrl.rewards.metrics.compute import references_of
from earthrl.rewards.metrics.paired import paired_difference
from earthrl.rewards.metrics.report import build_report, episode_records
from earthrl.rollout.run_logger import RunLogger

CURVE_METRICS = ("accuracy", "eir", "avg_turns")
FORMATS = {"accuracy": "{:.1%}", "eir": "{:.3f}", "avg_turns": "{:.2f}"}


def _stage_records(folder: Path, tasks_by_id: dict[str, dict], modes: Sequence[str]) -> list[dict]:
    entries = [json.loads(line) for line in (folder / "trajectories.jsonl").read_text().splitlines() if line.strip()]
    return [e for e in entries if e["task_id"] in tasks_by_id and e["mode"] in modes]


def best_trained(stages: dict[str, dict], trained: list[str]) -> str:
    """The trained stage (of ``trained``, in order) with the highest accuracy in ``stages``; the first
    of them on a tie.

    Raises:
        ValueError: none of ``trained`` is in ``stages``.
    """
    present = [s for s in trained if s in stages]
    if not present:
        raise ValueError(f"no trained stage among {trained} was evaluated")
    return max(present, key=lambda s: (stages[s]["accuracy"]["value"], -present.index(s)))


def table(evals: dict[str, Path], tasks: list[dict], modes: Sequence[str], *, rows: list[str], models: list[str],
          n_resamples: int, seed: int, best: str | None = None) -> dict:
    """One table of stages and their paired differences.

    Args:
        evals: stage name → evaluation folder (its ``trajectories.jsonl``): ``base``, ``sft``, the RL
            ``rows``, the comparison ``models`` and any ``sft_<mode>``.
        modes: the phrasings whose episodes make this table (``IF``, ``AP``, ``OW``).
        tasks: the held-out TaskSpec dicts; those no stage evaluated are left out (a stage that misses a
            task another evaluated counts it as failed, as ``earthrl eval`` does).
        rows: the RL rows' stage names; models: the comparison models' stage names.
        n_resamples, seed: bootstrap settings.
        best: the trained stage the models are compared with; None: the best of ``sft`` and ``rows``
            here (:func:`best_trained`).

    Returns:
        ``{"stages": {stage: {metric: {"value", "ci95", "n"}, "n": trajectories}}, "differences":
        {"x-y": {metric: paired_difference(...)}}, "best_trained": str, "n_tasks": int, "modes": [str]}``; a difference
        "x-y" is stage x minus stage y: ``sft-base``, ``<row>-sft``, ``sft-sft_<mode>``, ``<model>-<best>``.
    """
    entries = {stage: _stage_records(folder, {t["id"]: t for t in tasks}, modes) for stage, folder in evals.items()}
    seen = {e["task_id"] for es in entries.values() for e in es}  # the tasks evaluated (eval.max_tasks)
    tasks = [t for t in tasks if t["id"] in seen]
    by_id = {t["id"]: t for t in tasks}
    refs = references_of(tasks)
    stages = {}
    for stage, es in entries.items():
        rep = build_report(es, by_id, n_resamples=n_resamples, seed=seed)
        stages[stage] = {m: rep["metrics"][m] for m in CURVE_METRICS} | {"n": rep["n_trajectories"]}
    best = best or best_trained(stages, ["sft", *rows])
    pairs = {"sft-base": ("base", "sft")} | {f"{r}-sft": ("sft", r) for r in rows}
    pairs |= {f"sft-{s}": (s, "sft") for s in evals if s.startswith("sft_")}  # masked SFT vs each compared mode
    pairs |= {f"{m}-{best}": (best, m) for m in models}
    records = {stage: episode_records(es, by_id) for stage, es in entries.items()}
    diffs = {name: {m: paired_difference(records[a], records[b], refs, m, n_resamples=n_resamples, seed=seed)
                    for m in CURVE_METRICS} for name, (a, b) in pairs.items()}
    return {"stages": stages, "differences": diffs, "best_trained": best, "n_tasks": len(tasks), "modes": list(modes)}


def run_curves(metrics: dict[str, Path]) -> dict[str, dict[str, list[float]]]:
    """Per RL row, its training run's curves from ``metrics.jsonl``: ``{"reward": mean reward per step
    (the row's own reward, so scales differ between rows), "accuracy": share of the step's sampled
    trajectories that answered correctly (comparable between rows)}``; empty lists without the file."""
    curves = {}
    for row, path in metrics.items():
        steps = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
        curves[row] = {"reward": [s["reward/mean"] for s in steps], "accuracy": [s["eval/accuracy"] for s in steps]}
    return curves


def summarise(evals: dict[str, Path], tasks: list[dict], run_metrics: dict[str, Path], n_resamples: int, seed: int, *,
              models: Sequence[str] = (), modes: Sequence[str] = ("IF",), transfer_modes: Sequence[str] = ()) -> dict:
    """The recipe's summary (``learning.json``).

    Args:
        evals: stage name → evaluation folder (see :func:`table`), in table order.
        tasks: the held-out TaskSpec dicts.
        run_metrics: RL row → its training run's ``metrics.jsonl`` (the rows, in order).
        n_resamples, seed: bootstrap settings.
        models: the comparison models' stage names.
        modes: the phrasings of the held-out table; transfer_modes: those of the transfer table (none: no table).

    Returns:
        :func:`table`'s dict of ``modes`` with ``"curves": {row: {"reward", "accuracy"}}`` (:func:`run_curves`)
        and, with ``transfer_modes``, ``"transfer"``: the table of those, its models compared with the held-out
        table's best trained stage.
    """
    rows = list(run_metrics)
    summary = table(evals, tasks, modes, rows=rows, models=list(models), n_resamples=n_resamples, seed=seed)
    summary["curves"] = run_curves(run_metrics)
    if transfer_modes:
        summary["transfer"] = table(evals, tasks, transfer_modes, rows=rows, models=list(models),
                                    n_resamples=n_resamples, seed=seed, best=summary["best_trained"])
    return summary


def _ci(m: dict, fmt: str) -> str:
    lo, hi = m["ci95"]
    return f"{fmt.format(m['value'])} [{fmt.format(lo)}, {fmt.format(hi)}]"


def table_markdown(t: dict, title: str) -> list[str]:
    """One table of :func:`table` as Markdown lines: a stage table and its paired differences."""
    lines = [f"## {title}: {', '.join(t['modes'])} ({t['n_tasks']} held-out tasks)", "",
             "| stage | trajectories | accuracy [95% CI] | EIR [95% CI] | turns [95% CI] |", "|---|---|---|---|---|"]
    for stage, m in t["stages"].items():
        lines.append(f"| {stage} | {m['n']} | " + " | ".join(_ci(m[k], FORMATS[k]) for k in CURVE_METRICS) + " |")
    lines += ["", "| difference (paired over tasks) | accuracy [95% CI] | EIR [95% CI] | turns [95% CI] |",
              "|---|---|---|---|"]
    for name, d in t["differences"].items():
        cells = [_ci({"value": d[k]["diff"], "ci95": d[k]["ci95"]}, "{:+.3f}") for k in CURVE_METRICS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def to_markdown(summary: dict) -> str:
    """The summary as Markdown: the held-out table, the transfer table (when run), each RL row's curves."""
    lines = ["# Learning curve", "", *table_markdown(summary, "Held-out evaluation")]
    if "transfer" in summary:
        lines += table_markdown(summary["transfer"], "Transfer evaluation (phrased unlike training)")
    lines += [f"Best trained stage (compared with the untuned models): {summary['best_trained']}", ""]
    for row, c in summary["curves"].items():
        reward = " → ".join(f"{r:.3f}" for r in c["reward"]) or "(no steps)"
        acc = " → ".join(f"{a:.0%}" for a in c["accuracy"]) or "(no steps)"
        lines += [f"{row} training: mean reward per step {reward}; correct share of the sampled trajectories {acc}"]
    return "\n".join([*lines, ""])


def _bars(ax, stages: dict, key: str, title: str) -> None:
    names = list(stages)
    vals = [stages[s][key] for s in names]
    centre = [v["value"] for v in vals]
    err = [[c - v["ci95"][0] for c, v in zip(centre, vals)], [v["ci95"][1] - c for c, v in zip(centre, vals)]]
    ax.bar(names, centre, yerr=err, capsize=4)
    ax.set_title(title)
    ax.tick_params(axis="x", rotation=30)


def write_summary(summary: dict, out: Path) -> None:
    """``learning.json``, ``learning.md`` and ``learning.png`` (accuracy and EIR per stage with their
    intervals, transfer accuracy when run, and each RL row's training accuracy per step) in ``out``;
    prints the Markdown."""
    import matplotlib  # lazy: plotting only at the end of a recipe

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: see above

    (out / "learning.json").write_text(json.dumps(summary, indent=2))
    md = to_markdown(summary)
    (out / "learning.md").write_text(md)
    panels = 4 if "transfer" in summary else 3
    fig, axes = plt.subplots(1, panels, figsize=(4 * panels, 3.5))
    _bars(axes[0], summary["stages"], "accuracy", "held-out accuracy (95% CI)")
    _bars(axes[1], summary["stages"], "eir", "held-out EIR (95% CI)")
    if "transfer" in summary:
        _bars(axes[2], summary["transfer"]["stages"], "accuracy", "transfer accuracy (95% CI)")
    for row, c in summary["curves"].items():
        axes[-1].plot(range(1, len(c["accuracy"]) + 1), c["accuracy"], marker="o", label=row)
    axes[-1].set_title("training: correct share per step")
    axes[-1].set_xlabel("step")
    if summary["curves"]:
        axes[-1].legend()
    fig.tight_layout()
    fig.savefig(out / "learning.png", dpi=100)
    plt.close(fig)
    print(md)
    print(f"learning curve: {out / 'learning.md'} | {out / 'learning.json'} | {out / 'learning.png'}")


def log_learning_curve(out: Path, logger: object, name: str) -> str | None:
    """Send ``out/learning.png`` to wandb as the image ``learn/plots/learning`` in a run of its own (``name``,
    its files in ``out/wandb``) when the recipe's stages log to wandb (``logger``: ``learn.common.logger``, a
    conf/logger preset name or keys over the wandb preset; absent: the stages' default, wandb). Returns the
    wandb folder, or None when nothing was logged (``logger=none``, ``logger.mode=disabled``, no PNG)."""
    keys = OmegaConf.to_container(logger) if OmegaConf.is_config(logger) else logger
    keys = {"name": keys} if isinstance(keys, str) else dict(keys or {})
    preset = OmegaConf.load(CONF_DIR / "logger" / f"{keys.get('name', 'wandb')}.yaml")
    cfg = OmegaConf.merge(OmegaConf.structured(LoggerConfig), preset, keys)
    png = out / "learning.png"
    if cfg.name != "wandb" or cfg.mode == "disabled" or not png.is_file():
        return None
    run = RunLogger(out, str(cfg.project), name, str(cfg.mode), {"logger": OmegaConf.to_container(cfg)})
    try:
        run.log_images([png], step=0, prefix="learn")
        return run.wandb_dir
    finally:
        run.finish()
