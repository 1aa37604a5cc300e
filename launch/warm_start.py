"""``trainer.warm_start``: the SFT warm start of a GRPO run, built once per setting and cached.

Every seed starts RL from a supervised model (RS-Claw-Evolution §4: SFT, then RL). With
``trainer.warm_start=<preset>`` (a ``conf/sft/<preset>.yaml``) and no ``trainer.init_from``,
``earthrl train`` first runs ``earthrl sft sft=<preset>`` with the run's own model, task suite, env
and cluster settings into ``$EARTHRL_HOME/warm_start/<model>-<format>-<key>/`` and starts GRPO from
its checkpoint; a later run with the same settings reuses it. The cache key is a hash of what changes
the SFT result: the preset file's text and the SFT command's model (with the dtype ``model.dtype=auto``
resolves to on this machine's ``cluster.device``), task-suite and env overrides. Engine, memory and cluster settings
(``cluster.*``) are passed to the SFT run but are not in the key: changing them reuses the warm start.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from earthrl.envs.errors import ConfigError
from earthrl.envs.paths import earthrl_home
from earthrl.launch.compute import job_dtype
from earthrl.launch.job_inputs import clear_unfinished_sft
from earthrl.launch.override_text import CONF_DIR, as_overrides, presets
from earthrl.models.checkpoint import list_checkpoints

CARRIED = ("model", "tasks", "env", "cluster")  # sections the SFT run takes from the training run


def _choices() -> dict[str, str]:
    """The config-group choices of the running Hydra app (``{"model": "qwen2.5-coder-0.5b", …}``), or {}."""
    from hydra.core.hydra_config import HydraConfig

    try:
        return dict(HydraConfig.get().runtime.choices)
    except ValueError:  # not inside a Hydra app (a recipe built in Python)
        return {}


def sft_overrides(cfg: DictConfig, preset: str, folder: Path) -> list[str]:
    """The ``earthrl sft`` overrides of the warm start: the preset, the training run's model, task
    suite (train split), env and cluster values, no logger, output in ``folder``."""
    choices = _choices()
    groups = [f"{g}={choices[g]}" for g in CARRIED if g in choices and g != "cluster"]
    values = []
    for section in CARRIED:
        node = OmegaConf.create({section: OmegaConf.to_container(cfg[section], resolve=True)})
        values += [o for o in as_overrides(node) if not o.startswith("tasks.split=")]
    return [*groups, f"sft={preset}", *values, "tasks.split=train", "logger=none", f"sft.output_dir={folder}"]


def preset_file(preset: str, key: str) -> Path:
    """``conf/sft/<preset>.yaml``.

    Raises:
        ConfigError: there is no such preset (names ``key`` and lists the presets).
    """
    file = CONF_DIR / "sft" / f"{preset}.yaml"
    if not file.is_file():
        raise ConfigError(f"{key}={preset}: no such SFT preset; use one of {', '.join(presets('sft'))} (conf/sft/)")
    return file


def cache_key(cfg: DictConfig, preset: str) -> str:
    """The hex sha256 of what changes the warm start's SFT result (module doc): the preset file, the
    model/tasks/env overrides of its SFT command and the resolved dtype; never ``cluster.*`` or the
    output folder.

    Raises:
        ConfigError: ``trainer.warm_start`` names no ``conf/sft`` preset (lists them).
    """
    file = preset_file(preset, "trainer.warm_start")
    keyed = [o for o in sft_overrides(cfg, preset, Path(".")) if not o.startswith(("cluster.", "sft.output_dir="))]
    dtype = job_dtype(cfg)[0]  # on cluster.device's device
    return hashlib.sha256("\n".join([file.read_text(), *keyed, f"dtype={dtype}"]).encode()).hexdigest()


def warm_start_folder(cfg: DictConfig, preset: str) -> Path:
    """Where the warm start of these settings lives (exists or not): named after the model, the action
    format, the preset and :func:`cache_key`.

    Raises:
        ConfigError: ``trainer.warm_start`` names no ``conf/sft`` preset (lists them).
    """
    key = cache_key(cfg, preset)
    return earthrl_home() / "warm_start" / f"{cfg.model.name}-{cfg.env.action_format}-{preset}-{key[:10]}"


def ensure_warm_start(cfg: DictConfig, preset: str) -> Path:
    """The warm start's final SFT checkpoint, building it first when it is not cached.

    Raises:
        ConfigError: an unknown preset; the SFT run failed (its output is above it).
    """
    folder = warm_start_folder(cfg, preset)
    found = list_checkpoints(folder / "checkpoints") if (folder / "sft_summary.json").is_file() else []
    if found:
        print(f"warm start: cached SFT checkpoint {found[-1]} (trainer.warm_start={preset})", flush=True)
        return found[-1]
    clear_unfinished_sft(folder)
    argv = sft_overrides(cfg, preset, folder)
    print(f"warm start: building it once (trainer.warm_start={preset}): earthrl sft {' '.join(argv)}", flush=True)
    t0 = time.perf_counter()
    if subprocess.run([sys.executable, "-m", "earthrl.launch", "sft", *argv]).returncode != 0:
        raise ConfigError(f"trainer.warm_start={preset}: the SFT run failed (output above); fix it or set "
                          "trainer.warm_start=null")
    found = list_checkpoints(folder / "checkpoints")
    if not found:
        raise ConfigError(f"trainer.warm_start={preset}: the SFT run wrote no checkpoint in {folder}")
    print(f"warm start: built {found[-1]} in {time.perf_counter() - t0:.0f} s", flush=True)
    return found[-1]
