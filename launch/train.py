"""`earthrl train`: GRPO training of an RS agent with the local backend.

The recipe's skeleton is ``setup → train → export → cleanup``; one step of ``train`` is one call
per stage: rollout (``rollout/runtime.py``) → score (``rewards/scoring.py``) → advantages
(``algorithms/estimators.py``) → update (``algorithms/learner.py``) → push weights → log
(``launch/step_batch.py`` on ``rollout/run_logger.py``) → held-out evaluation when due
(``launch/heldout.py``) → checkpoint (``models/checkpoint.py``). The job's checks run before the recipe is
built (:func:`~earthrl.launch.train_inputs.prepare_train`, ``launch/train_inputs.py``): the recipe takes the
resolved :class:`~earthrl.launch.train_inputs.TrainInputs`; the sampling stage returns a :class:`~earthrl.launch.step_batch.StepBatch` that the
update and log stages take. Everything is configured by
Hydra (``conf/``); see docs/training.md for overrides and sweeps.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig
from tqdm import tqdm

from earthrl.algorithms.estimators import token_advantages
from earthrl.algorithms.group_filter import outcome_groups
from earthrl.algorithms.learner import Learner, LearnerConfig, pack
from earthrl.algorithms.registry import POLICY_LOSSES
from earthrl.envs.kill_points import kill_point
from earthrl.launch import lifecycle
from earthrl.launch.config_schema import to_settings
from earthrl.launch.heldout import HeldoutEval
from earthrl.launch.job_inputs import start_run_folder
from earthrl.launch.model_card import write_card
from earthrl.launch.run_plots import write_run_plots
from earthrl.launch.step_batch import StepBatch, dump_rollouts, step_metrics
from earthrl.launch.train_inputs import TrainInputs, prepare_train, with_warm_start
from earthrl.launch.verl_config import verl_job
from earthrl.models.checkpoint import list_checkpoints, load_adapter_weights, load_checkpoint, save_checkpoint
from earthrl.models.export import export_merged
from earthrl.models.policy import Policy
from earthrl.rewards.scoring import Scores, score
from earthrl.rollout.faults import FailureGuard, fault_counts
from earthrl.rollout.run_log import open_run_log
from earthrl.rollout.run_logger import RunLogger, format_step, log_internal_errors, truncate_logs
from earthrl.rollout.runtime import RolloutRuntime


class LocalGRPORecipe:
    """GRPO with a LoRA policy on one machine: Ray local cluster, HF engine actor, EnvPool actors.

    ``setup(inputs)`` starts everything from the job's checked :class:`TrainInputs`
    (:func:`~earthrl.launch.train_inputs.prepare_train`); ``train()`` runs the steps.

    Args:
        cfg: the composed Hydra config (see ``conf/config.yaml``).
    """

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg
        self.inputs: TrainInputs | None = None  # what setup() was given
        self.config_dict: dict | None = None  # the resolved config (config.yaml; the loggers and checkpoints record it)
        self.guard: FailureGuard | None = None
        self.runtime: RolloutRuntime | None = None
        self.policy: Policy | None = None
        self.optimizer: torch.optim.AdamW | None = None
        self.learner: Learner | None = None
        self.heldout: HeldoutEval | None = None
        self.logger: RunLogger | None = None
        self.start_step = 0  # the first step to train: a resumed checkpoint's step, else 0

    # ------------------------------------------------------------------ setup
    def setup(self, inputs: TrainInputs) -> None:
        """Start the run folder, Ray, the engine and env actors, the policy and optimizer from ``inputs``
        (:func:`~earthrl.launch.train_inputs.prepare_train`, warm start built); resume if asked."""
        cfg = self.cfg
        self.inputs = inputs
        self.guard = FailureGuard(int(cfg.trainer.max_consecutive_failures))  # checked before anything starts
        out = inputs.output_dir
        self.config_dict = start_run_folder(cfg, out)
        lifecycle.attach(out)  # stops what a killed run left here; records this run's processes
        open_run_log(out)  # third-party logs and warnings there, not on the terminal
        if inputs.init_from is not None:  # which adapter started the run (an SFT warm start or trainer.init_from)
            (out / "init_from.json").write_text(json.dumps(
                {"checkpoint": str(inputs.init_from), "warm_start": inputs.warm_start}, indent=2))
        shutil.rmtree(out / "workspaces", ignore_errors=True)  # what a killed run's episodes left
        self.runtime = RolloutRuntime(to_settings(cfg), inputs.model_path, inputs.data_root, out / "workspaces",
                                      inputs.lora, kv_cache_gib=inputs.kv_cache_gib, device=inputs.device)
        lifecycle.at("setup")  # records Ray's, the engine's and the env pool's processes
        self.policy = Policy(str(inputs.model_path), inputs.lora, dtype=inputs.dtype,
                             gradient_checkpointing=bool(cfg.model.gradient_checkpointing), device=inputs.device,
                             adapters=self.runtime.adapters)
        alg = cfg.algorithm
        self.optimizer = torch.optim.AdamW(self.policy.trainable_parameters(), lr=float(alg.lr),
                                           weight_decay=float(alg.weight_decay))
        self.learner = Learner(self.policy, self.optimizer, POLICY_LOSSES.lookup(inputs.spec.loss.name), LearnerConfig(
            loss=inputs.spec.loss, loss_inputs=inputs.spec.loss_inputs, ppo_epochs=int(alg.ppo_epochs),
            micro_batch_size=int(alg.micro_batch_size), grad_clip=float(alg.grad_clip),
            temperature=float(alg.sampling.temperature), correction=inputs.spec.correction))
        if inputs.resume_from is not None:
            self.start_step = load_checkpoint(inputs.resume_from, self.policy.model, self.optimizer)
            print(f"resumed from {inputs.resume_from} (step {self.start_step})", flush=True)
        elif inputs.init_from is not None:
            load_adapter_weights(inputs.init_from, self.policy.model)
            print(f"initialised the adapter from {inputs.init_from}", flush=True)
        if str(cfg.trainer.resume) not in ("off", ""):
            truncate_logs(out, self.start_step)  # steps after the checkpoint are redone
        self.push_adapters()
        self.heldout = HeldoutEval(cfg, inputs.heldout_tasks, out, self.runtime)
        self.logger = RunLogger(out, cfg.logger.project, cfg.experiment_name, cfg.logger.mode, self.config_dict)

    # ---------------------------------------------------------------- training
    def tasks_for_step(self, step: int) -> list[dict]:
        """Deterministic task batch of a step: a seeded permutation per epoch over the split."""
        k = int(self.cfg.tasks.tasks_per_step)
        tasks = self.inputs.tasks
        n = len(tasks)
        chosen = []
        for j in range(step * k, step * k + k):
            epoch, pos = divmod(j, n)
            perm = np.random.default_rng([int(self.cfg.seed), epoch]).permutation(n)
            chosen.append(tasks[perm[pos]])
        return chosen

    def rollout(self, step: int, tasks: list[dict]):
        """Sample G trajectories per task; returns (trajectories, engine stats of the batching client)."""
        cfg = self.cfg
        return self.runtime.rollout(tasks, int(cfg.algorithm.group_size), step, to_settings(cfg.algorithm.sampling),
                                    cfg.tasks.phrasing, int(cfg.seed))

    def sample_batch(self, step: int, tasks: list[dict]) -> StepBatch:
        """Rollout + score of one step, with DAPO dynamic sampling when ``algorithm.filter_groups.enabled``.

        Without filtering every trajectory enters the update. With it, groups whose outcome
        (``Scores.correct``) is all-correct or all-wrong are left out of the update
        (:func:`~earthrl.algorithms.group_filter.outcome_groups`) and fresh tasks, not yet used this step,
        are sampled until ``tasks.tasks_per_step`` mixed groups are kept or ``max_rounds`` rounds ran.

        Returns:
            the :class:`StepBatch` of all rounds (its ``keep``: the indices of the trajectories the update
            uses; its ``score_s``: the seconds spent scoring).
        """
        fg = self.cfg.algorithm.get("filter_groups") or {}
        enabled = bool(fg.get("enabled"))
        rounds = int(fg.get("max_rounds", 1)) if enabled else 1
        pool, spec = self.inputs.tasks, self.inputs.spec
        want, used = len(tasks), {t["id"] for t in tasks}
        trajs, stats, scores, score_s = [], {}, Scores([], [], []), 0.0
        for r in range(rounds):
            new, s = self.rollout(step, tasks)
            trajs += new
            stats = {k: stats.get(k, 0) + v for k, v in s.items()}
            t_score = time.perf_counter()
            fresh_scores = score(new, {t["id"]: t for t in tasks}, spec)  # rewards are per trajectory
            score_s += time.perf_counter() - t_score
            scores = Scores(scores.reward + fresh_scores.reward, scores.turn_rewards + fresh_scores.turn_rewards,
                            scores.correct + fresh_scores.correct)
            verdicts = outcome_groups([t.group for t in trajs], scores.correct)
            if not enabled or len(verdicts.kept_groups) >= want or r == rounds - 1:
                break
            rng = np.random.default_rng([int(self.cfg.seed), step, r + 1])
            fresh = [t for t in rng.permutation(len(pool)).tolist() if pool[t]["id"] not in used]
            tasks = [pool[i] for i in fresh[: want - len(verdicts.kept_groups)]]
            if not tasks:
                break
            used |= {t["id"] for t in tasks}
        if not enabled:
            return StepBatch(trajs, scores, list(range(len(trajs))), {}, stats, score_s)
        kept = set(verdicts.kept_groups[:want])
        keep = [i for i in verdicts.keep if trajs[i].group in kept]
        return StepBatch(trajs, scores, keep, {
            "filter/kept_groups": float(len(kept)), "filter/all_correct_groups": float(len(verdicts.all_correct)),
            "filter/all_wrong_groups": float(len(verdicts.all_wrong)), "filter/rounds": float(r + 1)}, stats, score_s)

    def train(self) -> list[dict]:
        """Run ``trainer.steps`` GRPO steps (from the resumed step); returns per-step metrics.

        One step: rollout → score → advantages → update → push weights → log → held-out evaluation when due
        → checkpoint.
        """
        total = int(self.cfg.trainer.steps)
        history = []
        bar = tqdm(range(self.start_step, total), initial=self.start_step, total=total, desc="GRPO", unit="step",
                   file=sys.stdout, dynamic_ncols=True)
        for step in bar:
            done = step + 1
            lifecycle.at(f"step {done}")
            t0 = time.perf_counter()
            batch = self.sample_batch(step, self.tasks_for_step(step))
            t_sampled = time.perf_counter()
            advantages = token_advantages(batch.trajs, batch.scores, self.inputs.spec)
            t1 = time.perf_counter()
            loss_m, sync_s = self.update(done, batch, advantages)
            t2 = time.perf_counter()
            times = {"rollout": t_sampled - t0 - batch.score_s, "reward": batch.score_s + t1 - t_sampled,
                     "update": t2 - t1 - sync_s, "weight_sync": sync_s, "step": t2 - t0}
            metrics = self.log_step(bar, done, batch, advantages, loss_m, times)
            metrics.update(self.heldout.after_step(bar, done))
            self.logger.log(metrics, step=done)
            history.append(metrics)
            self.checkpoint(bar, done)
            self.guard.check(done, batch.trajs)
        bar.close()
        return history

    def update(self, step: int, batch: StepBatch, advantages: list[torch.Tensor]) -> tuple[dict, float]:
        """The update stage of step ``step`` (1-based): the learner's update on the kept trajectories, then
        the new adapter pushed to the engine. Returns (the learner's metrics, seconds of the push); with
        nothing kept (every group filtered out) nothing is learnt: ``({"logprob_diff": 0.0,
        "skipped_update": 1.0}, 0.0)``."""
        if not batch.keep:
            kill_point("update", step)
            return {"logprob_diff": 0.0, "skipped_update": 1.0}, 0.0
        loss_m = self.learner.update(pack([batch.trajs[i] for i in batch.keep], [advantages[i] for i in batch.keep],
                                          self.learner.cfg), before_step=partial(kill_point, "update", step))
        if self.inputs.device == "cuda":  # the caching allocator's free blocks back to the card: vLLM wakes next
            torch.cuda.empty_cache()
        t_sync = time.perf_counter()
        self.push_adapters()
        return loss_m, time.perf_counter() - t_sync

    def push_adapters(self) -> None:
        """The policy's adapters to the engine: the one adapter as it is, or each role's adapter under its name
        (``agent.adapters``)."""
        names = self.policy.adapter_names
        if len(names) == 1:
            self.runtime.push_lora(self.policy.adapter_state_dict())
            return
        for name in names:
            self.runtime.push_lora(self.policy.adapter_state_dict(name), name)

    def log_step(self, bar, step: int, batch: StepBatch, advantages: list[torch.Tensor], loss_m: dict,
                 times: dict[str, float]) -> dict:
        """The log stage of a step: its trajectories to rollouts.jsonl and internal_errors.jsonl, one console
        line. Returns the step's metrics (the step loop adds the held-out stage's and sends them to
        metrics.jsonl and wandb)."""
        skill_of = {t["id"]: t["skill"] for t in self.inputs.tasks}
        m = {**step_metrics(batch, advantages, loss_m, times, skill_of), **fault_counts(batch.trajs),
             **batch.filter_metrics}
        dump_rollouts(self.inputs.output_dir / "rollouts.jsonl", step, batch, advantages)
        log_internal_errors(self.inputs.output_dir, step, batch.trajs)
        bar.write(format_step(step, int(self.cfg.trainer.steps), m))
        return m

    def checkpoint(self, bar, step: int) -> None:
        """Write a checkpoint every ``trainer.save_every`` steps and after the last one."""
        cfg = self.cfg
        if step % int(cfg.trainer.save_every) == 0 or step == int(cfg.trainer.steps):
            with lifecycle.protected():  # a stop signal waits for the write to finish
                path = save_checkpoint(self.inputs.output_dir / "checkpoints", step, self.policy.model, self.optimizer,
                                       str(self.inputs.model_path), self.config_dict,
                                       keep=int(cfg.trainer.keep_checkpoints))
            bar.write(f"checkpoint: {path}")

    # ------------------------------------------------------------- finishing
    def cleanup(self) -> None:
        """Finish wandb and stop Ray."""
        if self.logger is not None:
            self.logger.finish()
        RolloutRuntime.shutdown(self.inputs.output_dir / "workspaces" if self.inputs is not None else None)


def export_run(output_dir: Path) -> Path | None:
    """Merge the newest checkpoint of the run in ``output_dir`` into a plain HF folder at ``<output_dir>/export``;
    None when it has no checkpoint. The folder gets its model card (:func:`earthrl.launch.model_card.write_card`)."""
    found = list_checkpoints(output_dir / "checkpoints")
    if not found:
        return None
    out = export_merged(found[-1], output_dir / "export", overwrite=True)
    write_card(out, found[-1])
    return out


def run_verl_backend(cfg: DictConfig) -> list[dict]:
    """``backend=verl``: the local recipe's checks, then :func:`earthrl.launch.verl_config.verl_job`
    (verl config, memory estimate, dataset, verl's trainer on GPUs). Returns [] (verl logs its own steps)."""
    inputs = prepare_train(cfg)
    verl_job(cfg, model_path=inputs.model_path, data_root=inputs.data_root, tasks=inputs.tasks,
             heldout=inputs.heldout_tasks)
    return []


def run(cfg: DictConfig) -> list[dict]:
    """Check (:func:`~earthrl.launch.train_inputs.prepare_train`), build the warm start, set up, train, export
    and clean up; prints a summary. Returns per-step metrics."""
    if str(cfg.backend) == "verl":
        return run_verl_backend(cfg)
    inputs = prepare_train(cfg)
    if inputs.finished_step(int(cfg.trainer.steps)) is not None:  # a finished run resumed: start no Ray, engine or model
        print(f"trainer.output_dir={inputs.output_dir} is finished: its checkpoint {inputs.resume_from.name} "
              f"reached trainer.steps={cfg.trainer.steps}; nothing to train (raise trainer.steps to go on)")
        if cfg.trainer.export and not (inputs.output_dir / "export").is_dir():
            print(f"exported model: {export_run(inputs.output_dir)}")
        print(f"plots: {len(write_run_plots(inputs.output_dir))} in {inputs.output_dir / 'plots'}")
        return []
    for line in inputs.notes:
        print(line, flush=True)
    inputs = with_warm_start(cfg, inputs)  # SFT first (once per setting, cached), then GRPO from its adapter
    recipe = LocalGRPORecipe(cfg)
    try:
        recipe.setup(inputs)
        history = recipe.train()
        plots = write_run_plots(inputs.output_dir)  # the whole run's, resumed steps included
        recipe.logger.log_images(plots, step=int(cfg.trainer.steps))
        exported = export_run(inputs.output_dir) if cfg.trainer.export else None
        curve = " → ".join(f"{m['reward/mean']:.3f}" for m in history)
        print(f"reward curve: {curve or '(no new steps)'}")
        print(f"run folder: {inputs.output_dir}")
        print(f"plots: {', '.join(p.name for p in plots) or '(none)'} in {inputs.output_dir / 'plots'}")
        if recipe.logger.wandb_dir:
            print(f"wandb ({recipe.logger.mode}): {recipe.logger.wandb_dir}")
        if exported:
            print(f"exported model: {exported}")
        return history
    finally:
        recipe.cleanup()
