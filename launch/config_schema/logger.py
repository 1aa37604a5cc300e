"""``logger``: where metrics go (conf/logger/<name>.yaml picks one)."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from earthrl.launch.config_schema.rules import setting


@dataclass
class LoggerConfig:
    """Schema of conf/logger/*.yaml."""

    name: str = setting(MISSING, "wandb | none")
    project: str = setting("earthrl", "the W&B project")
    mode: str = setting("auto", "auto: online when WANDB_API_KEY is set, offline otherwise",
                        choices=("auto", "offline", "online", "disabled"))
