"""Start verl 0.9.1's PPO trainer (``main_ppo``'s v0 task runner) with EarthRL's hook (GPU only).

The v0 trainer passes the whole batch, agent-loop ``extra_fields`` included, to ``compute_advantage``;
:func:`earthrl.algorithms.verl_plugin.install_trainer_hook` runs in the task-runner process so that
EarthRL's estimators get their masks there (verl 0.9.1's v1 TransferQueue trainer hands the advantage
step only a fixed set of fields, hence ``trainer.use_v1=false``).
"""

from __future__ import annotations

import ray
from omegaconf import DictConfig
from verl.trainer.main_ppo import run_ppo
from verl.trainer.main_ppo_v0 import TaskRunner
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config

from earthrl.algorithms.verl_plugin import install_trainer_hook


@ray.remote
class EarthRLTaskRunner(TaskRunner.__ray_actor_class__):
    """verl's task runner with :func:`install_trainer_hook` applied in its own process first."""

    def run(self, config):
        """Install the hook, then verl's ``TaskRunner.run``."""
        install_trainer_hook()
        return super().run(config)


def main(vc: DictConfig) -> None:
    """Validate ``vc`` as verl's ``main_ppo`` does and run the trainer to its end."""
    validate_config(config=vc, use_reference_policy=need_reference_policy(vc), use_critic=need_critic(vc))
    run_ppo(vc, task_runner_class=EarthRLTaskRunner)
