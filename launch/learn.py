"""`earthrl learn`: the learning recipe — held-out evaluation of the base model, SFT warm start and
GRPO from it, evaluation after SFT and after GRPO — and the learning curve.

Every stage is one of EarthRL's own commands, started as a child process with the preset's settings
(``conf/learn.yaml``, ``conf/learn/*.yaml``) and printed before it runs (and written to
``<output_dir>/commands.sh``), so the curve is reproduced stage by stage with the printed commands:

    earthrl eval …  (base)  →  earthrl train trainer.warm_start=<preset> …  →  earthrl eval … (SFT checkpoint)
    →  earthrl eval … (GRPO checkpoint)  [→ earthrl sft sft.mode=<m> …  →  earthrl eval …  per comparison mode]

The SFT is the warm start of :mod:`earthrl.launch.warm_start` (built once per setting and cached, the
same one ``make train`` uses), and the GRPO run records which checkpoint started it (``init_from.json``).
Stages resume: an evaluation skips the (task, mode) pairs it recorded, a comparison SFT is skipped
when its ``sft_summary.json`` is there, GRPO runs with ``trainer.resume=auto``. The comparison of
RS-Claw-Evolution (§4: oracle vs unmasked vs error-turn-masked SFT, same budget) runs the modes of
``learn.compare_modes`` with the warm start's preset.

The result (``<output_dir>/learning.{md,json,png}``): accuracy, EIR and turns of each stage with their
bootstrap 95% intervals (:func:`earthrl.rewards.metrics.report.build_report`), the paired differences
SFT − base and GRPO − SFT with their intervals (:func:`earthrl.rewards.metrics.paired.paired_difference`),
and the GRPO reward curve from the run's ``metrics.jsonl``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from earthrl.envs.errors import ConfigError
from earthrl.envs.paths import earthrl_home
from earthrl.launch import lifecycle
from earthrl.launch.config_schema import check_config
from earthrl.launch.config_schema.sft import SFTConfig
from earthrl.launch.config_schema.tasks import TasksConfig
from earthrl.launch.job_inputs import check_output_dir, clear_unfinished_sft, data_root, load_tasks
from earthrl.launch.override_text import CONF_DIR, as_overrides
from earthrl.launch.warm_start import preset_file
from earthrl.models.checkpoint import list_checkpoints
from earthrl.rewards.metrics.compute import references_of
from earthrl.rewards.metrics.paired import paired_difference
from earthrl.rewards.metrics.report import build_report, episode_records

CURVE_METRICS = ("accuracy", "eir", "avg_turns")


class LearnRecipe:
    """The chained stages of the module doc. Args: cfg, the composed ``conf/learn.yaml``."""

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg
        self.ln = cfg.learn
        self.out = Path(self.ln.output_dir)

    # ---------------------------------------------------------------- stages
    def shared(self) -> list[str]:
        """Overrides every stage gets: the model, the task suite, the env and ``learn.common``."""
        ln = self.ln
        return [f"model={ln.model}", f"tasks={ln.tasks}", f"env={ln.env}", *as_overrides(ln.common)]

    def sft_overrides(self, mode: str) -> list[str]:
        """Overrides of a comparison ``earthrl sft`` stage: the warm start's preset in ``mode``
        (output in ``<output_dir>/sft_<mode>``)."""
        return [*self.shared(), f"sft={self.ln.warm_start}", f"sft.mode={mode}",
                f"sft.output_dir={self.out / f'sft_{mode}'}"]

    def grpo_overrides(self) -> list[str]:
        """Overrides of the ``earthrl train`` stage: GRPO after the SFT warm start ``learn.warm_start``
        (built once and cached by :mod:`earthrl.launch.warm_start`), output in ``<output_dir>/grpo``."""
        return [*self.shared(), f"trainer.warm_start={self.ln.warm_start}", f"trainer.output_dir={self.out / 'grpo'}",
                "trainer.resume=auto", *as_overrides(self.ln.grpo)]

    def eval_overrides(self, stage: str) -> list[str]:
        """Overrides of an ``earthrl eval`` stage, without ``eval.checkpoint`` (output in ``<output_dir>/eval/<stage>``)."""
        return [*self.shared(), f"tasks.split={self.ln.heldout_split}", f"eval.output_dir={self.out / 'eval' / stage}",
                "eval.plots=false", *as_overrides(self.ln.eval)]

    def compare_modes(self) -> list[str]:
        """The SFT modes of the comparison other than the warm start's own (that one is the ``sft`` stage)."""
        preset = OmegaConf.load(preset_file(str(self.ln.warm_start), "learn.warm_start"))
        own = str(OmegaConf.merge(OmegaConf.structured(SFTConfig), preset).mode)  # the preset on the schema
        return [m for m in dict.fromkeys(map(str, self.ln.compare_modes)) if m != own]

    def stage_jobs(self) -> dict[str, tuple[str, list[str]]]:
        """Every stage as ``(command, overrides)``, for checking them all before the first one starts
        (the checkpoints that earlier stages write are left out)."""
        jobs = {"eval base": ("eval", self.eval_overrides("base")), "grpo": ("train", self.grpo_overrides())}
        return jobs | {f"sft {m}": ("sft", self.sft_overrides(m)) for m in self.compare_modes()}

    @staticmethod
    def learn_keys(message: str) -> str:
        """A stage's error ``message`` with the eval keys it names as ``earthrl learn`` takes them
        (``eval.resume`` is ``++learn.eval.eval.resume``, every ``eval.output_dir`` is under ``learn.output_dir``)."""
        return (message.replace("set eval.resume=false", "set ++learn.eval.eval.resume=false")
                .replace("choose another eval.output_dir", "choose another learn.output_dir"))

    def run_stage(self, what: str, command: str, overrides: list[str]) -> None:
        """Print the stage and its command (as a user would type it), then run ``earthrl <command>``
        with this Python.

        Raises:
            RuntimeError: the stage exited non-zero (its output is above; rerun resumes).
            RunInterrupted: a stop signal; the stage got it too and stopped cleanly (or was killed).
        """
        shown = " ".join(shlex.quote(a) for a in ["earthrl", command, *overrides])
        print(f"\n== learn: {what}\n$ {shown}", flush=True)
        with (self.out / "commands.sh").open("a") as f:
            f.write(shown + "\n")
        lifecycle.at(f"stage '{what}'")
        stage = subprocess.Popen([sys.executable, "-m", "earthrl.launch", command, *overrides])
        try:
            code = stage.wait()
        except lifecycle.RunInterrupted as stop:  # the stage stops itself (Ray, engine, checkpoint) first
            stage.send_signal(stop.signum)
            try:
                stage.wait(timeout=lifecycle.STOP_DEADLINE_S - 1)
            except subprocess.TimeoutExpired:
                stage.kill()
            raise
        if code != 0:
            raise RuntimeError(f"learn: stage '{what}' failed (see above); `earthrl learn` again resumes it")

    def sft(self, mode: str) -> Path:
        """A comparison SFT in ``mode`` (skipped when its summary is there); returns its final checkpoint."""
        folder = self.out / f"sft_{mode}"
        if not (folder / "sft_summary.json").is_file():
            clear_unfinished_sft(folder)
            self.run_stage(f"SFT ({mode}, for the comparison)", "sft", self.sft_overrides(mode))
        return self.last_checkpoint(folder, "SFT")

    def grpo(self) -> tuple[Path, Path]:
        """The warm start and GRPO from it (resumes); returns (the SFT checkpoint, GRPO's final checkpoint)."""
        self.run_stage("SFT warm start, then GRPO from it", "train", self.grpo_overrides())
        folder = self.out / "grpo"
        record = folder / "init_from.json"
        if not record.is_file():
            raise RuntimeError(f"learn: {record} is missing: the GRPO stage did not start from an SFT checkpoint")
        return Path(json.loads(record.read_text())["checkpoint"]), self.last_checkpoint(folder, "GRPO")

    @staticmethod
    def last_checkpoint(folder: Path, what: str) -> Path:
        """The newest complete checkpoint of a stage. Raises: RuntimeError when it wrote none."""
        found = list_checkpoints(folder / "checkpoints")
        if not found:
            raise RuntimeError(f"learn: {folder} has no checkpoint after {what}")
        return found[-1]

    def evaluate(self, stage: str, checkpoint: Path | None) -> Path:
        """Held-out evaluation of ``checkpoint`` (None: the base model); returns its folder."""
        extra = [f"eval.checkpoint={checkpoint}"] if checkpoint is not None else []
        self.run_stage(f"held-out evaluation: {stage}", "eval", [*self.eval_overrides(stage), *extra])
        return self.out / "eval" / stage

    def run(self) -> dict:
        """Every stage, then the learning curve; returns the summary dict (``learning.json``)."""
        self.validate()
        self.out.mkdir(parents=True, exist_ok=True)
        lifecycle.attach(self.out)
        (self.out / "config.yaml").write_text(OmegaConf.to_yaml(self.cfg, resolve=True))
        (self.out / "commands.sh").write_text(  # in the run's folder and cache, so they reproduce it from anywhere
            "# the stages of the last `earthrl learn` run, in order (with the virtual environment active: "
            f"source .venv/bin/activate)\ncd {shlex.quote(str(Path.cwd()))}\n"
            f"export EARTHRL_HOME={shlex.quote(str(earthrl_home().resolve()))}\n")
        evals = {"base": self.evaluate("base", None)}
        sft_ckpt, grpo_ckpt = self.grpo()
        evals["sft"] = self.evaluate("sft", sft_ckpt)
        evals["grpo"] = self.evaluate("grpo", grpo_ckpt)
        for mode in self.compare_modes():
            evals[f"sft_{mode}"] = self.evaluate(f"sft_{mode}", self.sft(mode))
        summary = summarise(evals, self.heldout, self.out / "grpo" / "metrics.jsonl", int(self.ln.bootstrap),
                            int(self.cfg.seed))
        write_summary(summary, self.out)
        return summary

    def validate(self) -> None:
        """The held-out tasks and the data exist; the SFT modes are known.

        Raises:
            ConfigError: one line naming the field and the fix.
        """
        check_config(self.cfg, "learn")
        ln = self.ln
        check_output_dir("learn.output_dir", ln.output_dir)
        preset_file(str(ln.warm_start), "learn.warm_start")
        group = CONF_DIR / "tasks" / f"{ln.tasks}.yaml"
        if not group.is_file():
            known = ", ".join(sorted(p.stem for p in group.parent.glob("*.yaml")))
            raise ConfigError(f"learn.tasks={ln.tasks}: no such task group; use one of {known}")
        suite = OmegaConf.merge(OmegaConf.structured(TasksConfig), OmegaConf.load(group))  # the preset on the schema
        self.heldout = load_tasks(str(suite.name), str(ln.heldout_split), data_root(OmegaConf.create({"tasks": suite})),
                                  split_key="learn.heldout_split")


def _stage_records(folder: Path, tasks_by_id: dict[str, dict]):
    entries = [json.loads(line) for line in (folder / "trajectories.jsonl").read_text().splitlines() if line.strip()]
    return [e for e in entries if e["task_id"] in tasks_by_id]


def summarise(evals: dict[str, Path], tasks: list[dict], grpo_metrics: Path, n_resamples: int, seed: int) -> dict:
    """The learning curve of the stages' evaluations.

    Args:
        evals: stage name → evaluation folder (its ``trajectories.jsonl``); ``base``, ``sft``, ``grpo``
            and any ``sft_<mode>``.
        tasks: the held-out TaskSpec dicts; those no stage evaluated are left out (a stage that misses
            a task another evaluated counts it as failed, as ``earthrl eval`` does).
        grpo_metrics: the GRPO run's ``metrics.jsonl`` (its reward curve).

    Returns:
        ``{"stages": {stage: {metric: {"value", "ci95", "n"}}}, "differences": {"sft-base"|"grpo-sft"|
        "sft-sft_<mode>": {metric: paired_difference(...)}}, "reward_curve": [float], "n_tasks": int}``; a
        difference "x-y" is stage x minus stage y ("sft-sft_oracle": the ``learn.warm_start`` SFT minus the
        oracle-mode SFT of the comparison).
    """
    entries = {stage: _stage_records(folder, {t["id"]: t for t in tasks}) for stage, folder in evals.items()}
    seen = {e["task_id"] for es in entries.values() for e in es}  # the tasks evaluated (eval.max_tasks)
    tasks = [t for t in tasks if t["id"] in seen]
    by_id = {t["id"]: t for t in tasks}
    refs = references_of(tasks)
    stages = {}
    for stage, es in entries.items():
        rep = build_report(es, by_id, n_resamples=n_resamples, seed=seed)
        stages[stage] = {m: rep["metrics"][m] for m in CURVE_METRICS} | {"n": rep["n_trajectories"]}
    records = {stage: episode_records(es, by_id) for stage, es in entries.items()}
    diffs = {}
    pairs = {"sft-base": ("base", "sft"), "grpo-sft": ("sft", "grpo")}
    pairs |= {f"sft-{s}": (s, "sft") for s in evals if s.startswith("sft_")}  # masked SFT vs each compared mode
    for name, (a, b) in pairs.items():
        diffs[name] = {m: paired_difference(records[a], records[b], refs, m, n_resamples=n_resamples, seed=seed)
                       for m in CURVE_METRICS}
    curve = []
    if grpo_metrics.is_file():
        curve = [json.loads(line)["reward/mean"] for line in grpo_metrics.read_text().splitlines() if line.strip()]
    return {"stages": stages, "differences": diffs, "reward_curve": curve, "n_tasks": len(tasks)}


def _ci(m: dict, fmt: str) -> str:
    lo, hi = m["ci95"]
    return f"{fmt.format(m['value'])} [{fmt.format(lo)}, {fmt.format(hi)}]"


FORMATS = {"accuracy": "{:.1%}", "eir": "{:.3f}", "avg_turns": "{:.2f}"}


def to_markdown(summary: dict) -> str:
    """The curve as Markdown: a stage table, the paired differences, the reward curve."""
    lines = [f"# Learning curve ({summary['n_tasks']} held-out tasks)", "",
             "| stage | trajectories | accuracy [95% CI] | EIR [95% CI] | turns [95% CI] |", "|---|---|---|---|---|"]
    for stage, m in summary["stages"].items():
        lines.append(f"| {stage} | {m['n']} | " + " | ".join(_ci(m[k], FORMATS[k]) for k in CURVE_METRICS) + " |")
    lines += ["", "| difference (paired over tasks) | accuracy [95% CI] | EIR [95% CI] | turns [95% CI] |",
              "|---|---|---|---|"]
    for name, d in summary["differences"].items():
        cells = [_ci({"value": d[k]["diff"], "ci95": d[k]["ci95"]}, "{:+.3f}") for k in CURVE_METRICS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    curve = " → ".join(f"{r:.3f}" for r in summary["reward_curve"]) or "(no GRPO steps)"
    lines += ["", f"GRPO reward curve (mean reward per step): {curve}", ""]
    return "\n".join(lines)


def write_summary(summary: dict, out: Path) -> None:
    """``learning.json``, ``learning.md`` and ``learning.png`` (accuracy and EIR per stage with their
    intervals, and the reward curve) in ``out``; prints the Markdown."""
    import matplotlib  # lazy: plotting only at the end of a recipe

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: see above

    (out / "learning.json").write_text(json.dumps(summary, indent=2))
    md = to_markdown(summary)
    (out / "learning.md").write_text(md)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
    names = list(summary["stages"])
    for ax, key in zip(axes[:2], ("accuracy", "eir")):
        vals = [summary["stages"][s][key] for s in names]
        centre = [v["value"] for v in vals]
        err = [[c - v["ci95"][0] for c, v in zip(centre, vals)], [v["ci95"][1] - c for c, v in zip(centre, vals)]]
        ax.bar(names, centre, yerr=err, capsize=4)
        ax.set_title(f"held-out {key} (95% CI)")
        ax.tick_params(axis="x", rotation=30)
    axes[2].plot(range(1, len(summary["reward_curve"]) + 1), summary["reward_curve"], marker="o")
    axes[2].set_title("GRPO mean reward per step")
    axes[2].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(out / "learning.png", dpi=100)
    plt.close(fig)
    print(md)
    print(f"learning curve: {out / 'learning.md'} | {out / 'learning.json'} | {out / 'learning.png'}")


def run(cfg: DictConfig) -> dict:
    """Entry of ``earthrl learn`` (see :class:`LearnRecipe`)."""
    return LearnRecipe(cfg).run()
