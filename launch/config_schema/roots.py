"""The root configs of `earthrl train|eval|sft|learn`: the groups each command composes and the
top-level keys. Each is stored in Hydra's ConfigStore as ``<command>_schema`` and is the first entry of
its primary config's defaults list (conf/config.yaml, eval.yaml, sft.yaml, learn.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from earthrl.launch.config_schema.agent import AgentConfig
from earthrl.launch.config_schema.algorithm import AlgorithmConfig, SamplingConfig
from earthrl.launch.config_schema.cluster import ClusterConfig
from earthrl.launch.config_schema.env import EnvConfig
from earthrl.launch.config_schema.eval import EvalSettings
from earthrl.launch.config_schema.learn import LearnConfig
from earthrl.launch.config_schema.logger import LoggerConfig
from earthrl.launch.config_schema.model import ModelConfig
from earthrl.launch.config_schema.rules import setting
from earthrl.launch.config_schema.sft import SFTConfig
from earthrl.launch.config_schema.tasks import TasksConfig
from earthrl.launch.config_schema.trainer import TrainerConfig


@dataclass
class JobConfig:
    """What every job of train, eval and sft has."""

    seed: int = setting(0, "seed of Python, numpy, torch and the rollouts", range=(0, None))
    backend: str = setting("local", "local: one machine (Ray local cluster + learner in the driver); verl: the verl "
                                    "trainer on GPUs (cluster=4090x2|4090x4|a100x8|a100x16)", choices=("local", "verl"))
    model: ModelConfig = setting(factory=ModelConfig, doc="the policy model (conf/model)")
    tasks: TasksConfig = setting(factory=TasksConfig, doc="the task suite (conf/tasks)")
    env: EnvConfig = setting(factory=EnvConfig, doc="the environment and the agent loop's limits (conf/env)")
    agent: AgentConfig = setting(factory=AgentConfig, doc="the agent loop: who speaks next and what each role "
                                                          "sees (conf/agent)")
    cluster: ClusterConfig = setting(factory=ClusterConfig, doc="machines and rollout engine (conf/cluster)")
    logger: LoggerConfig = setting(factory=LoggerConfig, doc="where metrics go (conf/logger)")


@dataclass
class TrainConfig(JobConfig):
    """`earthrl train` (conf/config.yaml)."""

    experiment_name: str = setting("${model.name}-${slug:${tasks.name}}-${algorithm.name}",
                                   "the run's name (its folder under runs/)")
    algorithm: AlgorithmConfig = setting(factory=AlgorithmConfig, doc="the RL algorithm (conf/algorithm)")
    trainer: TrainerConfig = setting(factory=TrainerConfig, doc="run length, checkpoints, held-out evaluation")


@dataclass
class EvalConfig(JobConfig):
    """`earthrl eval` (conf/eval.yaml)."""

    experiment_name: str = setting("eval-${model.name}-${slug:${tasks.name}}-${agent.name}-${env.action_format}",
                                   "the report's name (the agent loop and action format in it: evaluations of "
                                   "different loops never share a default folder)")
    eval: EvalSettings = setting(factory=EvalSettings, doc="what is run or scored")
    sampling: SamplingConfig = setting(factory=lambda: SamplingConfig(temperature=0.1),
                                       doc="generation settings (RS-Claw-Evolution evaluates at temperature 0.1)")


@dataclass
class SFTRootConfig(JobConfig):
    """`earthrl sft` (conf/sft.yaml)."""

    experiment_name: str = setting("sft-${model.name}-${slug:${tasks.name}}-${sft.mode}", "the run's name")
    sft: SFTConfig = setting(factory=SFTConfig, doc="the SFT preset (conf/sft)")


@dataclass
class LearnRootConfig:
    """`earthrl learn` (conf/learn.yaml)."""

    seed: int = setting(0, "seed given to every stage", range=(0, None))
    learn: LearnConfig = setting(factory=LearnConfig, doc="the recipe (conf/learn)")


#: command -> its root schema
ROOTS: dict[str, type] = {"train": TrainConfig, "eval": EvalConfig, "sft": SFTRootConfig, "learn": LearnRootConfig}
