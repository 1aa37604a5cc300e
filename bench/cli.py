"""`earthrl bench SUITE`: speed benchmarks, each measured as a ratio or overhead in one run.

Speed goals live here, never in timed tests. A suite is a list of named measurements,
each a function returning a flat dict of numbers; the suite registry maps a name to them:

    env         NDVI tool path vs bare numpy over a 10980×10980 uint16 pair (goal ratio ≤ 1.3),
                step overhead through an EnvPool actor (goal median ≤ 2 ms, idle machine),
                CodeAct sandbox start-up and per-exec overhead
    algorithms  rewards + advantages for 1024 trajectories × 8192 tokens
                (goal < 1% of a default training step)
    load        256 concurrent scripted episodes over EnvPool actors in mock mode, 1,000 in all, plus
                16 sandboxed codeact episodes: episodes/s, peak RSS per actor, nothing left after
    fuzz        fuzzed model outputs and tool arguments through env.step (--n cases, default 2000;
                goal: 0 crashes, 0 hangs) and the parsers' time ratio 32k/3.2k chars (≈ 10 linear)
    rollout     tokens/s of EarthRL's engines (every ENGINES entry) vs bare transformers generate vs
                standalone vLLM on the same earthrl-mini prompts (turn 1 and 2) and lengths, batched and
                single stream (goals: vLLM ≥ 2× HF; EarthRL vLLM ≥ 90 % of standalone); a training step's
                multi-turn rollout vs the same engine's batched tokens/s (goal ≥ 0.7)
    train       EarthRL's local GRPO step vs TRL GRPOTrainer on the same single-turn work (goal ≤ 0.7×)
    tokens      CodeAct vs JSON action, observation and episode tokens of the reference workflows
    scaling     step time against group size, turns and prompt length (JSON + scaling.png)
    learn       every algorithm preset trains the tiny model on synthetic envs from chance to a goal, and the
                negative controls (advantage sign flipped, response mask one token early) must miss it
    all         every suite above in turn, then each ratio against its goal (GOALS)
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm
from tqdm.contrib import DummyTqdmFile

from earthrl.envs.registry import Registry, import_target
from earthrl.launch.arg_parser import OneLineParser

BENCHES: Registry = Registry("benchmark suite")
"""Suite name -> [(measurement name, "module:function", {CLI option -> keyword})]."""
BENCHES.register("env", [
    ("ndvi", "earthrl.bench.ndvi:bench_ndvi", {"size": "size"}),
    ("env_step", "earthrl.bench.env_step:bench_env_step", {"n": "n"}),
    ("sandbox", "earthrl.bench.sandbox_exec:bench_sandbox", {"n": "n"}),
])
BENCHES.register("fuzz", [
    ("env_step", "earthrl.bench.fuzz:bench_fuzz", {"n": "n"}),
])
BENCHES.register("algorithms", [
    ("rewards_advantages", "earthrl.bench.rewards_advantages:bench_algorithms", {"batch": "batch", "tokens": "tokens"}),
])
BENCHES.register("load", [
    ("envpool_load", "earthrl.bench.envpool_load:bench_load", {"n": "episodes", "concurrency": "concurrency"}),
])
MODEL_OPTIONS = {"model": "model", "rows": "rows", "max_new_tokens": "max_new_tokens"}
BENCHES.register("rollout", [
    ("engines", "earthrl.bench.engine_speed:bench_rollout", MODEL_OPTIONS),
    ("in_training", "earthrl.bench.rollout_in_training:bench_in_training",
     {"model": "model", "group_size": "group_size", "max_new_tokens": "max_new_tokens"}),
])
BENCHES.register("train", [
    ("grpo_step", "earthrl.bench.grpo_step:bench_train",
     {**MODEL_OPTIONS, "group_size": "group_size", "steps": "steps"}),
])
BENCHES.register("tokens", [
    ("codeact_vs_json", "earthrl.bench.action_tokens:bench_tokens", {"model": "model", "n": "n"}),
])
BENCHES.register("learn", [
    ("learn", "earthrl.bench.learn:bench_learn",
     {"model": "model", "algorithms": "algorithms", "envs": "envs", "steps": "steps", "group_size": "group_size",
      "controls": "controls"}),
])
BENCHES.register("scaling", [
    ("local_step", "earthrl.bench.step_scaling:bench_scaling",
     {"model": "model", "max_new_tokens": "max_new_tokens", "out_dir": "out_dir"}),
])

MINIMUMS = {"size": 2, "n": 1, "batch": 1, "tokens": 1, "rows": 1, "max_new_tokens": 1, "group_size": 2, "steps": 1,
            "concurrency": 1}
"""CLI option -> its smallest value (:func:`check_options`; group size 2: GRPO's advantages need two samples)."""


def suites_using(option: str) -> list[str]:
    """The suites of :data:`BENCHES` one of whose measurements takes CLI ``option``, sorted."""
    return sorted(s for s in BENCHES if any(option in options for _, _, options in BENCHES[s]))


def check_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, before any work starts, an option below its :data:`MINIMUMS`, an option the chosen suite
    does not use (naming the suites that do), and an ``--out`` whose folder cannot be created or written.

    Raises:
        SystemExit: 2, through ``parser.error`` (one ``earthrl bench: error: argument --…`` line).
    """
    for option, value in vars(args).items():
        flag = "--" + option.replace("_", "-")
        if option in ("suite", "out") or value is None:
            continue
        if option in MINIMUMS and value < MINIMUMS[option]:
            parser.error(f"argument {flag}: must be at least {MINIMUMS[option]}, got {value}")
        users = suites_using(option)
        if args.suite != "all" and args.suite not in users:
            parser.error(f"argument {flag}: bench {args.suite} does not use it; it is an option of {', '.join(users)}")
    if args.out is not None:
        try:
            if args.out.is_dir():
                raise IsADirectoryError(21, "it is a folder; name a .json file")
            args.out.parent.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=args.out.parent).close()
        except OSError as exc:
            parser.error(f"argument --out: cannot write {args.out} ({exc.strerror or exc}); choose a writable path")


GOALS = [  # (what, suite, measurement, metric, comparison, target); {key}: the measurement's value
    ("EarthRL vLLM / EarthRL HF tokens/s", "rollout", "engines", "vllm_over_hf", ">=", 2.0),
    ("EarthRL vLLM / standalone vLLM tokens/s", "rollout", "engines", "earthrl_vllm_over_standalone", ">=", 0.9),
    ("training rollout ({mode}) / batched tokens/s, {engine} engine", "rollout", "in_training",
     "in_training_over_batched", ">=", 0.7),
    ("local GRPO step / TRL GRPOTrainer step", "train", "grpo_step", "earthrl_over_trl", "<=", 0.7),
    ("rewards + advantages / measured local step", "train", "grpo_step", "rewards_advantages_share", "<", 0.01),
    ("rewards + advantages ({batch} x {tokens}) / 330 s step", "algorithms", "rewards_advantages", "share_of_step",
     "<", 0.01),
    ("EnvPool step overhead, median ms", "env", "env_step", "median_overhead_ms", "<=", 2.0),
    ("NDVI tool / bare numpy time", "env", "ndvi", "ratio", "<=", 1.3),
]
COMPARE = {">=": float.__ge__, "<=": float.__le__, "<": float.__lt__}


def goal_table(results: dict[str, dict[str, dict]]) -> list[dict]:
    """Each goal of :data:`GOALS` whose suite ran: ``{"goal", "value", "target", "met"}`` (``goal``: the label
    with the measurement's ``{key}`` values filled in, ``?`` when missing), or ``"skipped"``
    with the measurement's ``*_skipped`` / ``error`` reasons when its metric is missing."""
    rows = []
    for what, suite, name, metric, op, target in GOALS:
        if suite not in results:
            continue
        r = results[suite].get(name) or results[suite].get("error", {})
        label = what.format_map(collections.defaultdict(lambda: "?", r))  # the sizes actually measured
        row = {"goal": label, "metric": f"{suite}/{name}/{metric}", "target": f"{op} {target:g}"}
        if isinstance(r.get(metric), (int, float)):
            row.update(value=float(r[metric]), met=COMPARE[op](float(r[metric]), target))
        else:
            row["skipped"] = "; ".join(f"{k}: {v}" for k, v in r.items() if k.endswith("_skipped") or k == "error") \
                or f"{metric} was not measured"
        rows.append(row)
    return rows


def print_goals(rows: list[dict]) -> None:
    """One line per goal: value, target and met / MISSED / skipped (why)."""
    for row in rows:
        state = ("met" if row["met"] else "MISSED") if "value" in row else f"skipped ({row['skipped']})"
        value = _fmt(row["value"]) if "value" in row else "-"
        print(f"goal | {row['goal']}: {value} (goal {row['target']}) {state}", flush=True)


def run_suite(suite: str, options: dict, bar=None) -> dict[str, dict]:
    """Run every measurement of ``suite``; returns ``{measurement: {metric: value}}``.

    Args:
        options: CLI values (``size``, ``n``, ``batch``, ``tokens``, ``model``, ``rows``, …, ``out_dir``);
            None means the function's default.
        bar: a ``tqdm`` progress bar advanced by one per measurement done (None: none).

    Raises:
        KeyError: unknown suite (lists the available ones).
    """
    if suite not in BENCHES:
        raise KeyError(BENCHES.unknown(suite))
    results: dict[str, dict] = {}
    for name, target, option_map in BENCHES[suite]:
        kwargs = {kw: options[opt] for opt, kw in option_map.items() if options.get(opt) is not None}
        t0 = time.perf_counter()
        out = import_target(target)(**kwargs)
        results[name] = {**out, "bench_wall_s": round(time.perf_counter() - t0, 3)}
        print(f"{suite}/{name}: " + ", ".join(f"{k}={_fmt(v)}" for k, v in results[name].items()), flush=True)
        if bar is not None:
            bar.update(1)
    return results


def _fmt(v) -> str:
    if isinstance(v, dict) or (isinstance(v, list) and any(isinstance(x, dict | list) for x in v)):
        return f"<{len(v)} entries>"  # e.g. bench learn's runs: they have their own lines and the --out file
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _names(text: str) -> list[str]:
    """A comma-separated option value as its non-empty names (``"grpo, vg_hrl"`` → ``["grpo", "vg_hrl"]``)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("name at least one, comma-separated")
    return names


def main(argv: list[str]) -> None:
    """CLI of ``earthrl bench``; writes the results as JSON when ``--out`` is given."""
    parser = OneLineParser(prog="earthrl bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", choices=[*sorted(BENCHES), "all"])
    parser.add_argument("--size", type=int, help="env: raster side for the NDVI benchmark (default 10980)")
    parser.add_argument("--n", type=int, help="env: repetitions for step/exec overheads (default 200); fuzz: cases (default 2000); load: episodes (default 1000)")
    parser.add_argument("--batch", type=int, help="algorithms: trajectories (default 1024)")
    parser.add_argument("--tokens", type=int, help="algorithms: tokens per trajectory (default 8192)")
    parser.add_argument("--concurrency", type=int, help="load: episodes open at once (default 256)")
    parser.add_argument("--model", help="rollout/train/tokens (default qwen2.5-coder-0.5b), scaling and learn (default "
                        "tiny-llama): a fetched model name or an HF folder; tokens: --n tasks (default 12)")
    parser.add_argument("--rows", type=int, help="rollout: prompts per set (default 4); train: prompts per step (default 1)")
    parser.add_argument("--max-new-tokens", type=int, help="rollout/train (default 32), scaling (16): tokens per row; "
                        "rollout's in-training measurement: per turn (default algorithm.sampling.max_new_tokens)")
    parser.add_argument("--group-size", type=int, help="train: samples per prompt (default 4); rollout's "
                        "in-training measurement: samples per task (default algorithm.group_size); learn: per "
                        "question and step (default 8)")
    parser.add_argument("--steps", type=int, help="train: steps per side, the first a warm-up (default 3); learn: "
                        "updates per run (default each env's budget)")
    parser.add_argument("--algorithms", type=_names, help="learn: algorithm presets, comma-separated (default every "
                        "conf/algorithm/*.yaml)")
    parser.add_argument("--envs", type=_names, help="learn: synthetic envs, comma-separated (default each preset's: "
                        "one_turn, two_turn, final_only, and tap for TAP)")
    parser.add_argument("--no-controls", dest="controls", action="store_const", const=False,
                        help="learn: skip the negative controls")
    parser.add_argument("--out", type=Path, help="write the results to this JSON file (scaling: scaling.png beside it)")
    args = parser.parse_args(argv)
    check_options(parser, args)
    from earthrl.launch.lifecycle import RunLifecycle  # lazy: psutil at import; CLI startup stays fast

    with RunLifecycle("bench", argv):  # Ctrl-C / SIGTERM stop the benchmarks and everything they started
        _run(args)


def _run(args: argparse.Namespace) -> None:
    """The suites ``args`` name, their goal lines and the ``--out`` file (:func:`main`'s job)."""
    from earthrl.launch import lifecycle  # lazy: psutil at import; CLI startup stays fast

    options = {**vars(args), "out_dir": args.out.parent if args.out else None}
    suites = sorted(BENCHES) if args.suite == "all" else [args.suite]
    by_suite: dict[str, dict] = {}
    terminal = sys.stdout
    bar = tqdm(total=sum(len(BENCHES[s]) for s in suites), desc="bench", unit="measurement", file=terminal,
               dynamic_ncols=True)
    # the measurements' own lines go above the bar (tqdm's documented stdout redirection); an interruption
    # closes the bar first, so the line saying where it stopped is a line of its own
    with contextlib.closing(bar), contextlib.redirect_stdout(DummyTqdmFile(terminal)):
        for suite in suites:
            lifecycle.at(f"bench {suite}")
            before = bar.n
            try:
                by_suite[suite] = run_suite(suite, options, bar)
            except (FileNotFoundError, ValueError, KeyError, RuntimeError) as exc:
                if args.suite != "all":
                    bar.close()
                    raise SystemExit(f"earthrl bench {suite}: {exc}") from None
                by_suite[suite] = {"error": {"error": f"{type(exc).__name__}: {exc}", "ok": False}}
                bar.update(len(BENCHES[suite]) - (bar.n - before))  # its measurements left count as done
                print(f"{suite}: failed ({type(exc).__name__}: {exc})", flush=True)
    goals = goal_table(by_suite)
    print_goals(goals)
    results = by_suite[args.suite] if args.suite != "all" else by_suite
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"suite": args.suite, "machine": platform.platform(),
                                        "processor": platform.processor(), "results": results, "goals": goals},
                                       indent=2))
        print(f"results: {args.out}")
    failed = [f"{suite}/{name}" for suite, rs in by_suite.items() for name, r in rs.items() if r.get("ok") is False]
    if failed:  # a benchmark whose own check failed (e.g. bench load found a leak) fails the command
        raise SystemExit(f"earthrl bench {args.suite}: check failed in {', '.join(failed)} (ok=False above)")
