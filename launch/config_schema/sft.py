"""``sft``: the LoRA SFT warm start (conf/sft/<name>.yaml picks one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from earthrl.launch.config_schema.rules import PHRASINGS, setting
from earthrl.launch.config_schema.trainer import RUN_DIR

SFT_MODES = ("oracle", "unmasked", "masked")


@dataclass
class SFTTeacherConfig:
    """The teacher of ``source: teacher_loop`` (rollout/sft_teacher_loop.py): hint-guided re-explorations of its
    failed episodes in the real env, kept when they end correct."""

    engine: str = setting("hf", "hf | vllm: the config's model (the model being trained) in this process; openai: "
                                "the endpoint base_url serving model", choices=("hf", "vllm", "openai"))
    model: str | None = setting(None, "openai: the endpoint's model name (hf, vllm: set model=NAME / model.path)",
                                null=True)
    path: str | None = setting(None, "hf, vllm: the teacher's Hugging Face folder, e.g. a larger model or a checkpoint "
                                     "merged by `earthrl export` (null: the model being trained)", null=True)
    base_url: str | None = setting(None, "openai: the endpoint, e.g. http://127.0.0.1:8000/v1 (its key: "
                                         "$OPENAI_API_KEY)", null=True)
    attempts: int = setting(2, "hinted re-explorations per task the first episode fails", range=(0, None))
    temperature: float = setting(0.7, "teacher sampling temperature (0: greedy)", range=(0, None))
    max_new_tokens: int = setting(256, "tokens per teacher turn at most", range=(1, None))


@dataclass
class SFTDataConfig:
    """The SFT trajectories."""

    path: str | None = setting(None, "JSONL of SFT trajectories (`earthrl sft-data build`); null: built from "
                                        "the train split into <output_dir>/data/<source>.jsonl (reused when there)")
    source: str | None = setting(None, "null: the source sft.mode needs (oracle, or failure-aware); planner: "
                                        "Earth-Agent-Pro's planner and executor turns (sft=planner); expert_tuning: "
                                        "HiRS Expert-tuning knowledge chunks and workflow MCQ/ordering items (80% half); "
                                        "teacher_loop: the teacher's episodes, failed ones re-explored with hints from "
                                        "their real errors (sft=teacher_loop); simcraft: SimCRAFT's synthesised "
                                        "expert and novice episodes, mock-validated (sft=simcraft)",
                                 choices=("oracle", "failure", "teacher_loop", "planner", "expert_tuning", "simcraft"),
                                 null=True)
    max_tasks: int | None = setting(24, "first N train tasks the built data covers (null: all)", range=(1, None))
    max_tokens: int = setting(3072, "trajectories with more tokens are left out (counted)", range=(64, None))
    phrasing: str = setting("IF", "question phrasing of the built data", choices=PHRASINGS)
    seed: int = setting(0, "failure-aware data: which fault each task gets; teacher_loop: the teacher's sampling "
                           "seed", range=(0, None))
    teacher: SFTTeacherConfig = setting(factory=SFTTeacherConfig, doc="the teacher of source teacher_loop")


@dataclass
class CRAFTConfig:
    """SimCRAFT's CRAFT contexts (rollout/sft_craft.py): the SOPs retrieved for each trajectory's question (with
    env.sops' folder, top_k and threshold) in its first user message, perturbed with probability epsilon."""

    enabled: bool = setting(False, "train on CRAFT contexts (needs `earthrl fetch model all-minilm-l6-v2`)")
    epsilon: float = setting(0.15, "probability that an example's SOP context is perturbed (an irrelevant SOP "
                                    "injected or a parameter mutated; SimCRAFT: 0.15)", range=(0, 1))
    seed: int = setting(0, "seed of the perturbation draws (one stream per epoch)", range=(0, None))


@dataclass
class SFTConfig:
    """Schema of conf/sft/*.yaml."""

    name: str = setting(MISSING, "the preset's name")
    mode: str = setting("masked", "oracle (oracle trajectories) | unmasked (failure-aware, every assistant turn) | "
                                  "masked (failure-aware, error turns labelled -100)", choices=SFT_MODES)
    data: SFTDataConfig = setting(factory=SFTDataConfig, doc="the SFT trajectories")
    craft: CRAFTConfig = setting(factory=CRAFTConfig, doc="CRAFT: retrieved SOPs with noise in the context")
    lora: dict[str, Any] = setting({}, "overrides of model.lora for this SFT (e.g. rank, alpha, dropout; HiRS "
                                       "Expert-tuning: rank 8)")
    epochs: int = setting(1, "passes over the data", range=(1, None))
    max_steps: int | None = setting(None, "stop after N optimizer steps (null: epochs decide)", range=(1, None))
    global_batch: int = setting(4, "sequences per optimizer step (all processes together under DeepSpeed)",
                                range=(1, None))
    micro_batch_size: int = setting(2, "sequences per forward/backward (per process under DeepSpeed)",
                                    range=(1, None))
    lr: float = setting(1.0e-4, "peak learning rate", range=(0, None), lo_open=True)
    lr_min: float = setting(1.0e-5, "cosine decay from lr to lr_min over the run", range=(0, None))
    warmup_steps: int = setting(0, "linear warm-up steps", range=(0, None))
    weight_decay: float = setting(0.0, "AdamW weight decay", range=(0, None))
    grad_clip: float = setting(1.0, "gradient norm clip", range=(0, None), lo_open=True)
    save_every: int = setting(0, "checkpoint every N steps (0: only at the end)", range=(0, None))
    keep_checkpoints: int = setting(2, "newest checkpoints kept", range=(1, None))
    export: bool = setting(False, "also write a merged HF folder in <output_dir>/export")
    output_dir: str = setting(RUN_DIR, "the run folder")
