"""`earthrl learn`: the learning recipe — held-out evaluation of the base model, the SFT warm start, RL rows
trained from it (GRPO, MEFR+TAP, … : ``learn.rows``), untuned comparison models (``learn.compare_models``),
each evaluated, and the tables of RS-Claw-Evolution's Table III shape with paired differences.

Every stage is one of EarthRL's own commands, started as a child process with the preset's settings
(``conf/learn.yaml``, ``conf/learn/*.yaml``) and printed before it runs (and written to
``<output_dir>/commands.sh``), so every number is reproduced stage by stage with the printed commands:

    earthrl eval …  (base)
    →  earthrl train trainer.warm_start=<preset> …  per RL row (the first builds the warm start, the others reuse it)
    →  earthrl eval … (SFT checkpoint)  →  earthrl eval … (each row's last checkpoint)
    →  earthrl eval model=<m> …  per comparison model (no adapter)
    [→ earthrl sft sft.mode=<m> …  →  earthrl eval …  per comparison SFT mode]

Folders under ``<output_dir>``: each RL row's run in ``<row>/`` (``grpo/`` for the GRPO row), each
evaluation in ``eval/<stage>/`` (``base``, ``sft``, ``<row>``, ``<model>``, ``sft_<mode>``), a comparison SFT
in ``sft_<mode>/``. Every evaluation runs ``learn.eval``'s phrasings and ``learn.transfer_eval.modes`` (the
same tasks phrased unlike training) together; their episodes make the held-out and the transfer table.

Every RL row gets ``learn.grpo``'s settings, then its own (``learn.rows.<row>``, `earthrl train` keys; a
row set to null is left out), and starts from the same SFT checkpoint: the warm start of
:mod:`earthrl.launch.warm_start` (built once per setting and cached, the same one ``make train`` uses);
each run records it in ``init_from.json``. Settings that change the warm start (model, tasks, env) must
be the same for every row, which is checked before anything starts. Stages resume: an evaluation skips
the (task, mode) pairs it recorded (and starts over when its row has a newer checkpoint since), a
comparison SFT is skipped when its ``sft_summary.json`` is there, a row runs with ``trainer.resume=auto``.
The comparison of RS-Claw-Evolution (§4: oracle vs unmasked vs error-turn-masked SFT, same budget) runs
the modes of ``learn.compare_modes`` with the warm start's preset. The tables:
:mod:`earthrl.launch.learn_report`.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from earthrl.envs.errors import ConfigError
from earthrl.envs.paths import earthrl_home
from earthrl.launch import lifecycle
from earthrl.launch.config_schema import check_config
from earthrl.launch.config_schema.eval import EvalSettings
from earthrl.launch.config_schema.sft import SFTConfig
from earthrl.launch.config_schema.tasks import TasksConfig
from earthrl.launch.job_inputs import check_output_dir, clear_unfinished_sft, data_root, load_tasks
from earthrl.launch.learn_report import log_learning_curve, summarise, write_summary
from earthrl.launch.override_text import CONF_DIR, as_overrides
from earthrl.launch.warm_start import keyed_overrides, preset_file
from earthrl.models.checkpoint import list_checkpoints
from earthrl.rollout.run_log import open_run_log

ROW_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
RESERVED = ("base", "sft", "eval")  # stage and folder names of the recipe itself


def last_wins(overrides: list[str]) -> list[str]:
    """``overrides`` with only the last of those that set one key (Hydra's own rule: the last one wins),
    so that a printed command names each key once."""
    by_key = {}
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        by_key.pop(key, None)
        by_key[key] = o
    return list(by_key.values())


class LearnRecipe:
    """The chained stages of the module doc. Args: cfg, the composed ``conf/learn.yaml``."""

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg
        self.ln = cfg.learn
        self.out = Path(self.ln.output_dir)
        self.heldout: list[dict] = []  # the held-out tasks (validate)
        self.warm_keys: dict[str, list[str]] = {}  # RL row -> the overrides that key its warm start (note_stage)

    # ---------------------------------------------------------------- stages
    def shared(self, model: str | None = None) -> list[str]:
        """Overrides every stage gets: the model (``model``, else ``learn.model``), the task suite, the env
        and ``learn.common``."""
        ln = self.ln
        return [f"model={model or ln.model}", f"tasks={ln.tasks}", f"env={ln.env}", *as_overrides(ln.common)]

    def rows(self) -> dict[str, dict]:
        """The RL rows (``learn.rows`` without those set to null), in order: name -> the row's own settings."""
        return {str(k): (v or {}) for k, v in self.ln.rows.items() if v is not None}

    def models(self) -> list[str]:
        """The comparison models (``learn.compare_models``), each once."""
        return list(dict.fromkeys(map(str, self.ln.compare_models)))

    def sft_overrides(self, mode: str) -> list[str]:
        """Overrides of a comparison ``earthrl sft`` stage: the warm start's preset in ``mode``
        (output in ``<output_dir>/sft_<mode>``)."""
        return [*self.shared(), f"sft={self.ln.warm_start}", f"sft.mode={mode}",
                f"sft.output_dir={self.out / f'sft_{mode}'}"]

    def row_overrides(self, row: str) -> list[str]:
        """Overrides of RL row ``row``'s ``earthrl train`` stage: from the SFT warm start ``learn.warm_start``
        (built once and cached by :mod:`earthrl.launch.warm_start`), ``learn.grpo``'s settings, then the
        row's own; output in ``<output_dir>/<row>``."""
        return last_wins([*self.shared(), f"trainer.warm_start={self.ln.warm_start}",
                          f"trainer.output_dir={self.out / row}", "trainer.resume=auto", *as_overrides(self.ln.grpo),
                          *as_overrides(self.rows()[row])])

    def modes(self) -> tuple[list[str], list[str]]:
        """(the phrasings of the held-out table: ``learn.eval``'s ``eval.modes``, else ``earthrl eval``'s default;
        those of the transfer table: ``learn.transfer_eval.modes``)."""
        held = OmegaConf.select(self.ln.eval, "eval.modes", default=None)
        held = OmegaConf.structured(EvalSettings).modes if held is None else held
        return list(map(str, held)), list(map(str, self.ln.transfer_eval.modes))

    def eval_overrides(self, stage: str, model: str | None = None) -> list[str]:
        """Overrides of the ``earthrl eval`` stage ``stage``, without ``eval.checkpoint``: ``learn.eval``'s
        settings, both tables' phrasings (:meth:`modes`), ``model`` for a comparison model; output in
        ``<output_dir>/eval/<stage>``."""
        held, transfer = self.modes()
        return last_wins([*self.shared(model), f"tasks.split={self.ln.heldout_split}",
                          f"eval.output_dir={self.out / 'eval' / stage}", "eval.plots=false",
                          *as_overrides(self.ln.eval), *as_overrides({"eval": {"modes": [*held, *transfer]}})])

    def compare_modes(self) -> list[str]:
        """The SFT modes of the comparison other than the warm start's own (that one is the ``sft`` stage)."""
        preset = OmegaConf.load(preset_file(str(self.ln.warm_start), "learn.warm_start"))
        own = str(OmegaConf.merge(OmegaConf.structured(SFTConfig), preset).mode)  # the preset on the schema
        return [m for m in dict.fromkeys(map(str, self.ln.compare_modes)) if m != own]

    def stage_jobs(self) -> dict[str, tuple[str, list[str]]]:
        """Every stage as ``(command, overrides)``, for checking them all before the first one starts
        (the evaluations of checkpoints that earlier stages write are left out)."""
        jobs = {"eval base": ("eval", self.eval_overrides("base"))}
        jobs |= {row: ("train", self.row_overrides(row)) for row in self.rows()}
        jobs |= {f"eval {m}": ("eval", self.eval_overrides(m, model=m)) for m in self.models()}
        return jobs | {f"sft {m}": ("sft", self.sft_overrides(m)) for m in self.compare_modes()}

    def note_stage(self, stage: str, command: str, stage_cfg: DictConfig) -> None:
        """Record what an RL row's composed and validated config (``stage_cfg``, the Hydra app's choices still
        current) gives its warm start; call for every stage of :meth:`stage_jobs`, then :meth:`check_rows`."""
        if command == "train" and stage in self.rows():
            self.warm_keys[stage] = keyed_overrides(stage_cfg, str(self.ln.warm_start))

    def check_rows(self) -> None:
        """Every RL row starts from the same SFT warm start (:meth:`note_stage` recorded them).

        Raises:
            ConfigError: one line naming the row, the setting that differs and the fix.
        """
        if not self.warm_keys:
            return
        (first, key), *others = self.warm_keys.items()
        for row, other in others:
            if other == key:
                continue
            theirs = next((o for o in other if o not in key), None)
            if theirs is None:  # the row lacks a setting of the first one
                theirs = next((f"{o.split('=', 1)[0]} unset" for o in key if o not in other), "another order")
            name = theirs.split("=", 1)[0].removesuffix(" unset")
            ours = next((o for o in key if o.split("=", 1)[0] == name), f"{name} unset")
            raise ConfigError(f"learn.rows.{row}: its settings give another SFT warm start than row {first}'s "
                              f"({theirs} instead of {ours}); every row starts from the same SFT checkpoint: give "
                              "model, tasks and env settings in learn.grpo or learn.common, the same for all rows")

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

    def train_row(self, row: str, first: bool) -> tuple[Path, Path]:
        """RL row ``row`` from the SFT warm start (resumes; the ``first`` row builds the warm start when it is
        not cached); returns (the SFT checkpoint it started from, its final checkpoint)."""
        what = f"SFT warm start, then {row} from it" if first else f"{row} from the same SFT warm start"
        self.run_stage(what, "train", self.row_overrides(row))
        folder = self.out / row
        record = folder / "init_from.json"
        if not record.is_file():
            raise RuntimeError(f"learn: {record} is missing: row {row} did not start from an SFT checkpoint")
        return Path(json.loads(record.read_text())["checkpoint"]), self.last_checkpoint(folder, row)

    @staticmethod
    def last_checkpoint(folder: Path, what: str) -> Path:
        """The newest complete checkpoint of a stage. Raises: RuntimeError when it wrote none."""
        found = list_checkpoints(folder / "checkpoints")
        if not found:
            raise RuntimeError(f"learn: {folder} has no checkpoint after {what}")
        return found[-1]

    def evaluate(self, stage: str, checkpoint: Path | None, model: str | None = None) -> Path:
        """Held-out evaluation of ``checkpoint`` (None: the model without adapter; ``model``: a comparison
        model) in both tables' phrasings; returns its folder. An evaluation recorded for another checkpoint
        of the same stage (a row that trained further since) starts over."""
        folder = self.out / "eval" / stage
        extra = [f"eval.checkpoint={checkpoint}"] if checkpoint is not None else []
        state = folder / "eval_config.json"
        if checkpoint is not None and state.is_file():
            before = json.loads(state.read_text()).get("checkpoint")
            if before != str(checkpoint):
                print(f"learn: {folder} was recorded for {before}; evaluating {checkpoint} from the start", flush=True)
                extra.append("eval.resume=false")
        self.run_stage(f"held-out evaluation: {stage}", "eval", [*self.eval_overrides(stage, model), *extra])
        return folder

    def run(self) -> dict:
        """Every stage, then the tables; returns the summary dict (``learning.json``)."""
        self.validate()
        self.out.mkdir(parents=True, exist_ok=True)
        lifecycle.attach(self.out)
        open_run_log(self.out)  # third-party logs and warnings there, not on the terminal
        (self.out / "config.yaml").write_text(OmegaConf.to_yaml(self.cfg, resolve=True))
        (self.out / "commands.sh").write_text(  # in the run's folder and cache, so they reproduce it from anywhere
            "# the stages of the last `earthrl learn` run, in order (with the virtual environment active: "
            f"source .venv/bin/activate)\ncd {shlex.quote(str(Path.cwd()))}\n"
            f"export EARTHRL_HOME={shlex.quote(str(earthrl_home().resolve()))}\n")
        evals = {"base": self.evaluate("base", None)}
        for i, row in enumerate(self.rows()):  # each row, then its evaluation (the first: the SFT's too)
            start, last = self.train_row(row, first=i == 0)
            if i == 0:
                sft = start
                evals["sft"] = self.evaluate("sft", start)
            elif start != sft:
                raise RuntimeError(f"learn: row {row} started from {start}, not from the SFT checkpoint of the "
                                   f"other rows ({sft}); empty {self.out / row} and rerun")
            evals[row] = self.evaluate(row, last)
        models = self.models()
        evals |= {m: self.evaluate(m, None, model=m) for m in models}
        for mode in self.compare_modes():
            evals[f"sft_{mode}"] = self.evaluate(f"sft_{mode}", self.sft(mode))
        held, transfer = self.modes()
        summary = summarise(evals, self.heldout, {row: self.out / row / "metrics.jsonl" for row in self.rows()},
                            int(self.ln.bootstrap), int(self.cfg.seed), models=models, modes=held,
                            transfer_modes=transfer)
        write_summary(summary, self.out)
        logged = log_learning_curve(self.out, self.ln.common.get("logger"), f"learn-{self.ln.name}")
        if logged:
            print(f"learning curve in wandb: {logged}")
        return summary

    def validate(self) -> None:
        """The rows and the comparison models are well named, the held-out tasks and the data exist, the
        SFT modes are known.

        Raises:
            ConfigError: one line naming the field and the fix.
        """
        check_config(self.cfg, "learn")
        ln = self.ln
        check_output_dir("learn.output_dir", ln.output_dir)
        preset_file(str(ln.warm_start), "learn.warm_start")
        for name, value in ln.rows.items():
            if not ROW_NAME.fullmatch(str(name)) or str(name) in RESERVED or str(name).startswith("sft_"):
                raise ConfigError(f"learn.rows.{name}: a row name is a letter then letters, digits or _, and not "
                                  f"{', '.join(RESERVED)} or sft_…; rename the row (e.g. learn.rows.my_row)")
            if value is not None and not isinstance(value, DictConfig):
                raise ConfigError(f"learn.rows.{name}={value} must be a group of `earthrl train` settings like "
                                  "{algorithm: mefr_tap} ({} for learn.grpo's alone, null to leave the row out)")
        if not self.rows():
            raise ConfigError("learn.rows: every row is null; keep at least one RL row (e.g. learn.rows.grpo={})")
        held, transfer = self.modes()
        if set(held) & set(transfer):
            raise ConfigError(f"learn.transfer_eval.modes={transfer} repeats a phrasing of the held-out table "
                              f"(learn.eval.eval.modes={held}); give others (AP: the goal only, OW: the need and the data)")
        clash = sorted(set(self.rows()) & set(self.models()))
        if clash:
            raise ConfigError(f"learn.compare_models: {clash[0]} is also a row of learn.rows; rename the row")
        group = CONF_DIR / "tasks" / f"{ln.tasks}.yaml"
        if not group.is_file():
            known = ", ".join(sorted(p.stem for p in group.parent.glob("*.yaml")))
            raise ConfigError(f"learn.tasks={ln.tasks}: no such task group; use one of {known}")
        suite = OmegaConf.merge(OmegaConf.structured(TasksConfig), OmegaConf.load(group))  # the preset on the schema
        self.heldout = load_tasks(str(suite.name), str(ln.heldout_split), data_root(OmegaConf.create({"tasks": suite})),
                                  split_key="learn.heldout_split")


def run(cfg: DictConfig) -> dict:
    """Entry of ``earthrl learn`` (see :class:`LearnRecipe`)."""
    return LearnRecipe(cfg).run()
