"""``earthrl bench scaling``: EarthRL's local GRPO step time against group size, turns and prompt length.

One variable at a time around a base point (group size 4, 1 turn, 512 prompt tokens; one task per
step), each point one step of :class:`~earthrl.bench.grpo_step.LocalStep` (engine generate,
score, advantages, update, LoRA push) after one warm-up step, on a real earthrl-mini-core prompt
cut to its last ``prompt_tokens`` tokens (repeated from its start when longer) and, for turns > 1, the
real observation delta of its second turn after each turn. Written as JSON (the results) and a
matplotlib plot ``scaling.png`` in the output folder (step, generate and update seconds per variable).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from earthrl.bench.grpo_step import LocalStep, bench_spec, model_lora
from earthrl.bench.inputs import bench_prompts, resolve_model

BASE = {"group_size": 4, "turns": 1, "prompt_tokens": 512}
GRID = {"group_size": (2, 4, 8), "turns": (1, 2, 3), "prompt_tokens": (256, 512, 1024)}
PARTS = ("step_s", "generate_s", "update_s")


def fit_length(ids: list[int], n: int) -> list[int]:
    """``ids`` cut to its last ``n`` tokens, or left-extended by repeating it when shorter (length ``n``)."""
    reps = -(-n // len(ids))
    return (ids * reps)[-n:]


def plot(results: dict, path: Path, grid: dict) -> Path:
    """Write the step/generate/update seconds of every grid variable as one PNG (one panel each)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(grid), figsize=(4 * len(grid), 3.2), squeeze=False)
    for ax, (var, values) in zip(axes[0], grid.items()):
        for part in PARTS:
            ax.plot(values, [results[f"{var}={v}_{part}"] for v in values], marker="o", label=part.removesuffix("_s"))
        ax.set_xlabel(var)
        ax.set_ylabel("seconds")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    fig.suptitle(f"EarthRL local GRPO step ({results['model']})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def bench_scaling(model: str = "tiny-llama", max_new_tokens: int = 16, beta: float = 0.01, dtype: str = "auto",
                  threads: int = 2, grid: dict | None = None, base: dict | None = None,
                  out_dir: Path | None = None) -> dict:
    """Step seconds at every grid point (module doc).

    Args:
        model: a fetched model name or an HF folder.
        max_new_tokens: tokens per turn (exactly).
        grid: ``{variable: values}`` with variables of :data:`BASE` (default :data:`GRID`).
        base: the point the variables move around (default :data:`BASE`).
        out_dir: folder of ``scaling.png`` (default: a new temporary folder).

    Returns:
        flat dict: ``model``, ``points``, ``<var>=<value>_<step_s|generate_s|update_s>`` and
        ``<var>=<value>_generated_tokens``, ``plot`` (the PNG's path).

    Raises:
        FileNotFoundError: the model is not fetched. ValueError: an unknown grid variable.
    """
    grid, base = dict(grid or GRID), {**BASE, **(base or {})}
    unknown = sorted((set(grid) | set(base)) - set(BASE))
    if unknown:
        raise ValueError(f"scaling grid variables {unknown}: use {', '.join(BASE)}")
    path = resolve_model(model)
    runner = LocalStep(path, dtype, model_lora(path), bench_spec(beta), max_new_tokens, threads)
    prompts = bench_prompts(runner.tokenizer, 1)
    out: dict = {"model": path.name, "max_new_tokens": max_new_tokens, "points": 0}
    try:
        def step(point: dict) -> dict:
            return runner.step([fit_length(prompts.first[0], point["prompt_tokens"])], prompts.tasks,
                               point["group_size"], point["turns"], prompts.observations[0])

        step(base)  # warm-up
        for var, values in grid.items():
            for v in values:
                r = step({**base, var: v})
                out["points"] += 1
                for part in (*PARTS, "generated_tokens"):
                    out[f"{var}={v}_{part}"] = r[part]
    finally:
        runner.close()
    folder = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="earthrl-bench-scaling-"))
    folder.mkdir(parents=True, exist_ok=True)
    out["plot"] = str(plot(out, folder / "scaling.png", grid))
    return out
