"""`earthrl bench SUITE`: speed benchmarks, each measured as a ratio or overhead in one run.

Speed goals live here, never in timed tests. A suite is a list of named measurements,
each a function returning a flat dict of numbers; the suite registry maps a name to them:

    env         NDVI tool path vs bare numpy over a 10980×10980 uint16 pair (goal ratio ≤ 1.3),
                step overhead through an EnvPool actor (goal median ≤ 5 ms),
                CodeAct sandbox start-up and per-exec overhead
    algorithms  rewards + advantages for 1024 trajectories × 8192 tokens
                (goal < 1% of a default training step)
    load        256 concurrent scripted episodes over EnvPool actors in mock mode, 1,000 in all, plus
                16 sandboxed codeact episodes: episodes/s, peak RSS per actor, nothing left after
    fuzz        fuzzed model outputs and tool arguments through env.step (--n cases, default 2000;
                goal: 0 crashes, 0 hangs) and the parsers' time ratio 32k/3.2k chars (≈ 10 linear)
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from earthrl.envs.registry import Registry, import_target

BENCHES: Registry = Registry("benchmark suite")
"""Suite name -> [(measurement name, "module:function", {CLI option -> keyword})]."""
BENCHES.register("env", [
    ("ndvi", "earthrl.envs.tools.bench_ndvi:bench_ndvi", {"size": "size"}),
    ("env_step", "earthrl.envs.core.bench_step:bench_env_step", {"n": "n"}),
    ("sandbox", "earthrl.envs.sandbox.bench:bench_sandbox", {"n": "n"}),
])
BENCHES.register("fuzz", [
    ("env_step", "earthrl.envs.core.bench_fuzz:bench_fuzz", {"n": "n"}),
])
BENCHES.register("algorithms", [
    ("rewards_advantages", "earthrl.algorithms.bench:bench_algorithms", {"batch": "batch", "tokens": "tokens"}),
])
BENCHES.register("load", [
    ("envpool_load", "earthrl.envs.core.bench_load:bench_load", {"n": "episodes", "concurrency": "concurrency"}),
])


def run_suite(suite: str, options: dict[str, int | None]) -> dict[str, dict]:
    """Run every measurement of ``suite``; returns ``{measurement: {metric: value}}``.

    Args:
        options: CLI values (``size``, ``n``, ``batch``, ``tokens``); None means the function's default.

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
    return results


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def main(argv: list[str]) -> None:
    """CLI of ``earthrl bench``; writes the results as JSON when ``--out`` is given."""
    parser = argparse.ArgumentParser(prog="earthrl bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", choices=sorted(BENCHES))
    parser.add_argument("--size", type=int, help="env: raster side for the NDVI benchmark (default 10980)")
    parser.add_argument("--n", type=int, help="env: repetitions for step/exec overheads (default 200); fuzz: cases (default 2000); load: episodes (default 1000)")
    parser.add_argument("--batch", type=int, help="algorithms: trajectories (default 1024)")
    parser.add_argument("--tokens", type=int, help="algorithms: tokens per trajectory (default 8192)")
    parser.add_argument("--concurrency", type=int, help="load: episodes open at once (default 256)")
    parser.add_argument("--out", type=Path, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    results = run_suite(args.suite, vars(args))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"suite": args.suite, "machine": platform.platform(),
                                        "processor": platform.processor(), "results": results}, indent=2))
        print(f"results: {args.out}")
    failed = [name for name, r in results.items() if r.get("ok") is False]
    if failed:  # a benchmark whose own check failed (e.g. bench load found a leak) fails the command
        raise SystemExit(f"earthrl bench {args.suite}: check failed in {', '.join(failed)} (ok=False above)")
