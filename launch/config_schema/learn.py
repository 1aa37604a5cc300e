"""``learn``: the learning recipe's stages (conf/learn/<name>.yaml picks one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from earthrl.launch.config_schema.rules import PHRASINGS, SPLITS, setting
from earthrl.launch.config_schema.sft import SFT_MODES
from earthrl.launch.override_text import presets


@dataclass
class TransferEvalConfig:
    """``learn.transfer_eval``: phrasings unlike training's (IF: the steps spelt out) that every evaluation
    also runs, in the same ``earthrl eval`` run as ``learn.eval``'s modes; their episodes make the transfer table."""

    modes: list[str] = setting([], "phrasings besides learn.eval's modes (AP: the goal only, OW: the need and the "
                                    "data); []: no transfer table", choices=PHRASINGS)


@dataclass
class LearnConfig:
    """Schema of conf/learn/*.yaml. ``common``, ``grpo``, ``rows`` and ``eval`` hold settings given to the stages
    of that kind, as that command's own keys; each stage's own schema checks them before the first starts."""

    name: str = setting(MISSING, "the preset's name")
    model: str = setting(MISSING, "a conf/model preset")
    tasks: str = setting(MISSING, "a conf/tasks preset (SFT and GRPO use its train split)")
    env: str = setting("json", "a conf/env preset", choices=("json", "codeact", "hierarchical"))
    heldout_split: str = setting("test", "the split every evaluation runs", choices=SPLITS)
    warm_start: Any = setting(MISSING, "the conf/sft preset of the warm start GRPO continues from", preset="sft")
    compare_modes: list[str] = setting([], "further SFT modes with the same preset, each evaluated",
                                       choices=SFT_MODES)
    common: dict[str, Any] = setting({}, "settings of every stage (model, tasks, env, cluster, logger keys)")
    grpo: dict[str, Any] = setting({}, "settings of every RL row (`earthrl train` keys)")
    rows: dict[str, Any] = setting({"grpo": {}}, "the RL rows, each trained from the SFT warm start and evaluated: "
                                   "name -> its own `earthrl train` settings over learn.grpo's (e.g. {algorithm: "
                                   "mefr_tap}); null leaves a row out; the grpo row runs in <output_dir>/grpo")
    compare_models: list[str] = setting([], "conf/model presets evaluated untuned (no adapter) on the same tasks, "
                                            "each compared with the best trained stage", choices=tuple(presets("model")))
    eval: dict[str, Any] = setting({}, "settings of every evaluation (`earthrl eval` keys)")
    transfer_eval: TransferEvalConfig = setting(factory=TransferEvalConfig,
                                                doc="the transfer table: the held-out tasks phrased unlike training")
    bootstrap: int = setting(1000, "resamples of every interval (0: none)", range=(0, None))
    output_dir: str = setting("runs/learn/${learn.name}", "the recipe's folder")
