"""`earthrl eval`: run a model over a task suite with the agent loop, or score recorded
trajectories, and write a report with every metric of the seeds (``conf/eval.yaml``).

Run folder (``eval.output_dir``):
- ``trajectories.jsonl``: one line per trajectory ``{"task_id", "mode", "sample",
  "action_format", "trajectory"}``, appended as tasks finish; a rerun skips the
  (task, mode) pairs already there (``eval.resume``), so an interrupted eval continues;
- ``report.json`` / ``report.md``: metrics with bootstrap 95% CIs, per-skill and per-mode
  breakdowns (:mod:`earthrl.rewards.metrics.report`); ``plots/*.png``; a wandb run.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from earthrl.envs.errors import ConfigError
from earthrl.envs.paths import data_dir
from earthrl.launch import lifecycle
from earthrl.launch.compute import job_device
from earthrl.launch.config_schema import to_settings
from earthrl.launch.host_memory import HostBudget, job_budget
from earthrl.launch.job_inputs import check_job_config, check_replay, data_root, load_tasks, model_path
from earthrl.launch.sweep import sweep_job_dirname
from earthrl.models.checkpoint import checkpoint_adapters
from earthrl.rewards.metrics.report import build_earthbench_report, build_report, write_report
from earthrl.rollout.run_log import open_run_log
from earthrl.rollout.run_logger import RunLogger
from earthrl.rollout.runtime import RolloutRuntime, run_adapters

RETRIED_FAILURES = ("engine_failure",)
"""Trajectory failures a resumed evaluation runs again: the rollout engine failed (a dead or overloaded engine
process), which says nothing about the model or the task (:data:`earthrl.rollout.trajectory.FAILURE_KINDS`)."""


def keep_on_resume(entries: list[dict]) -> tuple[list[dict], int]:
    """The recorded ``trajectories.jsonl`` entries a resumed evaluation keeps: every (task, mode) pair's entries,
    except pairs with a trajectory that ended in one of :data:`RETRIED_FAILURES` (all samples of such a pair run
    again, so a pair's samples come from one run).

    Returns:
        (kept entries in their order, number of (task, mode) pairs dropped to run again).
    """
    again = {(e["task_id"], e["mode"]) for e in entries
             if (e["trajectory"] or {}).get("failure") in RETRIED_FAILURES}
    return [e for e in entries if (e["task_id"], e["mode"]) not in again], len(again)


def read_trajectories(path: Path) -> list[dict]:
    """Lines of a ``trajectories.jsonl``; a torn last line (interrupted write) is dropped.

    Raises:
        ConfigError: a line that is not JSON or lacks ``task_id``/``mode``/``trajectory`` (names the line).
    """
    entries = []
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines):  # interrupted while writing the last line: that task reruns
                break
            raise ConfigError(f"{path}:{n} is not JSON; fix or delete that line") from None
        missing = [k for k in ("task_id", "mode", "trajectory") if k not in entry]
        if missing:
            raise ConfigError(f"{path}:{n} lacks {missing[0]!r}; each line needs task_id, mode and trajectory")
        entries.append(entry)
    return entries


def load_adapter(checkpoint: Path, run_adapters: tuple[str, ...] = ("shared",)) -> tuple[dict, dict[str | None, dict]]:
    """LoRA settings and weights of a checkpoint's adapters (peft ``save_pretrained`` layout: ``adapter/`` for one,
    ``adapter/<name>/`` for one per role, :func:`earthrl.models.checkpoint.checkpoint_adapters`).

    Args:
        checkpoint: a checkpoint folder (``runs/<exp>/checkpoints/step_000003``).
        run_adapters: the adapters the evaluation serves (:func:`earthrl.models.lora.adapter_names` of
            ``agent.adapters``).

    Returns:
        (``{"rank", "alpha"}``, ``{adapter name: peft state dict of float tensors}``). A one-adapter checkpoint
        gives ``{None: weights}`` (pushed to every adapter the run serves); one per role gives each name.

    Raises:
        ConfigError: no adapter files in ``checkpoint``, or a checkpoint of one adapter per role whose names differ
            from ``run_adapters`` (names both and the ``agent.adapters`` settings that match).
    """
    from safetensors.torch import load_file

    folders = checkpoint_adapters(Path(checkpoint))
    if not folders:
        raise ConfigError(f"eval.checkpoint={checkpoint}: no adapter/adapter_config.json and adapter_model.safetensors "
                          "there; give a folder like runs/<exp>/checkpoints/step_000003")
    if len(folders) > 1 and set(folders) != set(run_adapters):
        raise ConfigError(f"eval.checkpoint={checkpoint} holds the adapters {', '.join(folders)}, but agent.adapters "
                          f"gives {', '.join(run_adapters)}: evaluate it with the agent settings it was trained with "
                          "(its run's config.yaml, agent.adapters.<role>=<adapter> for each role)")
    weights = {None if len(folders) == 1 else name: load_file(str(folder / "adapter_model.safetensors"))
               for name, folder in folders.items()}
    meta = json.loads((next(iter(folders.values())) / "adapter_config.json").read_text())
    return {"rank": int(meta["r"]), "alpha": float(meta["lora_alpha"])}, weights


def _first_difference(old, new, key: str) -> str:
    """The dotted key of the first setting under ``key`` that differs between two recorded configs
    (``agent.options.verify``, not ``agent``)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for k in [*new, *(k for k in old if k not in new)]:
            if old.get(k) != new.get(k):
                return _first_difference(old.get(k), new.get(k), f"{key}.{k}")
    return key


@dataclass(frozen=True)
class EvalInputs:
    """What :meth:`EvalJob.validate` resolved and checked for one ``earthrl eval`` job (nothing was written to
    get it). The source decides which fields are set: Earth-Agent files (``predictions``, ``earthbench``),
    recorded trajectories (``recorded``, ``data_root``, ``tasks``) or a model run (``data_root``, ``tasks``,
    ``model_path``, ``adapter``, ``memory``)."""

    output_dir: Path  # eval.output_dir, or EvalJob.default_output_dir()
    predictions: Path | None = None  # eval.predictions: the Earth-Agent run folder to score
    earthbench: Path | None = None  # eval.earthbench: the Earth-Bench folder of those predictions
    recorded: Path | None = None  # eval.trajectories: the recorded trajectories to score
    data_root: Path | None = None  # the data folder of tasks.data (not checked when scoring recorded trajectories)
    tasks: list[dict] = field(default_factory=list)  # the tasks.split tasks, the first eval.max_tasks of them
    model_path: Path | None = None  # the model folder of a model run
    adapter: tuple[dict, dict] | None = None  # eval.checkpoint's LoRA settings and weights by adapter (load_adapter)
    memory: HostBudget | None = None  # the vLLM engine's host-memory plan on a CPU (launch/host_memory)
    device: str = "cpu"  # a model run: cluster.device resolved on this machine (launch/compute.job_device)


class EvalJob:
    """Validate → (roll out the pending tasks) → score → report.

    Args:
        cfg: the composed ``conf/eval.yaml``.
    """

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg
        self.ev = cfg.eval
        self.inputs: EvalInputs | None = None  # what validate() returned (set by run())

    def validate(self) -> EvalInputs:
        """Check the config before anything is written; returns what it resolved.

        Raises:
            ConfigError: one line naming the field and the fix.
        """
        cfg, ev = self.cfg, self.ev
        check_job_config(cfg, "eval")
        output_dir = self.default_output_dir() if ev.output_dir is None else Path(ev.output_dir)
        if ev.predictions:
            predictions, earthbench = Path(ev.predictions), Path(ev.earthbench or "")
            if not (predictions / "extracted_tool_calls.json").is_file():
                raise ConfigError(f"eval.predictions={ev.predictions}: no extracted_tool_calls.json there; "
                                  "give an Earth-Agent run folder (e.g. predictions/gpt5_AP)")
            if not (earthbench / "question.json").is_file():
                raise ConfigError(f"eval.earthbench={ev.earthbench}: no question.json there; give the Earth-Bench folder")
            return EvalInputs(output_dir=output_dir, predictions=predictions, earthbench=earthbench)
        recorded = Path(ev.trajectories) if ev.trajectories else None
        if recorded is not None and not recorded.is_file():
            raise ConfigError(f"eval.trajectories={ev.trajectories}: no such file")
        live = recorded is None  # episodes will run: the data and the model must be there
        root = data_root(cfg) if live else data_dir(cfg.tasks.data)
        # replay mode reads no scenes: the recorded outputs stand in for them
        replay = live and cfg.env.mode == "replay"
        tasks = load_tasks(cfg.tasks.name, cfg.tasks.split, root, check_data=live and not replay,
                           mode=str(cfg.env.mode) if live else None)
        if replay:
            check_replay(tasks, root)
        tasks = tasks if ev.max_tasks is None else tasks[: int(ev.max_tasks)]
        if not live:
            return EvalInputs(output_dir=output_dir, recorded=recorded, data_root=root, tasks=tasks)
        model = model_path(cfg)
        inputs = EvalInputs(
            output_dir=output_dir, data_root=root, tasks=tasks, model_path=model,
            adapter=load_adapter(Path(ev.checkpoint), run_adapters(cfg.agent)) if ev.checkpoint else None,
            memory=job_budget(cfg, model, int(ev.batch_tasks) * int(ev.samples), learner=False),
            device=job_device(cfg)[0])
        self.check_resumable(inputs)
        return inputs

    def default_output_dir(self) -> Path:
        """``runs/eval/<experiment_name>`` for a model run, ``…/<run>-<step>`` for a checkpoint of
        ``runs/<run>/checkpoints/<step>`` (``…/<the job's overrides>`` in a sweep, ``-m``, so that its evaluations
        never share a folder); named after the source when scoring files (an Earth-Agent run
        folder or a trajectories file), so re-scoring never overwrites a model's report."""
        ev = self.ev
        if ev.predictions:
            return Path("runs/eval") / f"earthbench-{Path(ev.predictions).name}-{ev.metrics_mode}"
        if ev.trajectories:
            src = Path(ev.trajectories)
            return Path("runs/eval") / f"rescored-{src.parent.name or src.stem}-{ev.metrics_mode}"
        folder = Path("runs/eval") / str(self.cfg.experiment_name)
        if ev.checkpoint:  # a trained checkpoint never shares the base model's folder: …/<run>-<step>
            ckpt = Path(str(ev.checkpoint)).resolve()
            folder /= re.sub(r"[^\w.=,+-]+", "_", f"{ckpt.parent.parent.name}-{ckpt.name}")
        return folder / sweep_job_dirname()

    def rollout_fingerprint(self, inputs: EvalInputs) -> dict:
        """What the recorded trajectories depend on: model, adapter, env, agent loop (name, options, adapters),
        sampling, seed, and each task's content (``{"tasks": {id: sha256}}``). A resumed eval must match it, or
        its report would mix two configs."""
        import hashlib

        cfg = self.cfg
        return {"model": str(inputs.model_path), "checkpoint": str(self.ev.checkpoint),
                "env": OmegaConf.to_container(cfg.env, resolve=True),
                "agent": OmegaConf.to_container(cfg.agent, resolve=True),
                "sampling": OmegaConf.to_container(cfg.sampling, resolve=True), "samples": int(self.ev.samples),
                "seed": int(cfg.seed),
                "tasks": {t["id"]: hashlib.sha256(json.dumps(t, sort_keys=True, default=str).encode()).hexdigest()
                          for t in inputs.tasks}}

    def check_resumable(self, inputs: EvalInputs) -> None:
        """Refuse to append to the trajectories of ``inputs.output_dir`` when they were recorded under
        another rollout config or for a task whose content changed since (more tasks than before is fine).

        Raises:
            ConfigError: names the first setting or task that differs and the two ways out.
        """
        traj_path, state = inputs.output_dir / "trajectories.jsonl", inputs.output_dir / "eval_config.json"
        if not traj_path.exists() or not self.ev.resume or not state.exists():
            return
        old, new = json.loads(state.read_text()), json.loads(json.dumps(self.rollout_fingerprint(inputs)))
        old.setdefault("agent", {"name": "react", "adapters": {}, "options": {}})  # recorded before loops were named
        changed = [_first_difference(old.get(k), new[k], k) for k in new if k != "tasks" and old.get(k) != new[k]]
        changed += [f"task {tid}" for tid, h in new["tasks"].items() if old.get("tasks", {}).get(tid, h) != h]
        if changed:
            raise ConfigError(f"{inputs.output_dir} holds trajectories recorded with another {changed[0]}; "
                              "set eval.resume=false to start over there, or choose another eval.output_dir")

    # ------------------------------------------------------------ rollouts
    def pending(self, done: set[tuple[str, str]]) -> list[tuple[dict, str]]:
        """(task, mode) pairs still to run, in suite order; a task lacking a mode's phrasing is skipped."""
        return [(t, m) for m in self.ev.modes for t in self.inputs.tasks
                if (t["id"], m) not in done and m in t["question"]]

    def run_rollouts(self, traj_path: Path) -> int:
        """Roll out every pending (task, mode) and append its trajectories; returns how many ran."""
        from tqdm import tqdm

        kept = read_trajectories(traj_path) if traj_path.exists() and self.ev.resume else []
        kept, again = keep_on_resume(kept)
        if again:
            print(f"eval: {again} (task, mode) pairs whose rollout engine failed run again", flush=True)
        if traj_path.exists():  # rewrite without a torn last line (or empty when not resuming)
            traj_path.write_text("".join(json.dumps(e) + "\n" for e in kept))
        done = {(e["task_id"], e["mode"]) for e in kept}
        inputs = self.inputs
        state, fingerprint = inputs.output_dir / "eval_config.json", self.rollout_fingerprint(inputs)
        if kept and state.exists():  # remember the tasks recorded before too
            fingerprint["tasks"] = {**json.loads(state.read_text()).get("tasks", {}), **fingerprint["tasks"]}
        state.write_text(json.dumps(fingerprint, indent=2))
        todo = self.pending(done)
        if not todo:
            return 0
        cfg, ev = self.cfg, self.ev
        lora, weights = inputs.adapter if inputs.adapter else (None, None)
        if inputs.memory is not None:
            print(inputs.memory.line(), flush=True)
        runtime = RolloutRuntime(to_settings(cfg), inputs.model_path, inputs.data_root, inputs.output_dir / "workspaces", lora,
                                 kv_cache_gib=inputs.memory.kv if inputs.memory is not None else None,
                                 device=inputs.device)
        for name, state in (weights or {}).items():  # each role's adapter; a one-adapter checkpoint: every adapter's
            for target in [name] if name is not None else runtime.adapters if len(runtime.adapters) > 1 else [None]:
                runtime.push_lora(state, target)
        bar = tqdm(total=len(todo), desc="eval", unit="task", file=sys.stdout, dynamic_ncols=True)
        k, engine_failed = int(ev.batch_tasks), []
        for chunk_no, start in enumerate(range(0, len(todo), k)):
            lifecycle.at(f"task {start + 1} of {len(todo)}")
            chunk = todo[start:start + k]
            for mode in dict.fromkeys(m for _, m in chunk):
                tasks = [t for t, m in chunk if m == mode]
                trajs, _ = runtime.rollout(tasks, int(ev.samples), chunk_no, to_settings(cfg.sampling), mode, int(cfg.seed),
                                           group_prefix=f"eval/{mode}/")
                with lifecycle.protected(), traj_path.open("a") as f:  # whole lines only
                    for i, traj in enumerate(trajs):
                        f.write(json.dumps({"task_id": traj.task_id, "mode": mode, "sample": i % int(ev.samples),
                                            "action_format": cfg.env.action_format,
                                            "trajectory": traj.to_dict()}) + "\n")
                engine_failed += [t.failure_detail for t in trajs if t.failure in RETRIED_FAILURES]
                bar.update(len(tasks))
        bar.close()
        if engine_failed:
            print(f"eval: {len(engine_failed)} trajectories ended by a rollout engine failure ({engine_failed[0]}); "
                  "they are out of the report: run the same command again to run them again", flush=True)
        return len(todo)

    # ------------------------------------------------------------ report
    def score(self, entries: list[dict]) -> dict:
        """Metrics, CIs and breakdowns of ``entries`` (see :func:`earthrl.rewards.metrics.report.build_report`)."""
        return build_report(entries, {t["id"]: t for t in self.inputs.tasks}, mode=self.ev.metrics_mode,
                            n_resamples=int(self.ev.bootstrap), seed=int(self.cfg.seed))

    def run(self) -> dict:
        """The whole job; returns the report dict."""
        self.inputs = inputs = self.validate()
        out = inputs.output_dir
        out.mkdir(parents=True, exist_ok=True)
        lifecycle.attach(out)
        open_run_log(out)  # third-party logs and warnings there, not on the terminal
        (out / "config.yaml").write_text(OmegaConf.to_yaml(self.cfg, resolve=True))
        if inputs.predictions is not None:
            report = build_earthbench_report(inputs.predictions, inputs.earthbench, mode=self.ev.metrics_mode,
                                             n_resamples=int(self.ev.bootstrap), seed=int(self.cfg.seed))
            return self.publish(report)
        if inputs.recorded is not None:
            entries = read_trajectories(inputs.recorded)
        else:
            traj_path = out / "trajectories.jsonl"
            try:
                self.run_rollouts(traj_path)
            finally:
                RolloutRuntime.shutdown(out / "workspaces")
            entries = read_trajectories(traj_path)
        known = {t["id"] for t in inputs.tasks}
        entries = [e for e in entries if e["task_id"] in known]
        return self.publish(self.score(entries))

    def publish(self, report: dict) -> dict:
        """Write the report files, log them to wandb and print the Markdown."""
        paths = write_report(report, self.inputs.output_dir, plots=bool(self.ev.plots))
        logger = RunLogger(self.inputs.output_dir, self.cfg.logger.project, self.cfg.experiment_name, self.cfg.logger.mode,
                           OmegaConf.to_container(self.cfg, resolve=True))
        try:
            logger.log_report(report, paths)
        finally:
            logger.finish()
        print(paths["markdown"].read_text())
        print(f"report: {paths['markdown']} | {paths['json']}")
        return report


def run(cfg: DictConfig) -> dict:
    """Entry of ``earthrl eval`` (see :class:`EvalJob`)."""
    return EvalJob(cfg).run()
