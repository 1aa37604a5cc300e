"""Start verl 0.9.1's PPO trainer (``main_ppo``'s v0 task runner) with EarthRL's hook (GPU only).

The v0 trainer passes the whole batch, agent-loop ``extra_fields`` included, to ``compute_advantage``;
:func:`earthrl.algorithms.verl_plugin.install_trainer_hook` runs in the task-runner process so that
EarthRL's estimators get their masks there (verl 0.9.1's v1 TransferQueue trainer hands the advantage
step only a fixed set of fields, hence ``trainer.use_v1=false``). :func:`install_step_accounting`
(same process) makes every training step's metrics carry EarthRL's shared per-step names
(:mod:`earthrl.rollout.step_accounting`, the per-skill reward and accuracy included) next to verl's own, in
every logger verl writes to.
"""

from __future__ import annotations

import ray
from omegaconf import DictConfig
from verl.trainer.main_ppo import run_ppo
from verl.trainer.main_ppo_v0 import TaskRunner
from verl.trainer.ppo import ray_trainer
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils import tracking
from verl.utils.config import validate_config

from earthrl.algorithms.verl_plugin import install_trainer_hook, rows_of
from earthrl.algorithms.verl_reward import OUTCOME_METRIC
from earthrl.rollout.step_accounting import GEN_TOKENS, by_skill, from_verl


class StepAccountingTracking(tracking.Tracking):
    """verl's ``Tracking`` (the logger ``RayPPOTrainer.fit`` creates) adding :func:`from_verl`'s shared
    names to each training step's metrics; ``n_gpus`` from the config's ``trainer`` section."""

    def __init__(self, project_name, experiment_name, default_backend="console", config=None):
        super().__init__(project_name, experiment_name, default_backend=default_backend, config=config)
        trainer = (config or {}).get("trainer") or {}
        self.n_gpus = int(trainer.get("n_gpus_per_node", 1)) * int(trainer.get("nnodes", 1))

    def log(self, data, step, backend=None):
        """verl's ``log`` of ``data`` plus its shared names (none for a validation-only dict)."""
        super().log({**data, **from_verl(data, self.n_gpus)}, step, backend=backend)


def throughput_with_gen_tokens(verl_fn):
    """``verl_fn`` (``compute_throughout_metrics(batch, timing_raw, n_gpus)``) plus ``perf/gen_tokens``:
    the batch's ``response_mask`` sum, the tokens the model generated (observations excluded; a
    trajectory hit by a fault has an all-zero mask, so its tokens are not counted)."""

    def wrapped(batch, timing_raw, n_gpus):
        out = verl_fn(batch=batch, timing_raw=timing_raw, n_gpus=n_gpus)
        return {**out, GEN_TOKENS: float(batch.batch["response_mask"].sum())}

    wrapped.earthrl_wraps = verl_fn
    return wrapped


def batch_by_skill(batch) -> dict[str, float]:
    """:func:`~earthrl.rollout.step_accounting.by_skill` of a verl training batch: each row's skill from its
    ``earthrl_task``, reward = Σ ``token_level_scores`` (the trajectory reward verl put on the last token),
    outcome = the reward function's ``acc``; rows hit by a fault (``earthrl_failure``) left out, as on the
    local backend. {} for a batch without EarthRL's rows."""
    n = len(batch)
    rows = rows_of(batch.non_tensor_batch, n)
    if not rows or "earthrl_task" not in rows[0] or OUTCOME_METRIC not in batch.non_tensor_batch:
        return {}
    scores = batch.batch["token_level_scores"].sum(-1).tolist()
    acc = batch.non_tensor_batch[OUTCOME_METRIC]
    kept = [i for i in range(n) if rows[i].get("earthrl_failure") is None]
    return by_skill([(rows[i]["earthrl_task"] or {}).get("skill", "?") for i in kept], [scores[i] for i in kept],
                    [float(acc[i]) for i in kept])


def data_metrics_with_skills(verl_fn):
    """``verl_fn`` (``compute_data_metrics(batch, use_critic)``) plus :func:`batch_by_skill`."""

    def wrapped(batch, use_critic=True):
        return {**verl_fn(batch=batch, use_critic=use_critic), **batch_by_skill(batch)}

    wrapped.earthrl_wraps = verl_fn
    return wrapped


def install_step_accounting() -> None:
    """Hook the shared per-step names into verl 0.9.1's v0 trainer (idempotent): ``fit`` imports
    ``verl.utils.tracking.Tracking`` when it starts, which becomes :class:`StepAccountingTracking`, and
    calls ``ray_trainer.compute_throughout_metrics`` and ``ray_trainer.compute_data_metrics``, which become
    :func:`throughput_with_gen_tokens` and :func:`data_metrics_with_skills`."""
    tracking.Tracking = StepAccountingTracking
    if not hasattr(ray_trainer.compute_throughout_metrics, "earthrl_wraps"):
        ray_trainer.compute_throughout_metrics = throughput_with_gen_tokens(ray_trainer.compute_throughout_metrics)
    if not hasattr(ray_trainer.compute_data_metrics, "earthrl_wraps"):
        ray_trainer.compute_data_metrics = data_metrics_with_skills(ray_trainer.compute_data_metrics)


@ray.remote
class EarthRLTaskRunner(TaskRunner.__ray_actor_class__):
    """verl's task runner with :func:`install_trainer_hook` and :func:`install_step_accounting` applied
    in its own process first."""

    def run(self, config):
        """Install the hooks, then verl's ``TaskRunner.run``."""
        install_trainer_hook()
        install_step_accounting()
        return super().run(config)


def main(vc: DictConfig) -> None:
    """Validate ``vc`` as verl's ``main_ppo`` does and run the trainer to its end."""
    validate_config(config=vc, use_reference_policy=need_reference_policy(vc), use_critic=need_critic(vc))
    run_ppo(vc, task_runner_class=EarthRLTaskRunner)
