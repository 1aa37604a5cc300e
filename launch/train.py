"""`earthrl train`: GRPO training of an RS agent with the local backend.

The recipe's skeleton is ``setup → train → export → cleanup``; one step of ``train`` is one call
per stage: rollout (``rollout/runtime.py``) → score (``rewards/scoring.py``) → advantages
(``algorithms/estimators.py``) → update (``algorithms/learner.py``) → push weights → log
(``rollout/run_logger.py``) → checkpoint (``models/checkpoint.py``). Everything is configured by
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
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from earthrl.algorithms.estimators import token_advantages
from earthrl.algorithms.learner import Learner, LearnerConfig, pack
from earthrl.algorithms.registry import POLICY_LOSSES
from earthrl.algorithms.group_filter import outcome_groups
from earthrl.algorithms.spec import AlgorithmSpec
from earthrl.envs.errors import ConfigError
from earthrl.envs.kill_points import kill_point
from earthrl.envs.paths import model_dir
from earthrl.models.checkpoint import (save_checkpoint, resolve_resume, load_checkpoint, rng_state,
                                       set_rng_state, list_checkpoints, check_init_checkpoint, load_adapter_weights,
                                       checkpoint_step)
from earthrl.rewards.scoring import Scores, score
from earthrl.rollout.faults import fault_counts, FailureGuard
from earthrl.rollout.run_logger import (format_step, log_internal_errors, RunLogger, truncate_logs,
                                        flat_metrics)
from earthrl.launch import lifecycle
from earthrl.launch.job_inputs import (check_job_config, data_root, holds_run, load_tasks, model_path,
                                      start_run_folder)
from earthrl.rollout.runtime import RolloutRuntime
from earthrl.rollout.step_accounting import TOKENS_PER_S_PER_GPU, local_accounting
from earthrl.models.dtype import resolve_dtype
from earthrl.models.lora import merge_lora
from earthrl.models.policy import Policy
from earthrl.rewards.metrics.report import build_report, write_report
from earthrl.models.export import export_merged
from earthrl.launch.verl_config import verl_job
from earthrl.launch.host_memory import job_budget, train_rows
from earthrl.launch.machine_size import resolve_auto_sizes
from earthrl.launch.warm_start import ensure_warm_start, warm_start_folder


class LocalGRPORecipe:
    """GRPO with a LoRA policy on one machine: Ray local cluster, HF engine actor, EnvPool actors.

    Args:
        cfg: the composed Hydra config (see ``conf/config.yaml``).
    """

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg
        self.sized: list[str] = []  # what `auto` sizes resolved to (printed once, at setup)

    # ------------------------------------------------------------------ setup
    def validate(self) -> None:
        """Check everything that can be checked before anything is written.

        Raises:
            ConfigError: with one line naming the field and the fix.
        """
        cfg = self.cfg
        self.sized += resolve_auto_sizes(cfg)  # trainer.warm_start / trainer.steps = auto, by the dtype rule
        check_job_config(cfg, "train")
        self.model_path = self.verl_dry_run_path() or model_path(cfg)
        self.data_root = data_root(cfg)
        self.validate_algorithm()
        self.tasks = load_tasks(cfg.tasks.name, cfg.tasks.split, self.data_root)
        ho = cfg.trainer.heldout
        self.heldout_tasks = []
        if int(ho.every) > 0:
            held = load_tasks(cfg.tasks.name, ho.split, self.data_root, split_key="trainer.heldout.split")
            self.heldout_tasks = held[: int(ho.max_tasks)]
        self.output_dir = Path(cfg.trainer.output_dir)
        if str(cfg.backend) != "verl" and str(cfg.trainer.resume) in ("off", "") and holds_run(self.output_dir):
            raise ConfigError(f"trainer.output_dir={self.output_dir} already holds a run (checkpoints/ or metrics.jsonl): "
                              "continue it with trainer.resume=auto, or choose another (or an empty) trainer.output_dir")
        try:
            self.resume_from = resolve_resume(str(cfg.trainer.resume), self.output_dir / "checkpoints")
        except FileNotFoundError as exc:
            raise ConfigError(str(exc)) from exc
        self.init_from = None
        if self.cfg.trainer.get("init_from"):  # e.g. an `earthrl sft` checkpoint: its adapter weights start the run
            lora = merge_lora(cfg.model.lora, cfg.algorithm.lora)
            try:
                self.init_from = check_init_checkpoint(Path(cfg.trainer.init_from), lora)
            except (FileNotFoundError, ValueError) as exc:
                raise ConfigError(f"trainer.init_from={cfg.trainer.init_from}: {exc}") from None
        self.memory = None  # the vLLM engine's host-memory plan on CPU, checked before the warm start
        if str(cfg.backend) != "verl":
            self.memory = job_budget(cfg, self.model_path, train_rows(cfg), learner=True)
        self.warm_start = None  # a conf/sft preset whose (cached) SFT checkpoint starts the run
        preset = cfg.trainer.get("warm_start")
        if preset and self.init_from is None and self.resume_from is None:
            warm_start_folder(cfg, str(preset))  # the preset exists
            self.warm_start = str(preset)

    def verl_dry_run_path(self) -> Path | None:
        """``model.path`` of a ``backend=verl`` dry run whose path does not exist yet (not downloaded) but
        whose ``model.arch`` gives the memory estimate (conf/model/qwen3-4b.yaml); with no ``model.path``,
        ``$EARTHRL_HOME/models/<model.name>`` when it holds no model (:func:`~earthrl.launch.verl_config.job_arch`
        says so). None otherwise: an
        existing path (a folder, empty or not, or a file) is checked as usual."""
        cfg = self.cfg
        if str(cfg.backend) != "verl" or not bool(cfg.trainer.verl_dry_run) or not cfg.model.get("arch"):
            return None
        if not cfg.model.path:
            stand_in = model_dir(str(cfg.model.name))
            return None if (stand_in / "config.json").is_file() else stand_in  # job_arch says so
        return None if Path(cfg.model.path).expanduser().exists() else Path(cfg.model.path)

    def finished_step(self) -> int | None:
        """The step of the checkpoint ``trainer.resume`` picked when it already reached ``trainer.steps``
        (the run is finished: nothing to train), else None. Call after :meth:`validate`."""
        if self.resume_from is None:
            return None
        step = checkpoint_step(self.resume_from)
        return step if step >= int(self.cfg.trainer.steps) else None

    def validate_algorithm(self) -> None:
        """Build the recipe's :class:`~earthrl.algorithms.spec.AlgorithmSpec` from the ``algorithm`` group
        and resolve every name through it (reward, turn reward, estimator, policy loss, action format).

        Raises:
            ConfigError: an unknown name (with the registered ones) or a bad key, naming the field.
        """
        try:
            self.spec = AlgorithmSpec.from_config(OmegaConf.to_container(self.cfg.algorithm, resolve=True))
            self.spec.check(str(self.cfg.env.action_format))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def setup(self) -> None:
        """Start Ray, the engine and env actors, the policy and optimizer; resume if asked."""
        cfg = self.cfg
        self.validate()
        self.guard = FailureGuard(int(cfg.trainer.max_consecutive_failures))  # checked before anything starts
        for line in self.sized:
            print(line, flush=True)
        if cfg.trainer.get("warm_start") and not self.warm_start:
            why = "trainer.init_from is set" if self.init_from is not None else f"resuming from {self.resume_from}"
            print(f"trainer.warm_start={cfg.trainer.warm_start} ignored: {why}", flush=True)
        if self.warm_start:  # SFT first (once per setting, cached), then GRPO from its adapter
            lora = merge_lora(cfg.model.lora, cfg.algorithm.lora)
            self.init_from = check_init_checkpoint(ensure_warm_start(cfg, self.warm_start), lora)
        self.config_dict = start_run_folder(cfg, self.output_dir)
        lifecycle.attach(self.output_dir)  # stops what a killed run left here; records this run's processes
        if self.init_from is not None:  # which adapter started the run (an SFT warm start or trainer.init_from)
            (self.output_dir / "init_from.json").write_text(json.dumps(
                {"checkpoint": str(self.init_from), "warm_start": self.warm_start}, indent=2))
        shutil.rmtree(self.output_dir / "workspaces", ignore_errors=True)  # what a killed run's episodes left

        # the algorithm may set its own adapter size (HiRS VG-HRL: rank 64, alpha 128)
        lora = merge_lora(cfg.model.lora, cfg.algorithm.lora)
        if self.memory is not None:
            print(self.memory.line(), flush=True)
        self.runtime = RolloutRuntime(cfg, self.model_path, self.data_root, self.output_dir / "workspaces", lora,
                                      kv_cache_gib=self.memory.kv if self.memory is not None else None)
        lifecycle.at("setup")  # records Ray's, the engine's and the env pool's processes
        dtype, why = resolve_dtype(str(cfg.model.dtype))
        print(f"model.dtype={cfg.model.dtype} -> {dtype} ({why}); learner and engine", flush=True)
        self.policy = Policy(str(self.model_path), lora, dtype=dtype,
                             gradient_checkpointing=bool(cfg.model.gradient_checkpointing))
        alg = cfg.algorithm
        self.optimizer = torch.optim.AdamW(self.policy.trainable_parameters(), lr=float(alg.lr),
                                           weight_decay=float(alg.weight_decay))
        self.learner = Learner(self.policy, self.optimizer, POLICY_LOSSES.lookup(self.spec.loss.name), LearnerConfig(
            loss=self.spec.loss, loss_inputs=self.spec.loss_inputs, ppo_epochs=int(alg.ppo_epochs),
            micro_batch_size=int(alg.micro_batch_size), grad_clip=float(alg.grad_clip),
            temperature=float(alg.sampling.temperature)))
        self.start_step = 0
        if self.resume_from is not None:
            self.start_step = load_checkpoint(self.resume_from, self.policy.model, self.optimizer)
            print(f"resumed from {self.resume_from} (step {self.start_step})", flush=True)
        elif self.init_from is not None:
            load_adapter_weights(self.init_from, self.policy.model)
            print(f"initialised the adapter from {self.init_from}", flush=True)
        if str(cfg.trainer.resume) not in ("off", ""):
            truncate_logs(self.output_dir, self.start_step)  # steps after the checkpoint are redone
        self.runtime.push_lora(self.policy.adapter_state_dict())
        self.logger = RunLogger(self.output_dir, cfg.logger.project, cfg.experiment_name, cfg.logger.mode, self.config_dict)

    # ---------------------------------------------------------------- training
    def tasks_for_step(self, step: int) -> list[dict]:
        """Deterministic task batch of a step: a seeded permutation per epoch over the split."""
        k = int(self.cfg.tasks.tasks_per_step)
        n = len(self.tasks)
        chosen = []
        for j in range(step * k, step * k + k):
            epoch, pos = divmod(j, n)
            perm = np.random.default_rng([int(self.cfg.seed), epoch]).permutation(n)
            chosen.append(self.tasks[perm[pos]])
        return chosen

    def rollout(self, step: int, tasks: list[dict]):
        """Sample G trajectories per task; returns (trajectories, engine stats of the batching client)."""
        cfg = self.cfg
        return self.runtime.rollout(tasks, int(cfg.algorithm.group_size), step, cfg.algorithm.sampling,
                                    cfg.tasks.phrasing, int(cfg.seed), max_turns=cfg.algorithm.max_turns)

    def sample_batch(self, step: int, tasks: list[dict]):
        """Rollout + score of one step, with DAPO dynamic sampling when ``algorithm.filter_groups.enabled``.

        Without filtering every trajectory enters the update. With it, groups whose outcome
        (``Scores.correct``) is all-correct or all-wrong are left out of the update
        (:func:`~earthrl.algorithms.group_filter.outcome_groups`) and fresh tasks, not yet used this step,
        are sampled until ``tasks.tasks_per_step`` mixed groups are kept or ``max_rounds`` rounds ran.

        Returns:
            (trajectories of all rounds, summed engine stats, their :class:`Scores`, filter stats with
            ``keep``: the indices of the trajectories the update uses); :attr:`score_s` is set to the seconds
            spent scoring.
        """
        fg = self.cfg.algorithm.get("filter_groups") or {}
        enabled = bool(fg.get("enabled"))
        rounds = int(fg.get("max_rounds", 1)) if enabled else 1
        want, used = len(tasks), {t["id"] for t in tasks}
        trajs, stats, scores = [], {}, Scores([], [], [])
        self.score_s = 0.0
        for r in range(rounds):
            new, s = self.rollout(step, tasks)
            trajs += new
            stats = {k: stats.get(k, 0) + v for k, v in s.items()}
            t_score = time.perf_counter()
            fresh_scores = score(new, {t["id"]: t for t in tasks}, self.spec)  # rewards are per trajectory
            self.score_s += time.perf_counter() - t_score
            scores = Scores(scores.reward + fresh_scores.reward, scores.turn_rewards + fresh_scores.turn_rewards,
                            scores.correct + fresh_scores.correct)
            verdicts = outcome_groups([t.group for t in trajs], scores.correct)
            if not enabled or len(verdicts.kept_groups) >= want or r == rounds - 1:
                break
            rng = np.random.default_rng([int(self.cfg.seed), step, r + 1])
            fresh = [t for t in rng.permutation(len(self.tasks)).tolist() if self.tasks[t]["id"] not in used]
            tasks = [self.tasks[i] for i in fresh[: want - len(verdicts.kept_groups)]]
            if not tasks:
                break
            used |= {t["id"] for t in tasks}
        if not enabled:
            return trajs, stats, scores, {"keep": list(range(len(trajs)))}
        kept = set(verdicts.kept_groups[:want])
        keep = [i for i in verdicts.keep if trajs[i].group in kept]
        return trajs, stats, scores, {
            "keep": keep, "filter/kept_groups": float(len(kept)), "filter/all_correct_groups": float(len(verdicts.all_correct)),
            "filter/all_wrong_groups": float(len(verdicts.all_wrong)), "filter/rounds": float(r + 1)}

    def train(self) -> list[dict]:
        """Run ``trainer.steps`` GRPO steps (from the resumed step); returns per-step metrics.

        One step: rollout → score → advantages → update → push weights → log → checkpoint.
        """
        total = int(self.cfg.trainer.steps)
        history = []
        bar = tqdm(range(self.start_step, total), initial=self.start_step, total=total, desc="GRPO", unit="step",
                   file=sys.stdout, dynamic_ncols=True)
        for step in bar:
            done = step + 1
            lifecycle.at(f"step {done}")
            t0 = time.perf_counter()
            tasks = self.tasks_for_step(step)
            trajs, engine_stats, scores, filt = self.sample_batch(step, tasks)
            t_sampled, score_s = time.perf_counter(), self.score_s
            advantages = token_advantages(trajs, scores, self.spec)
            t1 = time.perf_counter()
            keep = filt.pop("keep")
            sync_s = 0.0
            if keep:
                loss_m = self.learner.update(pack([trajs[i] for i in keep], [advantages[i] for i in keep],
                                                  self.learner.cfg), before_step=partial(kill_point, "update", done))
                t_sync = time.perf_counter()
                self.runtime.push_lora(self.policy.adapter_state_dict())
                sync_s = time.perf_counter() - t_sync
            else:  # every group filtered out: nothing to learn from this step
                kill_point("update", done)
                loss_m = {"logprob_diff": 0.0, "skipped_update": 1.0}
            t2 = time.perf_counter()
            times = {"rollout": t_sampled - t0 - score_s, "reward": score_s + t1 - t_sampled,
                     "update": t2 - t1 - sync_s, "weight_sync": sync_s, "step": t2 - t0}
            history.append(self.log_step(bar, done, trajs, scores, advantages, loss_m, engine_stats, times, filt))
            self.checkpoint(bar, done)
            self.guard.check(done, trajs)
        bar.close()
        return history

    def log_step(self, bar, step: int, trajs, scores: Scores, advantages: list[torch.Tensor], loss_m: dict,
                 engine_stats: dict, times: dict[str, float], extra: dict | None = None) -> dict:
        """The log stage of a step: its metrics (and the held-out evaluation when due) to metrics.jsonl
        and wandb, its trajectories to rollouts.jsonl and internal_errors.jsonl, one console line.
        Returns the step's metrics."""
        cfg = self.cfg
        m = {**self.step_metrics(trajs, scores, advantages, loss_m, engine_stats, times), **fault_counts(trajs),
             **(extra or {})}
        self.dump_rollouts(step, trajs, scores)
        log_internal_errors(self.output_dir, step, trajs)
        bar.write(format_step(step, int(cfg.trainer.steps), m))
        every = int(cfg.trainer.heldout.every)
        if every > 0 and (step % every == 0 or step == int(cfg.trainer.steps)):
            m.update(self.heldout_eval(step))
            bar.write(f"held-out ({len(self.heldout_tasks)} {cfg.trainer.heldout.split} tasks): "
                      f"accuracy {m.get('heldout/accuracy', 0.0):.1%}, EIR {m.get('heldout/eir', 0.0):.3f}, "
                      f"turns {m.get('heldout/avg_turns', 0.0):.2f}")
        self.logger.log(m, step=step)
        return m

    def checkpoint(self, bar, step: int) -> None:
        """Write a checkpoint every ``trainer.save_every`` steps and after the last one."""
        cfg = self.cfg
        if step % int(cfg.trainer.save_every) == 0 or step == int(cfg.trainer.steps):
            with lifecycle.protected():  # a stop signal waits for the write to finish
                path = save_checkpoint(self.output_dir / "checkpoints", step, self.policy.model, self.optimizer,
                                       str(self.model_path), self.config_dict, keep=int(cfg.trainer.keep_checkpoints))
            bar.write(f"checkpoint: {path}")

    def heldout_eval(self, step: int) -> dict[str, float]:
        """Roll out the held-out tasks with the current weights (``trainer.heldout``) and write their
        report to ``<output_dir>/heldout/step_NNNNNN/``; returns its metrics as ``heldout/…``."""
        saved = rng_state()  # evaluating must not change what training does next (exact resume)
        try:
            return self._heldout_eval(step)
        finally:
            set_rng_state(saved)

    def _heldout_eval(self, step: int) -> dict[str, float]:
        ho = self.cfg.trainer.heldout
        trajs, _ = self.runtime.rollout(self.heldout_tasks, int(ho.samples), step, ho.sampling, ho.phrasing,
                                        int(self.cfg.seed), group_prefix="heldout/",
                                        max_turns=self.cfg.algorithm.max_turns)
        entries = [{"task_id": t.task_id, "mode": ho.phrasing, "action_format": self.cfg.env.action_format,
                    "trajectory": t.to_dict()} for t in trajs]
        report = build_report(entries, {t["id"]: t for t in self.heldout_tasks}, n_resamples=int(ho.bootstrap),
                              seed=int(self.cfg.seed))
        folder = self.output_dir / "heldout" / f"step_{step:06d}"
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "trajectories.jsonl").open("w") as f:
            f.writelines(json.dumps(e) + "\n" for e in entries)
        write_report(report, folder, plots=False)
        return flat_metrics(report, "heldout")

    @staticmethod
    def step_metrics(trajs, scores: Scores, advantages: list[torch.Tensor], loss_m, engine_stats,
                     times: dict[str, float]) -> dict:
        """Scalar metrics of one step (reward, accuracy, error-turn rate, turns, speed, and the time split
        under the names both backends share, :mod:`earthrl.rollout.step_accounting`); ``times``: seconds of
        ``rollout`` (scoring excluded), ``reward`` (scoring + advantages), ``update`` (learner only),
        ``weight_sync`` (LoRA push) and the whole ``step``."""
        kept = [i for i, t in enumerate(trajs) if not t.faulted]
        agent = [trajs[i] for i in kept]
        agent_rewards = torch.tensor([scores.reward[i] for i in kept]) if agent else torch.zeros(1)
        gen_s = engine_stats["generate_s"]
        turns = sum(t.num_turns for t in agent)
        turn_rewards = [r for i in kept for r in scores.turn_rewards[i]]
        groups = {t.group for t in trajs}
        signal = {trajs[i].group for i, a in enumerate(advantages) if bool(a.abs().sum() > 0)}
        accounting = local_accounting(times, engine_stats["generated_tokens"], gen_s)
        return {
            "advantage/groups": float(len(groups)),
            "advantage/nonzero_groups": float(len(signal)),
            "reward/mean": float(agent_rewards.mean()),
            "reward/std": float(agent_rewards.std(unbiased=False)),
            **({"reward/turn_mean": sum(turn_rewards) / len(turn_rewards)} if turn_rewards else {}),
            "advantage/abs_mean": sum(float(a.abs().sum()) for a in advantages)
            / max(sum(t.generated_tokens for t in agent), 1),
            "eval/accuracy": sum(scores.correct[i] for i in kept) / max(len(agent), 1),
            "rollout/answered": sum(t.answer is not None for t in agent) / max(len(agent), 1),
            "rollout/error_turn_rate": sum(t.num_error_turns for t in agent) / max(turns, 1),
            "rollout/mean_turns": turns / max(len(agent), 1),
            "rollout/faulted": float(len(trajs) - len(agent)),
            "rollout/logprob_diff": loss_m.pop("logprob_diff"),
            "rollout/sequence_tokens_mean": sum(len(t.token_ids()) for t in agent) / max(len(agent), 1),
            **{f"engine/{k}": v for k, v in engine_stats.items() if k != "generate_s"},
            "perf/gen_tokens_per_s": accounting[TOKENS_PER_S_PER_GPU],  # one engine process
            **accounting,
            **{f"loss/{k}": v for k, v in loss_m.items()},
        }

    def dump_rollouts(self, step: int, trajs, scores: Scores) -> None:
        """Append the step's trajectories (text, tool calls) with their scores to rollouts.jsonl."""
        with (self.output_dir / "rollouts.jsonl").open("a") as f:
            for i, t in enumerate(trajs):
                f.write(json.dumps({"step": step, "task_id": t.task_id, "reward": scores.reward[i],
                                    "correct": scores.correct[i], "answer": t.answer, "faulted": t.faulted,
                                    "failure": t.failure, "turn_rewards": scores.turn_rewards[i], "record": t.record,
                                    "turns": [{"response": u.response_text, "observation": u.observation, "error": u.error,
                                               "error_kind": u.error_kind, "tool_call": u.tool_call, "role": u.role,
                                               "subgoal": u.subgoal, "verdict": u.verdict} for u in t.turns]}) + "\n")

    # ------------------------------------------------------------- finishing
    def export(self) -> Path | None:
        """Merge the newest checkpoint into a plain HF folder at ``<output_dir>/export``."""
        found = list_checkpoints(self.output_dir / "checkpoints")
        if not found:
            return None
        return export_merged(found[-1], self.output_dir / "export", overwrite=True)

    def cleanup(self) -> None:
        """Finish wandb and stop Ray."""
        if getattr(self, "logger", None) is not None:
            self.logger.finish()
        RolloutRuntime.shutdown(getattr(self, "output_dir", None) and self.output_dir / "workspaces")


def run_verl_backend(cfg: DictConfig) -> list[dict]:
    """``backend=verl``: the local recipe's checks, then :func:`earthrl.launch.verl_config.verl_job`
    (verl config, memory estimate, dataset, verl's trainer on GPUs). Returns [] (verl logs its own steps)."""
    recipe = LocalGRPORecipe(cfg)
    recipe.validate()
    verl_job(cfg, model_path=recipe.model_path, data_root=recipe.data_root, tasks=recipe.tasks,
             heldout=recipe.heldout_tasks)
    return []


def run(cfg: DictConfig) -> list[dict]:
    """Validate, set up, train, export and clean up; prints a summary. Returns per-step metrics."""
    if str(cfg.backend) == "verl":
        return run_verl_backend(cfg)
    recipe = LocalGRPORecipe(cfg)
    recipe.validate()
    done = recipe.finished_step()
    if done is not None:  # a finished run resumed: start no Ray, engine or model
        print(f"trainer.output_dir={recipe.output_dir} is finished: its checkpoint {recipe.resume_from.name} "
              f"reached trainer.steps={cfg.trainer.steps}; nothing to train (raise trainer.steps to go on)")
        if cfg.trainer.export and not (recipe.output_dir / "export").is_dir():
            print(f"exported model: {recipe.export()}")
        return []
    try:
        recipe.setup()
        history = recipe.train()
        exported = recipe.export() if cfg.trainer.export else None
        curve = " → ".join(f"{m['reward/mean']:.3f}" for m in history)
        print(f"reward curve: {curve or '(no new steps)'}")
        print(f"run folder: {recipe.output_dir}")
        if recipe.logger.wandb_dir:
            print(f"wandb ({recipe.logger.mode}): {recipe.logger.wandb_dir}")
        if exported:
            print(f"exported model: {exported}")
        return history
    finally:
        recipe.cleanup()
