"""``earthrl sft-data build``: write a JSONL of SFT trajectories (oracle, failure-aware, teacher, teacher loop, planner or SimCRAFT's synthesis).

    earthrl sft-data build --source oracle  --format json --out data/oracle.jsonl
    earthrl sft-data build --source failure --format hierarchical --out data/failure.jsonl
    earthrl sft-data build --source planner --out data/planner.jsonl
    earthrl sft-data build --source teacher --engine openai --base-url http://127.0.0.1:8000/v1 \\
        --model Qwen3-32B --samples 2 --out data/teacher.jsonl
    earthrl sft-data build --source teacher --engine hf --model qwen2.5-coder-0.5b --out data/teacher.jsonl
    earthrl sft-data build --source teacher_loop --engine hf --model qwen2.5-coder-0.5b --attempts 2 \\
        --out data/loop.jsonl                                                # + data/loop.counts.json
    earthrl sft-data build --source simcraft --mode both --out data/simcraft.jsonl   # + data/simcraft.rejections.json
    earthrl sft-data score data/simcraft.jsonl      # PSR, TSA, AEM, Hal.Rate, Fmt.Err against the reference workflows
    earthrl sft-data build --source expert_tuning --out data/expert.jsonl   # + data/expert.heldout.jsonl

Every trajectory is played in a real :class:`~earthrl.envs.core.env.RSEnv` (execute mode, the env config
``conf/env/<format>.yaml``) over the train split of ``--tasks``; answers are judged with the rewards'
check (:func:`earthrl.rewards.outcome.answer_correct`) and only correct ones are written. ``earthrl sft``
builds the oracle / failure-aware / planner data itself when ``sft.data.path`` is null
(:func:`earthrl.launch.sft_data.build_records`). ``--source planner`` writes Earth-Agent-Pro's planner records (skill
binding and workflow skeleton) and executor records (one json call per node) of ``agent=planner_executor``
(:mod:`earthrl.rollout.sft_planner`); with ``--max-tasks`` it takes the tasks round-robin over their workflows. ``--source teacher_loop`` re-explores each
task the teacher fails up to ``--attempts`` times with a hint made from its real error observation
(:mod:`earthrl.rollout.sft_teacher_loop`; ``hf``/``vllm`` run ``--model`` in this process) and writes what became
of every task (kept first try, kept after a hint, dropped wrong, dropped without an answer, the hints' classes)
to ``<out stem>.counts.json`` beside the output.
``--source simcraft`` writes SimCRAFT's synthesised episodes (expert and/or novice requests, a clarification turn for
novice ones), each replayed by the mock engine before it is kept (:mod:`earthrl.rollout.sft_simcraft`); the
rejections by reason go to ``<out stem>.rejections.json``. ``earthrl sft-data score`` computes SimCRAFT's planning
metrics of a corpus (:mod:`earthrl.rewards.metrics.corpus`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from omegaconf import DictConfig

from earthrl.envs.errors import ConfigError
from earthrl.launch.arg_parser import OneLineParser
from earthrl.launch.job_inputs import data_root, load_tasks
from earthrl.launch.overrides import CONF_DIR, compose_job
from earthrl.launch.sft_data import build_records, counts_text
from earthrl.launch.sft_teacher_chat import TEACHER_ENGINES
from earthrl.rollout.sft_data import SOURCES, write_jsonl
from earthrl.rollout.sft_expert import SOURCE as EXPERT
from earthrl.rollout.sft_expert import build_expert
from earthrl.rollout.sft_planner import spread
from earthrl.rollout.sft_simcraft import MODE_CHOICES, REJECT_REASONS
from earthrl.rollout.sft_teacher import EndpointError
from earthrl.rollout.sft_teacher_loop import SOURCE as LOOP


def compose_for(action_format: str, overrides: list[str]) -> DictConfig:
    """The ``earthrl sft`` config with ``env=<action_format>`` and ``overrides`` (for the data CLI)."""
    from hydra import initialize_config_dir  # lazy: hydra at import; CLI startup stays fast

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose_job("sft", [f"env={action_format}", *overrides])


def _positive(text: str) -> int:
    """``--max-tasks``: a whole number of tasks, 1 or more (argparse type)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text}: give a number of tasks, 1 or more (leave it out for every task)")
    return n


def main(argv: list[str]) -> int:
    """Entry point of ``earthrl sft-data``; returns the exit status (2 on a usage error)."""
    p = OneLineParser(prog="earthrl sft-data", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build a JSONL of SFT trajectories")
    b.add_argument("--source", choices=SOURCES, required=True)
    b.add_argument("--format", default="json", choices=("json", "codeact", "hierarchical"), help="action format")
    b.add_argument("--out", type=Path, required=True, help="output JSONL")
    b.add_argument("--tasks", default="earthrl-mini-core", help="suite or task file (its train split)")
    b.add_argument("--split", default="train", choices=("train", "test"))
    b.add_argument("--max-tasks", type=_positive, default=None, help="first N tasks of the split (1 or more)")
    b.add_argument("--phrasing", default="IF", choices=("IF", "AP", "OW"))
    b.add_argument("--seed", type=int, default=0, help="failure-aware: which fault each task gets; expert_tuning: split and shuffles")
    b.add_argument("--engine", choices=(*TEACHER_ENGINES, "scripted"), default=None,
                   help="teacher, teacher_loop: rollout engine or endpoint (default openai); simcraft: who plays the roles "
                        "(default scripted, from the reference workflows; openai: an endpoint)")
    b.add_argument("--mode", choices=MODE_CHOICES, default="both", help="simcraft: user requests of experts "
                   "(every slot stated), novices (area, sensor, time masked; a clarification turn) or both")
    b.add_argument("--model", default=None, help="teacher: fetched model name / HF folder (hf, vllm) or the endpoint's model")
    b.add_argument("--base-url", default=None, help="teacher endpoint, e.g. http://127.0.0.1:8000/v1")
    b.add_argument("--api-key", default=None, help="teacher endpoint key (default: $OPENAI_API_KEY or EMPTY)")
    b.add_argument("--samples", type=int, default=1, help="teacher episodes per task")
    b.add_argument("--attempts", type=int, default=2, help="teacher_loop: hinted re-explorations per failed task")
    b.add_argument("--temperature", type=float, default=0.7)
    b.add_argument("--max-new-tokens", type=int, default=256)
    b.add_argument("--max-turns", type=int, default=None, help="turns per episode (the override env.max_turns=N)")
    b.add_argument("overrides", nargs="*", help="Hydra overrides of the sft config (e.g. env.max_obs_chars=600)")
    sc = sub.add_parser("score", help="SimCRAFT's planning metrics of a JSONL corpus against the reference workflows")
    sc.add_argument("corpus", type=Path, help="JSONL of SFT trajectories (json action format)")
    sc.add_argument("--tasks", default="earthrl-mini", help="suite or task file holding the corpus's tasks")
    sc.add_argument("--out", type=Path, default=None, help="also write the metrics as JSON here")
    args = p.parse_args(argv)
    if args.cmd == "score":
        return _score(args)
    try:
        if args.out.is_dir():  # checked before the build, which can take minutes
            raise ConfigError(f"--out {args.out} is a folder; name a .jsonl file (e.g. {args.out / 'sft.jsonl'})")
        overrides = [f"tasks.name={args.tasks}", *args.overrides]
        teacher = None
        if args.engine is not None and args.source not in ("teacher", LOOP, "simcraft"):
            raise ConfigError(f"--engine is for --source teacher, teacher_loop or simcraft, not {args.source}")
        if args.source == "simcraft" and args.engine not in (None, "scripted", "openai"):
            raise ConfigError(f"--source simcraft --engine {args.engine}: use scripted or openai (serve a local model "
                              "with `earthrl serve` and pass its --base-url)")
        if args.source in ("teacher", LOOP) and args.engine == "scripted":
            raise ConfigError(f"--engine scripted is for --source simcraft; --source {args.source} needs hf, vllm "
                              "or openai")
        args.engine = args.engine or ("scripted" if args.source == "simcraft" else "openai")
        if args.engine == "openai" and args.source == "simcraft":
            if not (args.base_url and args.model):
                raise ConfigError("--source simcraft --engine openai needs --base-url URL and --model NAME")
            teacher = {"engine": "openai", "model": args.model, "base_url": args.base_url,
                       "api_key": args.api_key or os.environ.get("OPENAI_API_KEY"),
                       "temperature": args.temperature, "max_new_tokens": args.max_new_tokens}
        if args.source in ("teacher", LOOP):
            if args.engine == "openai" and not (args.base_url and args.model):
                raise ConfigError(f"--source {args.source} --engine openai needs --base-url URL and --model NAME")
            if args.attempts < 0:
                raise ConfigError(f"--attempts {args.attempts}: give 0 or more hinted re-explorations per task")
            if args.engine in ("hf", "vllm"):
                overrides.append(f"cluster.engine={args.engine}")
                if args.model:
                    overrides.append(f"model.path={args.model}" if "/" in args.model else f"model={args.model}")
            teacher = {"engine": args.engine, "model": args.model, "base_url": args.base_url,
                       "api_key": args.api_key or os.environ.get("OPENAI_API_KEY"), "samples": args.samples,
                       "temperature": args.temperature, "max_new_tokens": args.max_new_tokens,
                       "attempts": args.attempts, "seed": args.seed}
        if args.max_turns is not None:
            overrides.append(f"env.max_turns={args.max_turns}")
        if args.source == EXPERT and args.split != "train":
            raise ConfigError("--source expert_tuning builds from the train split's workflows (its own 80/20 split "
                              "holds items out); drop --split test")
        cfg = compose_for(args.format, overrides)
        tasks = load_tasks(cfg.tasks.name, args.split, data_root(cfg))
        tasks = spread(tasks, args.max_tasks) if args.source == "planner" else tasks[: args.max_tasks]
        held, examples = None, {r: [] for r in REJECT_REASONS}

        def on_reject(task, mode, exc):
            if len(examples[exc.reason]) < 5:
                examples[exc.reason].append({"task_id": task["id"], "mode": mode, "detail": exc.detail})

        if args.source == EXPERT:
            recs, held, counts = build_expert(tasks, seed=args.seed)
        else:
            recs, counts = build_records(args.source, cfg, tasks, seed=args.seed, phrasing=args.phrasing,
                                         teacher=teacher, user_mode=args.mode, on_reject=on_reject)
    except (ConfigError, EndpointError) as exc:
        print(f"earthrl: error: {exc}", file=sys.stderr)
        return 2
    n = write_jsonl(recs, args.out)
    if args.source == "simcraft":
        rej = args.out.with_name(args.out.stem + ".rejections.json")
        rej.write_text(json.dumps({**counts, "examples": {k: v for k, v in examples.items() if v}}, indent=1) + "\n")
        print(f"simcraft: rejections by reason -> {rej}")
    if held is not None:
        heldout = args.out.with_name(args.out.stem + ".heldout.jsonl")
        print(f"expert_tuning: {write_jsonl(held, heldout)} held-out MCQ/ordering items -> {heldout}")
    print(f"{args.source} ({args.format}): {n} trajectories from {len(tasks)} {args.split} tasks -> {args.out}")
    print("counts: " + counts_text(counts))
    if args.source == LOOP:
        side = args.out.with_name(args.out.stem + ".counts.json")
        side.write_text(json.dumps(counts, indent=1) + "\n")
        print(f"counts -> {side}")
    return 0


def _score(args) -> int:
    """``earthrl sft-data score``: SimCRAFT's metrics of a corpus, overall and per user mode."""
    from earthrl.rewards.metrics.corpus import CORPUS_METRICS, score_corpus  # lazy: numpy, the metrics registry
    from earthrl.rollout.sft_data import read_jsonl

    try:
        if not args.corpus.is_file():
            raise ConfigError(f"corpus {args.corpus}: no such file; build one with `earthrl sft-data build`")
        try:
            recs = read_jsonl(args.corpus)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        cfg = compose_for("json", [f"tasks.name={args.tasks}"])
        root = data_root(cfg)
        tasks = [t for split in ("train", "test") for t in _split(cfg.tasks.name, split, root)]
        result = score_corpus(recs, tasks)
    except (ConfigError, ValueError) as exc:
        print(f"earthrl: error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.corpus}: {len(recs)} trajectories")
    for group, res in result.items():
        cells = []
        for name in CORPUS_METRICS:
            m = res["metrics"][name]
            cells.append(f"{name} {m['value']:.3f} [{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}] (n={m['n']})")
        print(f"{group}: " + "; ".join(cells))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"-> {args.out}")
    return 0


def _split(name: str, split: str, root: Path) -> list[dict]:
    """The tasks of ``split`` ([] when the suite has none there); the data is not checked (nothing runs)."""
    try:
        return load_tasks(name, split, root, check_data=False)
    except ConfigError as exc:
        if "no task" in str(exc).lower():
            return []
        raise
