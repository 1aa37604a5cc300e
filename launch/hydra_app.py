"""Hydra entry point of ``earthrl train`` (config in ``conf/``, relative to this file)."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from earthrl.launch.errors import ConfigError


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    """Run the training recipe; a ConfigError ends the run with one line and exit code 2."""
    from earthrl.launch.train import run

    try:
        run(cfg)
    except ConfigError as exc:
        print(f"earthrl: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
