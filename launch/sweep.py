"""Comparison table at the end of a Hydra sweep (``earthrl train -m algorithm=a,b,c …``,
``earthrl eval -m agent=react,hierarchical …``).

A Hydra callback collects each job's last metrics (a training run's last step, an evaluation's report) and,
when the sweep ends, writes ``comparison.md`` and ``comparison.json`` into the sweep folder and prints the
table — the ablation table of RS-Claw-Evolution (Table III: accuracy, EIR, mean turns, Tool-In-Order) for
whatever was swept; for evaluations of multi-role agent loops also the loops' counts per trajectory and the
tokens per role.
"""

from __future__ import annotations

import hashlib
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
    "report/accuracy": "accuracy",
    "report/eir": "EIR",
    "report/avg_turns": "turns",
    "report/tool_in_order": "Tool-In-Order",
    "report/routing_accuracy": "routing accuracy",
}
PREFIXED = {"report/loop/": "{} per trajectory", "report/tokens/": "{} tokens per trajectory"}
"""Column families whose keys depend on the run (an agent loop's counts, its roles): prefix -> header."""


def report_metrics(report: dict) -> dict[str, float]:
    """An evaluation report's scalars for the table: ``report/<metric>``, the agent loop's counts
    (``report/loop/<count>``), each role's action tokens (``report/tokens/<role>``) and the routing accuracy."""
    out = {f"report/{k}": v["value"] for k, v in report.get("metrics", {}).items() if isinstance(v, dict)}
    roles = report.get("roles") or {}
    out |= {f"report/loop/{k}": v for k, v in roles.get("agent_stats", {}).items()}
    if len(roles.get("by_role", {})) > 1:
        out |= {f"report/tokens/{r}": m["action_tokens"] for r, m in roles["by_role"].items()}
    if roles.get("routing_accuracy") is not None:
        out["report/routing_accuracy"] = roles["routing_accuracy"]
    return out


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
    headers = dict(COLUMNS)
    for r in rows:  # the run-dependent families, in the order they first appear
        for key in r["metrics"]:
            prefix = next((p for p in PREFIXED if key.startswith(p)), None)
            if prefix is not None:
                headers.setdefault(key, PREFIXED[prefix].format(key[len(prefix):]))
    cols = [c for c in headers if any(c in r["metrics"] for r in rows)]
    lines = [f"common overrides: {' '.join(o for o in rows[0]['overrides'] if o in shared) or '(none)'}", "",
             "| job | " + " | ".join(headers[c] for c in cols) + " |", "|---|" + "---|" * len(cols)]
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
            value = job_return.return_value or []
            metrics = report_metrics(value) if isinstance(value, dict) else last_metrics(value)
            self.rows.append({"overrides": overrides, "metrics": metrics})
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
        from earthrl.rewards.metrics.report import strict_json  # lazy: Hydra loads this callback before any job

        # strict JSON (a metric with nothing to average is null, not a bare NaN) for every reader
        (folder / "comparison.json").write_text(json.dumps(strict_json(self.rows), indent=2, allow_nan=False))
        return table

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        """Write the final table in the sweep folder and print it."""
        folder = _sweep_dir(config)
        if not self.rows or folder is None:
            return
        table = self.write(folder)
        print(f"\nsweep comparison ({folder / 'comparison.md'}):\n{table}", flush=True)


FOLDER_NAME_MAX = 200
"""The longest folder name :func:`one_folder` returns, in UTF-8 bytes (file systems stop at 255)."""


def one_folder(value: str) -> str:
    """One folder name from Hydra's ``override_dirname``: ``tasks.data=/data/eb,tasks=earthbench`` →
    ``tasks.data=_data_eb,tasks=earthbench`` (a path's slashes would make nested folders). A name longer
    than :data:`FOLDER_NAME_MAX` bytes (a sweep over long checkpoint paths) keeps its start and ends in
    ``~`` and 16 hex digits of the whole name's SHA-1, so it stays unique and the OS accepts it."""
    name = str(value).replace("/", "_")
    raw = name.encode()
    if len(raw) <= FOLDER_NAME_MAX:
        return name
    digest = hashlib.sha1(raw).hexdigest()[:16]
    head = raw[:FOLDER_NAME_MAX - 17].decode(errors="ignore")
    return f"{head}~{digest}"


def sweep_job_dirname() -> str:
    """The running job's ``hydra.job.override_dirname`` inside a sweep (``-m``; its number when it has no
    override of its own), "" in a single run or outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized() or "MULTIRUN" not in str(HydraConfig.get().mode):
        return ""
    job = HydraConfig.get().job
    return one_folder(job.override_dirname or job.num)


def _sweep_dir(config: Any) -> Path | None:
    """The sweep folder of a Hydra config (None outside a sweep: a single run, or unit tests)."""
    try:
        if "MULTIRUN" not in str(config.hydra.mode):  # RunMode.MULTIRUN (enum) or its name
            return None
        return Path(config.hydra.sweep.dir)
    except AttributeError:
        return None
