"""The model card of an export (``README.md`` in the export folder, Hugging Face model-card style: YAML front
matter, then Markdown): base model, adapters, training stages and data, held-out metrics with their 95%
intervals, the ``vllm serve`` command, the run's config and EarthRL's version.

Every number comes from a file the card names: the metrics from the run's held-out evaluation report of the
exported step (``<run>/heldout/step_NNNNNN/report.json``, :mod:`earthrl.rewards.metrics.report`, percentile
bootstrap intervals, Efron & Tibshirani 1993, ch. 13); a checkpoint without one says "not evaluated".
The stages follow ``trainer.init_from`` back to the first checkpoint (an SFT warm start, then RL).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shlex
from pathlib import Path

import yaml

from earthrl.launch.serving import serve_args, served_name, tool_parser
from earthrl.models.export import EXPORT_MARKER

CARD = "README.md"
MAX_STAGES = 8
"""Warm starts followed back at most (a chain of checkpoints that names itself stops there)."""
LICENSES = {"Apache-2.0": "apache-2.0", "MIT": "mit"}
"""Licenses a fetched model's registry description names (``earthrl_model.json``), as Hugging Face ids."""


def earthrl_version() -> str:
    """The installed EarthRL distribution's version ('unknown' when it is not installed)."""
    try:
        return importlib.metadata.version("earthrl")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def read_meta(ckpt: Path | None) -> dict:
    """``meta.json`` of checkpoint ``ckpt`` ({} when there is none, e.g. a verl adapter folder)."""
    path = Path(ckpt) / "meta.json" if ckpt else None
    if path is None or not path.is_file():
        return {}
    meta = json.loads(path.read_text())
    return meta if isinstance(meta, dict) else {}


def base_license(base_dir: Path) -> str | None:
    """The base model's license as a Hugging Face id, from its registry entry (``earthrl_model.json``'s
    description); None when the entry names none."""
    entry = Path(base_dir) / "earthrl_model.json"
    description = json.loads(entry.read_text()).get("description", "") if entry.is_file() else ""
    return next((hf for name, hf in LICENSES.items() if re.search(rf"\b{re.escape(name)}\b", description)), None)


def heldout_report(ckpt: Path, step: int | None) -> Path:
    """Where the run's held-out report of ``step`` is: ``<run>/heldout/step_NNNNNN/report.json`` for a checkpoint
    ``<run>/checkpoints/step_NNNNNN`` (the file may not exist)."""
    run = Path(ckpt).resolve().parent.parent
    return run / "heldout" / f"step_{int(step or 0):06d}" / "report.json"


def stage_of(meta: dict, ckpt: Path) -> dict:
    """One training stage of checkpoint ``ckpt`` from its ``meta.json``: ``{"kind": "SFT"|"RL", "checkpoint",
    "step", "what", "data", "init_from"}`` (``what``/``data``: one line each)."""
    cfg = meta.get("config") or {}
    tasks = cfg.get("tasks") or {}
    env = cfg.get("env") or {}
    suite = f"task suite {tasks.get('name')} (split {tasks.get('split')}, data {tasks.get('data')})"
    if "sft" in cfg:
        sft = cfg["sft"] or {}
        data = (sft.get("data") or {}).get("path") or f"trajectories built from the {suite} into {ckpt.parent.parent / 'data'}"
        what = f"supervised fine-tuning (sft.mode={sft.get('mode')}, action format {env.get('action_format')})"
        init = None
    else:
        algo = cfg.get("algorithm") or {}
        loss = (algo.get("policy_loss") or {}).get("name")
        what = (f"reinforcement learning: algorithm {algo.get('name')} (estimator {algo.get('estimator')}, loss {loss}, "
                f"group size {algo.get('group_size')}, reward {algo.get('reward')}, action format {env.get('action_format')})")
        data = suite
        init = (cfg.get("trainer") or {}).get("init_from") or _warm_start_of(ckpt.parent.parent)
    return {"kind": "SFT" if "sft" in cfg else "RL", "checkpoint": str(ckpt), "step": meta.get("step"), "what": what,
            "data": data, "init_from": init}


def _warm_start_of(run: Path) -> str | None:
    """The checkpoint a run started from when ``trainer.warm_start`` chose it (``<run>/init_from.json``), or None."""
    try:
        return json.loads((run / "init_from.json").read_text()).get("checkpoint")
    except (OSError, ValueError, AttributeError):
        return None


def stages(ckpt: Path | None) -> list[dict]:
    """The training stages that made ``ckpt``, first stage first (:func:`stage_of`, following ``init_from``)."""
    found, at = [], Path(ckpt).resolve() if ckpt else None
    while at is not None and len(found) < MAX_STAGES:
        meta = read_meta(at)
        if not meta.get("config"):
            break
        found.append(stage_of(meta, at))
        at = Path(found[-1]["init_from"]) if found[-1]["init_from"] else None
    return found[::-1]


def _number(value) -> str:
    return "—" if value is None else f"{float(value):.4f}"


def metric_rows(report: dict) -> list[str]:
    """Markdown table rows of a report's overall metrics: ``| name | value | [low, high] | n |`` (4 decimals;
    a metric no trajectory had is "not computed")."""
    rows = []
    for name, m in report.get("metrics", {}).items():
        if not isinstance(m, dict):
            continue
        if m.get("value") is None:
            rows.append(f"| {name} | not computed | — | {m.get('n', 0)} |")
            continue
        low, high = m.get("ci95") or (None, None)
        rows.append(f"| {name} | {_number(m['value'])} | [{_number(low)}, {_number(high)}] | {m.get('n')} |")
    return rows


def evaluation_section(ckpt: Path | None, step: int | None) -> list[str]:
    """The card's "Evaluation" lines: the held-out report's metrics and where they came from, or "not evaluated"."""
    lines = ["## Evaluation", ""]
    report_path = heldout_report(ckpt, step) if ckpt and read_meta(ckpt) else None
    if report_path is None or not report_path.is_file():
        where = f" (no {report_path})" if report_path else ""
        lines += [f"Not evaluated: no held-out evaluation report for this checkpoint{where}. "
                  f"`earthrl eval eval.checkpoint={ckpt}` writes one.", ""]
        return lines
    report = json.loads(report_path.read_text())
    lines += [f"Source: `{report_path}` — the run's held-out evaluation after step {step}: "
              f"{report.get('n_trajectories')} trajectories over {report.get('n_tasks')} tasks "
              f"(metrics mode {report.get('metrics_mode')}); intervals are percentile-bootstrap 95% intervals.", "",
              "| metric | value | 95% interval | n |", "|---|---|---|---|", *metric_rows(report), ""]
    return lines


def write_card(out_dir: Path, ckpt: Path | None) -> Path:
    """Record the serving settings in ``out_dir/earthrl_export.json`` (``tool_call_parser``,
    ``tool_call_parser_reason``, ``action_format``, ``served_model_name``) and write the model card
    ``out_dir/README.md`` (module doc).

    Args:
        out_dir: a finished export folder (``earthrl_export.json``).
        ckpt: the checkpoint it was exported from (None or a folder without ``meta.json``: a verl adapter).

    Returns:
        the card's path.
    """
    out_dir = Path(out_dir)
    record = json.loads((out_dir / EXPORT_MARKER).read_text())
    meta = read_meta(ckpt)
    cfg = meta.get("config") or {}
    action_format = (cfg.get("env") or {}).get("action_format")
    base_dir = Path(record["base_model"])
    merged = record.get("merged", True)
    parser = tool_parser(out_dir if merged else base_dir, action_format)
    record.update(action_format=action_format, tool_call_parser=parser.name, tool_call_parser_reason=parser.reason,
                  served_model_name=served_name(out_dir))
    (out_dir / EXPORT_MARKER).write_text(json.dumps(record, indent=2) + "\n")

    base_name = (cfg.get("model") or {}).get("name") or base_dir.name
    license_id = base_license(base_dir)
    chain = stages(ckpt)
    front = {"base_model": base_name, "library_name": "transformers" if merged else "peft",
             "pipeline_tag": "text-generation",
             "tags": ["earthrl", "remote-sensing", "tool-calling", "lora",
                      *sorted({s["kind"].lower() for s in chain})]}
    if license_id:
        front["license"] = license_id
    adapters = (f"one LoRA adapter (r={record.get('lora_r')}, alpha={record.get('lora_alpha')}, target modules "
                f"{', '.join(record.get('target_modules') or [])}) merged into the weights ({record.get('dtype')}); "
                "the adapter itself is in `adapter/`" if merged else
                f"one LoRA adapter per role, not merged: {', '.join(record.get('adapters', []))} in `adapters/<name>/` "
                f"(r={record.get('lora_r')}, alpha={record.get('lora_alpha')})")
    command = "vllm serve " + shlex.join(serve_args(out_dir, record))
    lines = ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "",
             f"# {served_name(out_dir)}", "",
             f"A remote-sensing tool-calling agent trained with EarthRL {earthrl_version()} from {base_name}.", "",
             "## Model", "",
             f"- base model: {base_name} (`{base_dir}`), license: {license_id or 'not named in its registry entry'}",
             f"- adapters: {adapters}",
             f"- checkpoint: `{record.get('checkpoint')}` (step {record.get('step')})",
             f"- EarthRL version: {earthrl_version()}", "",
             "## Training", ""]
    if chain:
        for i, s in enumerate(chain, 1):
            lines += [f"{i}. {s['kind']}: {s['what']}; step {s['step']}; data: {s['data']}; checkpoint `{s['checkpoint']}`"]
    else:
        lines += ["Not recorded: the checkpoint has no meta.json with the run's config (a verl adapter)."]
    lines += ["", *evaluation_section(ckpt, meta.get("step")),
              "## Serving", "", "```bash", command, "```", "",
              f"Tool-call parser: {parser.name or 'none'} — {parser.reason}.", ""]
    if cfg:
        lines += ["## Config", "", "The run's resolved config (from the checkpoint's meta.json):", "", "```yaml",
                  yaml.safe_dump(cfg, sort_keys=False).strip(), "```", ""]
    card = out_dir / CARD
    card.write_text("\n".join(lines))
    return card
