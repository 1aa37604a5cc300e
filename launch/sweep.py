"""Comparison table at the end of a Hydra sweep (``earthrl train -m algorithm=a,b,c …``).

A Hydra callback collects each job's last metrics and, when the sweep ends, writes
``comparison.md`` and ``comparison.json`` into the sweep folder and prints the table — the
ablation table of RS-Claw-Evolution (Table III: accuracy, EIR, mean turns, Tool-In-Order)
for whatever was swept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

# table columns: metric key in a step's metrics -> header
COLUMNS = {
    "heldout/accuracy": "held-out accuracy",
    "heldout/eir": "held-out EIR",
    "heldout/avg_turns": "held-out turns",
    "heldout/tool_in_order": "held-out Tool-In-Order",
    "eval/accuracy": "train accuracy (last step)",
    "rollout/error_turn_rate": "train EIR (last step)",
    "rollout/mean_turns": "train turns (last step)",
    "reward/mean": "train reward (last step)",
    "time/step_s": "s/step",
}


def last_metrics(history: list[dict]) -> dict[str, float]:
    """Latest value of every key over a run's per-step metrics (held-out metrics appear only on
    the steps that evaluated)."""
    out: dict[str, float] = {}
    for m in history:
        out.update({k: v for k, v in m.items() if isinstance(v, (int, float))})
    return out


def comparison_markdown(rows: list[dict]) -> str:
    """Markdown table, one row per job (``{"overrides": [str], "metrics": {...}, "error"?}``),
    labelled by the overrides that differ between jobs; the shared ones head the table."""
    shared = set.intersection(*(set(r["overrides"]) for r in rows)) if rows else set()
    cols = [c for c in COLUMNS if any(c in r["metrics"] for r in rows)]
    lines = [f"common overrides: {' '.join(o for o in rows[0]['overrides'] if o in shared) or '(none)'}", "",
             "| job | " + " | ".join(COLUMNS[c] for c in cols) + " |", "|---|" + "---|" * len(cols)]
    for r in rows:
        label = " ".join(o for o in r["overrides"] if o not in shared) or "default"
        cells = [f"{r['metrics'][c]:.3f}" if c in r["metrics"] else "–" for c in cols]
        if "error" in r:
            cells = [f"failed: {r['error']}"] + [""] * (len(cols) - 1)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


class ComparisonTable(Callback):
    """Hydra callback: remember each job's final metrics; write the comparison when the sweep ends."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        """Store the job's overrides and last metrics (a failed job is listed with its error) and
        rewrite the table so far, so that a sweep stopped by a failing job still leaves one."""
        overrides = list(job_return.overrides or [])
        try:
            history = job_return.return_value or []
            self.rows.append({"overrides": overrides, "metrics": last_metrics(history)})
        except Exception as exc:  # the job raised: Hydra re-raises on return_value access
            self.rows.append({"overrides": overrides, "metrics": {}, "error": f"{type(exc).__name__}: {exc}"})
        folder = _sweep_dir(config)
        if folder is not None:
            self.write(folder)

    def write(self, folder: Path) -> str:
        """Write ``comparison.md``/``.json`` into ``folder``; returns the Markdown table."""
        folder.mkdir(parents=True, exist_ok=True)
        table = comparison_markdown(self.rows)
        (folder / "comparison.md").write_text(table)
        (folder / "comparison.json").write_text(json.dumps(self.rows, indent=2))
        return table

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        """Write the final table in the sweep folder and print it."""
        folder = _sweep_dir(config)
        if not self.rows or folder is None:
            return
        table = self.write(folder)
        print(f"\nsweep comparison ({folder / 'comparison.md'}):\n{table}", flush=True)


def _sweep_dir(config: Any) -> Path | None:
    """The sweep folder of a Hydra config (None outside a sweep: a single run, or unit tests)."""
    try:
        if "MULTIRUN" not in str(config.hydra.mode):  # RunMode.MULTIRUN (enum) or its name
            return None
        return Path(config.hydra.sweep.dir)
    except AttributeError:
        return None
