"""``trainer``: the GRPO run's length, checkpoints and held-out evaluation (conf/trainer/default.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from earthrl.launch.config_schema.algorithm import SamplingConfig
from earthrl.launch.config_schema.rules import PHRASINGS, SPLITS, setting

RUN_DIR = "runs/${experiment_name}/${one_folder:${hydra:job.override_dirname}}"


@dataclass
class HeldoutConfig:
    """Held-out evaluation during training (the metrics of `earthrl eval`, prefix heldout/)."""

    every: int = setting(3, "evaluate every N steps (0: never)", range=(0, None))
    split: str = setting("test", "the held-out split", choices=SPLITS)
    max_tasks: int = setting(4, "first N tasks of the held-out split", range=(1, None))
    samples: int = setting(1, "trajectories per task", range=(1, None))
    phrasing: str = setting("IF", "question phrasing", choices=PHRASINGS)
    bootstrap: int = setting(200, "resamples of the 95% CIs (0: none)", range=(0, None))
    sampling: SamplingConfig = setting(
        factory=lambda: SamplingConfig(temperature=0.1, max_new_tokens="${algorithm.sampling.max_new_tokens}"),
        doc="generation settings (RS-Claw-Evolution evaluates at temperature 0.1)")


@dataclass
class TrainerConfig:
    """Schema of conf/trainer/*.yaml."""

    steps: Any = setting(3, "GRPO steps; auto: by the machine's dtype (launch/machine_size)", auto=int,
                         range=(1, None))
    save_every: int = setting(1, "checkpoint every N steps (and at the end)", range=(1, None))
    keep_checkpoints: int = setting(2, "newest complete checkpoints kept", range=(1, None))
    max_consecutive_failures: int = setting(3, "stop after N steps in a row in which every episode failed outside "
                                               "the agent", range=(1, None))
    resume: str = setting("off", "off | auto (newest complete checkpoint in output_dir) | a checkpoint path")
    warm_start: Any = setting(None, "a conf/sft preset (e.g. warm): SFT with this run's model/tasks/env first, "
                                    "cached in $EARTHRL_HOME/warm_start, then GRPO from it (ignored with init_from "
                                    "or a resume); null: none", preset="sft", null=True)
    init_from: str | None = setting(None, "a checkpoint (e.g. of `earthrl sft`) whose adapter weights start the "
                                             "run (not its optimizer or step); a resumed run ignores it")
    export: bool = setting(True, "write a merged HF folder to <output_dir>/export at the end")
    verl_dry_run: bool = setting(False, "backend=verl: print the composed verl config and the memory estimate, "
                                        "then stop")
    output_dir: str = setting(RUN_DIR, "the run folder")
    heldout: HeldoutConfig = setting(factory=HeldoutConfig, doc="held-out evaluation during training")
