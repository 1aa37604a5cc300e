"""Hydra entry points of ``earthrl train``, ``earthrl eval`` and ``earthrl sft`` (configs in ``conf/``, relative to this file).

``conf/config.yaml`` composes a training job, ``conf/eval.yaml`` an evaluation job; both share
the config groups (model, tasks, env, algorithm, cluster, logger).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from earthrl.envs.errors import ConfigError
from earthrl.launch.config_schema import register
from earthrl.launch.sweep import one_folder


def slug(value: str) -> str:
    """A folder-safe name for a config value: a task file ``/a/b/my_tasks.jsonl`` → ``my_tasks``."""
    text = str(value)
    return Path(text).stem if ("/" in text or text.endswith((".json", ".jsonl"))) else text


# ${slug:${tasks.name}} in experiment names (a task file path must not become nested folders)
if not OmegaConf.has_resolver("slug"):
    OmegaConf.register_new_resolver("slug", slug)
if not OmegaConf.has_resolver("one_folder"):  # ${one_folder:${hydra:job.override_dirname}} in run folders
    OmegaConf.register_new_resolver("one_folder", one_folder)

register()  # the schemas the primary configs list first (conf/config.yaml: train_schema, …)

# command -> Hydra config name in conf/
CONFIG_NAMES = {"train": "config", "eval": "eval", "sft": "sft", "learn": "learn"}


def _run_or_exit(run: Callable[[DictConfig], object], cfg: DictConfig):
    """Run the job under :class:`~earthrl.launch.lifecycle.RunLifecycle` (Ctrl-C / SIGTERM stop it cleanly)
    and return its result (a sweep's comparison table reads it); a ConfigError ends the job with one line
    and exit code 2."""
    from earthrl.launch.lifecycle import RunLifecycle  # lazy: psutil at import; CLI startup stays fast

    command = sys.argv[0].split()[-1] if sys.argv and sys.argv[0].startswith("earthrl ") else "train"
    try:
        with RunLifecycle(command, sys.argv[1:]):
            return run(cfg)
    except ConfigError as exc:
        print(f"earthrl: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


@hydra.main(config_path="../conf", config_name=CONFIG_NAMES["train"], version_base="1.3")
def main(cfg: DictConfig) -> list[dict]:
    """Run the training recipe (:func:`earthrl.launch.train.run`); returns its per-step metrics."""
    from earthrl.launch.train import run  # lazy: torch and verl at import, only for `earthrl train`

    return _run_or_exit(run, cfg)


@hydra.main(config_path="../conf", config_name=CONFIG_NAMES["eval"], version_base="1.3")
def eval_main(cfg: DictConfig) -> dict:
    """Run an evaluation (:func:`earthrl.launch.eval.run`); returns the report."""
    from earthrl.launch.eval import run  # lazy: rollout runtime, envs and scipy; CLI startup stays fast

    return _run_or_exit(run, cfg)


@hydra.main(config_path="../conf", config_name=CONFIG_NAMES["sft"], version_base="1.3")
def sft_main(cfg: DictConfig) -> dict:
    """Run the SFT warm start (:func:`earthrl.launch.sft.run`); returns its summary."""
    from earthrl.launch.sft import run  # lazy: torch at import, only for `earthrl sft`

    return _run_or_exit(run, cfg)


@hydra.main(config_path="../conf", config_name=CONFIG_NAMES["learn"], version_base="1.3")
def learn_main(cfg: DictConfig) -> dict:
    """Run the learning recipe (:func:`earthrl.launch.learn.run`); returns its learning curve."""
    from earthrl.launch.learn import run  # lazy: metrics and scipy, only for `earthrl learn`

    return _run_or_exit(run, cfg)


HYDRA_MAINS: dict[str, Callable[[], None]] = {"train": main, "eval": eval_main, "sft": sft_main, "learn": learn_main}
