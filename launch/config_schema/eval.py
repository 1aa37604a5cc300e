"""``eval``: what `earthrl eval` runs or scores (conf/eval.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from earthrl.launch.config_schema.rules import PHRASINGS, setting


@dataclass
class EvalSettings:
    """The ``eval`` section of conf/eval.yaml."""

    modes: list[str] = setting(["IF"], "phrasings to evaluate; each task runs once per mode (where it has it); "
                                       "conf/eval.yaml sets it to [tasks.phrasing]",
                               choices=PHRASINGS, nonempty=True)
    samples: int = setting(1, "trajectories per task and mode (accuracy is averaged over them)", range=(1, None))
    max_tasks: int | None = setting(None, "first N tasks of the split (null: all)", range=(1, None))
    batch_tasks: int = setting(8, "tasks rolled out together (one progress-bar tick per task)", range=(1, None))
    checkpoint: str | None = setting(None, "checkpoint folder whose adapter/ is evaluated "
                                              "(null: the model as it is)")
    trajectories: str | None = setting(None, "JSONL of recorded trajectories to score instead of running a model")
    predictions: str | None = setting(None, "an Earth-Agent run folder (extracted_tool_calls.json, "
                                               "results_summary_polished.json) to score")
    earthbench: str | None = setting("${oc.env:EARTHRL_EARTHBENCH,null}",
                                        "the Earth-Bench folder (question.json, extracted_tool_calls_GT.json)")
    metrics_mode: str = setting("earthrl", "earthrl (missing predictions count 0) | earthbench (Earth-Agent's skip)",
                                choices=("earthrl", "earthbench"))
    bootstrap: int = setting(1000, "resamples of the bootstrap 95% confidence intervals (0: none)", range=(0, None))
    plots: bool = setting(True, "write the report's plots")
    resume: bool = setting(True, "skip (task, mode) pairs already in trajectories.jsonl (same rollout config only)")
    output_dir: str | None = setting(None, "null: runs/eval/<experiment_name>, or runs/eval/<source> when "
                                              "scoring files")
