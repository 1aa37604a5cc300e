"""``auto`` sizes of a training job, by the same machine rule as ``model.dtype=auto``.

Where the policy computes in bfloat16 (a GPU, or a CPU with AVX512-BF16/AMX) ``make train`` runs the
masked failure-aware warm start ``sft=warm`` (12 SFT steps) and 3 GRPO steps. Where it computes in
float32 (an AVX2-only CPU, on which bf16 is emulated) every learner step costs about 3× more and the
same job does not finish in 30 minutes on 2 cores, so ``auto`` picks the shorter oracle warm start
``sft=warm_oracle`` (the oracle trajectories of 16 tasks: 4 steps of 4, one micro-batch a step) and one GRPO
step. An AVX2-only float32 SFT step measured about 1.25-1.5x the same float32 step on an AVX512 machine, so the
float32 job is sized to take at most about 20 minutes of compute on an AVX512 machine. ``make train`` passes
``trainer.warm_start=auto trainer.steps=auto``; any other value is used as given.
"""

from __future__ import annotations

from omegaconf import DictConfig, open_dict

from earthrl.launch.compute import job_dtype
from earthrl.models.device import DEVICES
from earthrl.models.dtype import DTYPES

TIME_BUDGET_MIN = 30
"""Minutes ``make train`` may take from a fresh clone on a 2-core machine (install and fetch included)."""
#: resolved dtype -> (measured minutes of ``make train`` from a fresh clone with an empty cache, where);
#: the figures ``earthrl doctor`` reports (docs/benchmarks.md, "make train")
MEASURED = {
    "bfloat16": (27.9, "from a fresh clone on an idle 2-core AVX512-BF16/AMX machine"),
    "float32": (31.2, "with model.dtype=float32 forced on a 2-core AVX512-BF16 machine, with a 24-task warm start "
                      "and 2 GRPO steps; today's 16 tasks and 1 step are estimated at 25-29 min on an AVX2-only "
                      "machine (not measured there)"),
}
#: resolved dtype -> the values ``auto`` stands for (float16, set by hand for a GPU without bf16, as bfloat16)
SIZES = {
    "bfloat16": {"trainer.warm_start": "warm", "trainer.steps": 3},
    "float32": {"trainer.warm_start": "warm_oracle", "trainer.steps": 1},
}


def resolve_auto_sizes(cfg: DictConfig) -> list[str]:
    """Replace each ``auto`` among the keys of :data:`SIZES` in ``cfg`` (in place) by the value for the
    dtype ``model.dtype`` resolves to on this machine.

    Returns:
        one line per key replaced, e.g. ``trainer.steps=auto -> 2 (model.dtype=auto -> float32: …)``;
        [] when none was ``auto``.
    """
    from omegaconf import OmegaConf


    keys = [k for k in SIZES["float32"] if str(OmegaConf.select(cfg, k)) == "auto"]
    if not keys or cfg.model.dtype not in DTYPES or cfg.cluster.device not in DEVICES:
        return []  # a bad model.dtype or cluster.device: the config check names it
    dtype, why = job_dtype(cfg)
    lines = []
    with open_dict(cfg):
        for key in keys:
            value = SIZES.get(dtype, SIZES["bfloat16"])[key]  # float16: a GPU, as bfloat16
            OmegaConf.update(cfg, key, value)
            lines.append(f"{key}=auto -> {value} (model.dtype={cfg.model.dtype} -> {dtype}: {why})")
    return lines
