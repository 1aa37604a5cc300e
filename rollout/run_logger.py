"""Run logging: wandb (offline without an API key), a metrics JSONL and a console line per step.

The run folder's JSONL logs (``metrics.jsonl``, ``rollouts.jsonl``, ``internal_errors.jsonl``)
carry a ``step`` on every line; a resumed run first drops the lines of steps after its
checkpoint (:func:`truncate_logs`), so that a run killed anywhere and resumed leaves the same
logs as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from earthrl.rollout.faults import format_faults

# JSONL logs of a run folder whose lines carry the step they belong to
STEP_LOGS = ("metrics.jsonl", "rollouts.jsonl", "internal_errors.jsonl")

LOGGED_AS = {"is_weight_mean": "rollout_corr/rollout_is_mean",
             "is_truncated_frac": "rollout_corr/rollout_is_ratio_fraction_high",
             "masked_seq_frac": "rollout_corr/rollout_rs_seq_masked_fraction",
             "logprob_diff": "rollout/logprob_diff"}
"""The run's metric name of each rollout-correction metric of the learner
(``earthrl.algorithms.rollout_correction.CorrectionStats.metrics``): verl 0.9.1's ``rollout_corr/*`` name where
verl logs the same quantity (``trainer/ppo/rollout_corr_helper.py``), so that both backends' runs compare."""


def read_step_log(path: Path) -> list[dict]:
    """The JSON objects of one of the run's JSONL logs (:data:`STEP_LOGS`), in order; [] without the file. A line
    that is not a JSON object (a write torn by a kill) is left out: readers of a run draw from what is whole."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return [r for r in rows if isinstance(r, dict)]


def truncate_logs(output_dir: Path, step: int) -> int:
    """Drop the lines of steps after ``step`` from the run folder's :data:`STEP_LOGS` (each file
    rewritten atomically); returns the number of lines dropped. A line that is not JSON (a write
    cut by a kill) is dropped too."""
    dropped = 0
    for name in STEP_LOGS:
        path = output_dir / name
        if not path.is_file():
            continue
        kept = []
        for line in path.read_text(errors="replace").splitlines():
            try:
                keep = int(json.loads(line)["step"]) <= step
            except (ValueError, KeyError, TypeError):
                keep = False
            if keep:
                kept.append(line)
            else:
                dropped += 1
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        os.replace(tmp, path)
    return dropped


def log_internal_errors(output_dir: Path, step: int, trajs) -> int:
    """Append every ``internal_error`` trajectory of a step to ``internal_errors.jsonl``
    (step, episode id, task id, turn, traceback); returns how many were written."""
    rows = [{"step": step, "episode_id": t.episode_id, "task_id": t.task_id, "turn": t.failure_turn,
             "traceback": t.internal_error} for t in trajs if t.failure == "internal_error"]
    if rows:
        with (output_dir / "internal_errors.jsonl").open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return len(rows)


def wandb_mode(mode: str) -> str:
    """Resolve ``logger.mode``: "auto" is "online" when WANDB_API_KEY is set, else "offline"."""
    if mode == "auto":
        return "online" if os.environ.get("WANDB_API_KEY") else "offline"
    if mode not in ("online", "offline", "disabled"):
        raise ValueError(f"logger.mode={mode!r}: use auto, online, offline or disabled")
    return mode


class RunLogger:
    """Writes each step's metrics to wandb and ``<output_dir>/metrics.jsonl``.

    Args:
        output_dir: the run folder.
        project: wandb project.
        name: wandb run name.
        mode: "auto" | "online" | "offline" | "disabled".
        config: resolved config (plain dict) stored with the wandb run. The wandb run id is
            kept in ``output_dir/wandb_id`` so that a resumed run continues the same wandb run.
    """

    def __init__(self, output_dir: Path, project: str, name: str, mode: str, config: dict) -> None:
        self.output_dir = output_dir
        self.metrics_path = output_dir / "metrics.jsonl"
        self.run = None
        self.mode = wandb_mode(mode)
        if self.mode != "disabled":
            import wandb

            id_file = output_dir / "wandb_id"
            run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
            id_file.write_text(run_id)
            self.run = wandb.init(project=project, name=name, id=run_id, resume="allow", dir=str(output_dir),
                                  mode=self.mode, config=config, settings=wandb.Settings(console="off", silent=True))

    @property
    def wandb_dir(self) -> str | None:
        """Folder of the wandb run files (offline: sync with `wandb sync <dir>`)."""
        return self.run.dir.rsplit("/files", 1)[0] if self.run is not None else None

    def log(self, metrics: dict, step: int) -> None:
        """Record one step's scalar metrics."""
        with self.metrics_path.open("a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")
        if self.run is not None:
            self.run.log(metrics, step=step)

    def log_report(self, report: dict, paths: dict, step: int = 0, prefix: str = "eval") -> None:
        """Record an evaluation report: its scalar metrics (``<prefix>/…``) in metrics.jsonl and
        wandb, and in wandb also the plots as images and the per-skill table."""
        self.log(flat_metrics(report, prefix), step=step)
        if self.run is not None:
            import wandb

            images = {f"{prefix}/plots/{p.stem}": wandb.Image(str(p)) for p in paths.get("plots", [])}
            keys = sorted({k for m in report["by_skill"].values() for k in m if isinstance(m[k], dict)})
            table = wandb.Table(columns=["skill", *keys],
                                data=[[s, *[m.get(k, {}).get("value") for k in keys]] for s, m in report["by_skill"].items()])
            self.run.log({**images, f"{prefix}/by_skill": table}, step=step)

    def log_images(self, paths: list[Path], step: int, prefix: str = "train") -> None:
        """Send PNG plots to wandb as images ``<prefix>/plots/<file stem>`` at ``step`` (nothing with wandb off;
        the files stay in the run folder either way)."""
        if self.run is not None and paths:
            import wandb

            self.run.log({f"{prefix}/plots/{p.stem}": wandb.Image(str(p)) for p in paths}, step=step)

    def finish(self) -> None:
        """Close the wandb run and stop wandb's service process (the run's lifecycle stops every process the
        run started when it ends; a service left running would fail wandb's own exit hook with a traceback)."""
        if self.run is not None:
            import wandb

            self.run.finish()
            self.run = None
            wandb.teardown()


def format_step(step: int, total: int, m: dict) -> str:
    """One console line for a step's metrics (with ``| faults N (env 1, engine 1)`` when faults hit); the
    time split shows ``+ reward Ns`` and ``+ sync Ns`` where ``time/reward_s`` / ``time/weight_sync_s`` are given."""
    reward = f" + reward {m['time/reward_s']:.0f}s" if "time/reward_s" in m else ""
    sync = f" + sync {m['time/weight_sync_s']:.0f}s" if "time/weight_sync_s" in m else ""
    return (f"step {step}/{total} | reward {m['reward/mean']:.3f}±{m['reward/std']:.3f} | acc {100 * m['eval/accuracy']:.1f}% "
            f"| err-turn {100 * m['rollout/error_turn_rate']:.1f}% | turns {m['rollout/mean_turns']:.2f} "
            f"| {m['perf/gen_tokens_per_s']:.1f} tok/s | step {m['time/step_s']:.0f}s = rollout {m['time/rollout_s']:.0f}s "
            f"(generate {m['time/generate_s']:.0f}s, env+other {m['time/env_s']:.0f}s){reward} + update {m['time/update_s']:.0f}s"
            + sync + format_signal(m) + format_correction(m) + format_faults(m))


def format_correction(m: dict) -> str:
    """``| IS w 1.003, 0.4% cut`` (the mean rollout-correction weight and the share cut to the cap), plus
    ``, 12% seqs masked`` when the band dropped sequences; empty without those metrics (a skipped update)."""
    mean, cut, masked = (m.get(LOGGED_AS[k]) for k in ("is_weight_mean", "is_truncated_frac", "masked_seq_frac"))
    if mean is None:
        return ""
    return f" | IS w {mean:.3f}, {100 * cut:.1f}% cut" + (f", {100 * masked:.0f}% seqs masked" if masked else "")


def format_signal(m: dict) -> str:
    """``| signal 1/2 groups`` (groups with a non-zero advantage), plus what DAPO filtering dropped
    (``, filtered 3 all-wrong 0 all-correct in 2 rounds``) when it ran; empty without those metrics."""
    if "advantage/groups" not in m:
        return ""
    out = f" | signal {m['advantage/nonzero_groups']:.0f}/{m['advantage/groups']:.0f} groups"
    if "filter/rounds" in m:
        out += (f", filtered {m['filter/all_wrong_groups']:.0f} all-wrong {m['filter/all_correct_groups']:.0f} "
                f"all-correct in {m['filter/rounds']:.0f} rounds")
    return out


def flat_metrics(report: dict, prefix: str = "eval") -> dict[str, float]:
    """Scalars for wandb / metrics.jsonl: ``<prefix>/<metric>`` and ``<prefix>/<skill>/<metric>``."""
    out = {f"{prefix}/{k}": v["value"] for k, v in report["metrics"].items() if isinstance(v, dict)}
    for skill, m in report["by_skill"].items():
        out.update({f"{prefix}/{skill}/{k}": v["value"] for k, v in m.items() if isinstance(v, dict)})
    return out
