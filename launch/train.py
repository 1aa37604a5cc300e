"""`earthrl train`: GRPO training of an RS agent with the local backend.

The recipe's skeleton is ``setup → train (rollout → reward → advantage → update → push
weights → log → checkpoint) → export → cleanup``. Everything is configured by Hydra
(``conf/``); see README for overrides and sweeps.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from earthrl.launch.errors import ConfigError


class LocalGRPORecipe:
    """GRPO with a LoRA policy on one machine: Ray local cluster, HF engine actor, EnvPool actors.

    Args:
        cfg: the composed Hydra config (see ``conf/config.yaml``).
    """

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg

    # ------------------------------------------------------------------ setup
    def validate(self) -> None:
        """Check everything that can be checked before anything is written.

        Raises:
            ConfigError: with one line naming the field and the fix.
        """
        from earthrl.launch.job_inputs import check_job_config, data_root, load_tasks, model_path

        cfg = self.cfg
        check_job_config(cfg, "train")
        self.model_path = model_path(cfg)
        self.data_root = data_root(cfg)
        self.validate_algorithm()
        self.tasks = load_tasks(cfg.tasks.name, cfg.tasks.split, self.data_root)
        ho = cfg.trainer.heldout
        self.heldout_tasks = []
        if int(ho.every) > 0:
            held = load_tasks(cfg.tasks.name, ho.split, self.data_root, split_key="trainer.heldout.split")
            self.heldout_tasks = held[: int(ho.max_tasks)]
        self.output_dir = Path(cfg.trainer.output_dir)
        from earthrl.launch.checkpoint import resolve_resume

        try:
            self.resume_from = resolve_resume(str(cfg.trainer.resume), self.output_dir / "checkpoints")
        except FileNotFoundError as exc:
            raise ConfigError(str(exc)) from exc

    def validate_algorithm(self) -> None:
        """Resolve every registered name of the ``algorithm`` group (reward, turn reward,
        advantage estimator, policy loss).

        Raises:
            ConfigError: an unknown name, with the registered ones.
        """
        from earthrl.algorithms.registry import ESTIMATORS, POLICY_LOSSES
        from earthrl.rewards.registry import get_reward, get_turn_reward

        alg = self.cfg.algorithm
        if alg.action_format and alg.action_format != self.cfg.env.action_format:
            raise ConfigError(f"algorithm={alg.name} needs env.action_format={alg.action_format} "
                              f"(got {self.cfg.env.action_format}): add env={alg.action_format}")
        checks = [("reward", alg.reward, get_reward), ("estimator", alg.estimator, ESTIMATORS.lookup),
                  ("policy_loss.name", alg.policy_loss.name, POLICY_LOSSES.lookup)]
        if alg.get("turn_reward"):
            checks.append(("turn_reward", alg.turn_reward, get_turn_reward))
        for key, name, lookup in checks:
            try:
                lookup(name)
            except KeyError as exc:
                raise ConfigError(f"algorithm.{key}={name}: {exc.args[0]}") from None

    def setup(self) -> None:
        """Start Ray, the engine and env actors, the policy and optimizer; resume if asked."""
        from earthrl.launch.faults import FailureGuard
        from earthrl.launch.run_logger import RunLogger
        from earthrl.launch.runtime import RolloutRuntime
        from earthrl.models.policy import Policy

        cfg = self.cfg
        self.validate()
        self.guard = FailureGuard(int(cfg.trainer.max_consecutive_failures))  # checked before anything starts
        self.output_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.output_dir / "workspaces", ignore_errors=True)  # what a killed run's episodes left
        self.config_dict = OmegaConf.to_container(cfg, resolve=True)
        (self.output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        torch.set_num_threads(int(cfg.cluster.torch_threads))

        # the algorithm may set its own adapter size (HiRS VG-HRL: rank 64, alpha 128)
        lora = {**OmegaConf.to_container(cfg.model.lora, resolve=True),
                **OmegaConf.to_container(cfg.algorithm.lora, resolve=True)}
        self.runtime = RolloutRuntime(cfg, self.model_path, self.data_root, self.output_dir / "workspaces", lora)
        self.policy = Policy(str(self.model_path), lora, dtype=cfg.model.dtype,
                             gradient_checkpointing=bool(cfg.model.gradient_checkpointing))
        alg = cfg.algorithm
        self.optimizer = torch.optim.AdamW(self.policy.trainable_parameters(), lr=float(alg.lr),
                                           weight_decay=float(alg.weight_decay))
        self.start_step = 0
        if self.resume_from is not None:
            from earthrl.launch.checkpoint import load_checkpoint

            self.start_step = load_checkpoint(self.resume_from, self.policy.model, self.optimizer)
            print(f"resumed from {self.resume_from} (step {self.start_step})", flush=True)
        if str(cfg.trainer.resume) not in ("off", ""):
            from earthrl.launch.run_logger import truncate_logs

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

    def update(self, trajs, adv_tokens: list[torch.Tensor]) -> dict:
        """``algorithm.ppo_epochs`` passes of the registered policy loss (``algorithm.policy_loss.name``:
        PPO-clip + KL, or HiRS's λ-mixed manager/specialist loss) over the batch in micro-batches,
        one optimizer step per pass; returns the last pass's loss metrics.

        Args:
            adv_tokens: per trajectory, float32 advantages aligned with ``token_ids()``
                (:func:`earthrl.algorithms.estimators.token_advantages`).
        """
        from earthrl.algorithms.mixed_loss import role_token_masks
        from earthrl.algorithms.policy_loss import PolicyLossConfig
        from earthrl.algorithms.registry import POLICY_LOSSES
        from earthrl.launch.faults import kill_point
        from earthrl.models.policy import pack_batch, pad_right

        alg = self.cfg.algorithm
        loss_cfg = PolicyLossConfig(**OmegaConf.to_container(alg.policy_loss, resolve=True))
        loss_fn = POLICY_LOSSES.lookup(loss_cfg.name)
        temperature = float(alg.sampling.temperature)
        keep = [i for i, t in enumerate(trajs) if not t.env_failure and t.turns]
        n_tokens = sum(sum(trajs[i].response_mask()) for i in keep)
        metrics = {"pg_loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "loss": 0.0, "grad_norm": 0.0, "logprob_diff": 0.0}
        if not keep or n_tokens == 0:
            return metrics
        roles = role_token_masks(trajs, "manager")
        n_manager = sum(float(roles[i].sum()) for i in keep)
        mb = int(alg.micro_batch_size)
        micro = [(idx, pack_batch([trajs[i].token_ids() for i in idx], [trajs[i].response_mask() for i in idx]),
                  pad_right([trajs[i].rollout_logprobs() for i in idx], 0.0),
                  pad_right([adv_tokens[i].tolist() for i in idx], 0.0), pad_right([roles[i].tolist() for i in idx], 0.0))
                 for idx in (keep[s:s + mb] for s in range(0, len(keep), mb))]
        old_cache: dict[int, torch.Tensor] = {}  # π_old per micro-batch: the policy before this update
        ref_cache: dict[int, torch.Tensor | None] = {}
        self.policy.model.train()
        for _ in range(int(alg.ppo_epochs)):
            metrics = dict.fromkeys(metrics, 0.0)
            self.optimizer.zero_grad(set_to_none=True)
            for s, (idx, batch, rollout_lp, adv, role) in enumerate(micro):
                ids, att, mask = batch["input_ids"], batch["attention_mask"], batch["response_mask"]
                if s not in ref_cache:
                    use_ref = loss_cfg.kl_coef > 0
                    ref_cache[s] = self.policy.ref_logprobs(ids, att, mask, temperature) if use_ref else None
                logprobs = self.policy.token_logprobs(ids, att, mask, temperature)
                # the first epoch's logprobs are π_old (ratio 1 there: the gradient is GRPO's);
                # later epochs are clipped against them
                old = old_cache.setdefault(s, logprobs.detach())
                loss, m = loss_fn(logprobs=logprobs, old_logprobs=old, advantages=adv, response_mask=mask,
                                  ref_logprobs=ref_cache[s], cfg=loss_cfg, role_mask=role, batch_num_tokens=n_tokens,
                                  global_batch_size=len(keep), role_num_tokens=(n_manager, n_tokens - n_manager))
                loss.backward()
                share = float(mask.sum()) / n_tokens
                metrics["logprob_diff"] += float(((old - rollout_lp).abs() * mask).sum()) / n_tokens
                metrics["loss"] += float(loss.detach())
                for k in ("pg_loss", "kl", "clip_frac"):
                    metrics[k] += m[k] * share
            kill_point("update", getattr(self, "current_step", 0))  # test hook (kill-anywhere resume)
            grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.trainable_parameters(), float(alg.grad_clip))
            metrics["grad_norm"] = float(grad_norm)
            self.optimizer.step()
        self.policy.model.eval()
        return metrics

    def train(self) -> list[dict]:
        """Run ``trainer.steps`` GRPO steps (from the resumed step); returns per-step metrics."""
        from tqdm import tqdm

        from earthrl.algorithms.estimators import token_advantages
        from earthrl.launch.checkpoint import save_checkpoint
        from earthrl.launch.faults import fault_counts
        from earthrl.launch.run_logger import format_step, log_internal_errors

        cfg = self.cfg
        alg = cfg.algorithm
        total = int(cfg.trainer.steps)
        history = []
        bar = tqdm(range(self.start_step, total), initial=self.start_step, total=total, desc="GRPO", unit="step",
                   file=sys.stdout, dynamic_ncols=True)
        for step in bar:
            t0 = time.perf_counter()
            self.current_step = step + 1
            tasks = self.tasks_for_step(step)
            by_id = {t["id"]: t for t in tasks}
            trajs, engine_stats = self.rollout(step, tasks)
            t_rollout = time.perf_counter() - t0
            # rewards (trajectory and per turn) → advantages per token, by the registered estimator
            advantages = token_advantages(trajs, by_id, alg)
            t1 = time.perf_counter()
            loss_m = self.update(trajs, advantages)
            self.runtime.push_lora(self.policy.adapter_state_dict())
            t_update = time.perf_counter() - t1
            done = step + 1
            m = self.step_metrics(trajs, advantages, loss_m, engine_stats, t_rollout, t_update,
                                  time.perf_counter() - t0)
            m.update(fault_counts(trajs))
            self.dump_rollouts(done, trajs)
            log_internal_errors(self.output_dir, done, trajs)
            bar.write(format_step(done, total, m))
            every = int(cfg.trainer.heldout.every)
            if every > 0 and (done % every == 0 or done == total):
                m.update(self.heldout_eval(done))
                bar.write(f"held-out ({len(self.heldout_tasks)} {cfg.trainer.heldout.split} tasks): "
                          f"accuracy {m.get('heldout/accuracy', 0.0):.1%}, EIR {m.get('heldout/eir', 0.0):.3f}, "
                          f"turns {m.get('heldout/avg_turns', 0.0):.2f}")
            self.logger.log(m, step=done)
            history.append(m)
            if done % int(cfg.trainer.save_every) == 0 or done == total:
                path = save_checkpoint(self.output_dir / "checkpoints", done, self.policy.model, self.optimizer,
                                       str(self.model_path), self.config_dict, keep=int(cfg.trainer.keep_checkpoints))
                bar.write(f"checkpoint: {path}")
            self.guard.check(done, trajs)
        bar.close()
        return history

    def heldout_eval(self, step: int) -> dict[str, float]:
        """Roll out the held-out tasks with the current weights (``trainer.heldout``) and write their
        report to ``<output_dir>/heldout/step_NNNNNN/``; returns its metrics as ``heldout/…``."""
        from earthrl.launch.checkpoint import rng_state, set_rng_state

        saved = rng_state()  # evaluating must not change what training does next (exact resume)
        try:
            return self._heldout_eval(step)
        finally:
            set_rng_state(saved)

    def _heldout_eval(self, step: int) -> dict[str, float]:
        from earthrl.launch.eval_report import build_report, flat_metrics, write_report

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
    def step_metrics(trajs, advantages: list[torch.Tensor], loss_m, engine_stats, t_rollout, t_update, t_step) -> dict:
        """Scalar metrics of one step (reward, accuracy, error-turn rate, turns, speed, time split)."""
        agent = [t for t in trajs if not t.env_failure]
        agent_rewards = torch.tensor([t.reward for t in agent]) if agent else torch.zeros(1)
        gen_s = engine_stats["generate_s"]
        turns = sum(t.num_turns for t in agent)
        turn_rewards = [r for t in agent for r in t.turn_rewards]
        return {
            "reward/mean": float(agent_rewards.mean()),
            "reward/std": float(agent_rewards.std(unbiased=False)),
            **({"reward/turn_mean": sum(turn_rewards) / len(turn_rewards)} if turn_rewards else {}),
            "advantage/abs_mean": sum(float(a.abs().sum()) for a in advantages)
            / max(sum(t.generated_tokens for t in agent), 1),
            "eval/accuracy": sum(t.correct for t in agent) / max(len(agent), 1),
            "rollout/answered": sum(t.answer is not None for t in agent) / max(len(agent), 1),
            "rollout/error_turn_rate": sum(t.num_error_turns for t in agent) / max(turns, 1),
            "rollout/mean_turns": turns / max(len(agent), 1),
            "rollout/env_failures": float(len(trajs) - len(agent)),
            "rollout/logprob_diff": loss_m.pop("logprob_diff"),
            "rollout/sequence_tokens_mean": sum(len(t.token_ids()) for t in agent) / max(len(agent), 1),
            **{f"engine/{k}": v for k, v in engine_stats.items() if k != "generate_s"},
            "perf/gen_tokens_per_s": engine_stats["generated_tokens"] / max(gen_s, 1e-9),
            "time/rollout_s": t_rollout,
            "time/generate_s": gen_s,
            "time/env_s": max(t_rollout - gen_s, 0.0),
            "time/update_s": t_update,
            "time/step_s": t_step,
            **{f"loss/{k}": v for k, v in loss_m.items()},
        }

    def dump_rollouts(self, step: int, trajs) -> None:
        """Append the step's trajectories (text, tool calls, rewards) to rollouts.jsonl."""
        with (self.output_dir / "rollouts.jsonl").open("a") as f:
            for t in trajs:
                f.write(json.dumps({"step": step, "task_id": t.task_id, "reward": t.reward, "correct": t.correct,
                                    "answer": t.answer, "env_failure": t.env_failure, "failure": t.failure,
                                    "turn_rewards": t.turn_rewards,
                                    "record": t.record,
                                    "turns": [{"response": u.response_text, "observation": u.observation, "error": u.error,
                                               "error_kind": u.error_kind, "tool_call": u.tool_call, "role": u.role,
                                               "subgoal": u.subgoal, "verdict": u.verdict} for u in t.turns]}) + "\n")

    # ------------------------------------------------------------- finishing
    def export(self) -> Path | None:
        """Merge the newest checkpoint into a plain HF folder at ``<output_dir>/export``."""
        from earthrl.launch.checkpoint import list_checkpoints
        from earthrl.models.export import export_merged

        found = list_checkpoints(self.output_dir / "checkpoints")
        if not found:
            return None
        return export_merged(found[-1], self.output_dir / "export", overwrite=True)

    def cleanup(self) -> None:
        """Finish wandb and stop Ray."""
        from earthrl.launch.runtime import RolloutRuntime

        if getattr(self, "logger", None) is not None:
            self.logger.finish()
        RolloutRuntime.shutdown(getattr(self, "output_dir", None) and self.output_dir / "workspaces")


def run(cfg: DictConfig) -> list[dict]:
    """Validate, set up, train, export and clean up; prints a summary. Returns per-step metrics."""
    recipe = LocalGRPORecipe(cfg)
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
