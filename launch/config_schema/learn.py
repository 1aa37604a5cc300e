"""``learn``: the learning recipe's stages (conf/learn/<name>.yaml picks one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from earthrl.launch.config_schema.rules import SPLITS, setting
from earthrl.launch.config_schema.sft import SFT_MODES


@dataclass
class LearnConfig:
    """Schema of conf/learn/*.yaml. ``common``, ``grpo`` and ``eval`` hold settings given to every stage of
    that kind, as that command's own keys; each stage's own schema checks them before the first starts."""

    name: str = setting(MISSING, "the preset's name")
    model: str = setting(MISSING, "a conf/model preset")
    tasks: str = setting(MISSING, "a conf/tasks preset (SFT and GRPO use its train split)")
    env: str = setting("json", "a conf/env preset", choices=("json", "codeact", "hierarchical"))
    heldout_split: str = setting("test", "the split every evaluation runs", choices=SPLITS)
    warm_start: Any = setting(MISSING, "the conf/sft preset of the warm start GRPO continues from", preset="sft")
    compare_modes: list[str] = setting([], "further SFT modes with the same preset, each evaluated",
                                       choices=SFT_MODES)
    common: dict[str, Any] = setting({}, "settings of every stage (model, tasks, env, cluster, logger keys)")
    grpo: dict[str, Any] = setting({}, "settings of the GRPO stage (`earthrl train` keys)")
    eval: dict[str, Any] = setting({}, "settings of every evaluation (`earthrl eval` keys)")
    bootstrap: int = setting(1000, "resamples of every interval", range=(0, None))
    output_dir: str = setting("runs/learn/${learn.name}", "the recipe's folder")
