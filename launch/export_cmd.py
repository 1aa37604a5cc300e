"""``earthrl export CHECKPOINT OUT``: a checkpoint as a merged Hugging Face folder (:mod:`earthrl.models.export`).

    earthrl export runs/<exp>/checkpoints/step_000003 OUT            an EarthRL checkpoint (meta.json)
    earthrl export <verl lora_adapter> OUT --base-model DIR --lora-alpha A    a verl checkpoint's adapter
    ... --dtype bfloat16|float16|float32 (default bfloat16), --overwrite

OUT gets a model card, ``OUT/README.md`` (:mod:`earthrl.launch.model_card`): base model, adapters, training stages
and data, the run's held-out metrics with their intervals (or "not evaluated"), the ``vllm serve`` command with
the tool-call parser (:mod:`earthrl.launch.serving`), the config and EarthRL's version; ``earthrl serve OUT``
serves it.

A checkpoint with one adapter per role (``agent.adapters``) exports each adapter, not merged, under
``OUT/adapters/<name>/`` (:mod:`earthrl.models.export`).

``--base-model`` and ``--lora-alpha`` are for a verl adapter folder only (it has no meta.json; verl's
merger writes ``lora_alpha`` 0). An EarthRL checkpoint records both in its meta.json and adapter: the
flags are accepted there only when they equal the checkpoint's own values, and refused otherwise
(one line naming the flag and the checkpoint's value), so that a flag is never silently ignored.
One exception: ``--base-model`` replaces a recorded base model that is no longer there (a moved or
copied checkpoint); a note line on stderr says so.
Exit status 0, or 2 with one ``earthrl: error:`` line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from earthrl.launch.arg_parser import OneLineParser
from earthrl.launch.model_card import write_card
from earthrl.models.checkpoint import checkpoint_adapters
from earthrl.models.export import (
    CLI_NAMES,
    EXPORT_DTYPES,
    ExportError,
    adapter_alpha,
    export_merged,
    export_verl_adapter,
    read_checkpoint,
    resolve_base_model,
)

VERL_FLAGS = {"--base-model": "<the base HF folder the run trained (model.path)>",
              "--lora-alpha": "<the run's model.lora.alpha>"}


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="earthrl export", description="Merge a checkpoint's LoRA adapter into a plain HF folder.")
    p.add_argument("checkpoint", type=Path, help="an EarthRL checkpoint folder (runs/<exp>/checkpoints/step_000003), "
                   "or a verl checkpoint's LoRA adapter folder (with --base-model and --lora-alpha)")
    p.add_argument("out", type=Path, help="output folder (safetensors + tokenizer)")
    p.add_argument("--base-model", help="verl adapter only: the base HF folder the run trained (model.path)")
    p.add_argument("--lora-alpha", type=float, help="verl adapter only: the alpha the run trained with "
                   "(model.lora.alpha; verl's merger writes 0)")
    p.add_argument("--dtype", choices=EXPORT_DTYPES, default="bfloat16",
                   help="the saved weights' dtype (default bfloat16; float16 for a GPU without bf16)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT")
    return p


def check_checkpoint_flags(ckpt: Path, base_model: str | None, lora_alpha: float | None) -> str | None:
    """Refuse ``--base-model`` / ``--lora-alpha`` given for an EarthRL checkpoint unless they equal its own
    ``meta.json`` base model / adapter alpha, or the recorded base model is gone (module doc).

    Returns:
        the ``--base-model`` to use instead of the recorded one (its folder is gone), else None.
    Raises:
        ExportError: a flag that differs (names it, the checkpoint's value and the fix); the checkpoint's
            own problems (:func:`earthrl.models.export.read_checkpoint`).
    """
    meta = read_checkpoint(ckpt)
    why = f"only for a verl adapter folder; {ckpt} is an EarthRL checkpoint (meta.json)"
    replacement = None
    if base_model is not None:
        own = str(meta["base_model"])
        if base_model != own and Path(base_model).expanduser().resolve() != Path(own).expanduser().resolve():
            try:
                resolve_base_model(own)
            except ExportError:  # the recorded base is gone: the flag is the only way to name it
                replacement = base_model
            else:
                raise ExportError(f"--base-model {base_model}: {why} whose base model is {own!r}; drop "
                                  "--base-model (or fix base_model in its meta.json)")
    if lora_alpha is not None:
        folder = next(iter(checkpoint_adapters(ckpt).values()))  # one adapter, or the first role's (one alpha)
        own_alpha = adapter_alpha(json.loads((folder / "adapter_config.json").read_text()), meta)
        if float(lora_alpha) != float(own_alpha):
            raise ExportError(f"--lora-alpha {lora_alpha:g}: {why} whose adapter has lora_alpha {own_alpha:g}; "
                              "drop --lora-alpha")
    if replacement is not None:
        print(f"earthrl: note: --base-model {replacement} replaces the recorded base model {meta['base_model']!r} "
              "(not found)", file=sys.stderr)
    return replacement


def export(args: argparse.Namespace) -> Path:
    """Export what ``args`` names and write its model card (module doc); returns the output folder.

    Raises:
        ExportError: one line naming the problem and the flag or file to fix.
    """
    ckpt = args.checkpoint
    if (ckpt / "adapter_config.json").is_file() and not (ckpt / "meta.json").is_file():  # a verl adapter folder
        given = {"--base-model": args.base_model, "--lora-alpha": args.lora_alpha}
        missing = [flag for flag, value in given.items() if value is None or value == ""]
        if missing:
            raise ExportError(f"{ckpt} is a verl LoRA adapter folder (no meta.json): also give "
                              + " and ".join(f"{flag} {VERL_FLAGS[flag]}" for flag in missing))
        out = export_verl_adapter(ckpt, args.out, args.base_model, args.lora_alpha, dtype=args.dtype,
                                  overwrite=args.overwrite, names=CLI_NAMES)
    else:
        base_model = check_checkpoint_flags(ckpt, args.base_model, args.lora_alpha)
        out = export_merged(ckpt, args.out, dtype=args.dtype, overwrite=args.overwrite, names=CLI_NAMES,
                            base_model=base_model)
    write_card(out, ckpt)
    return out


def main(argv: list[str]) -> int:
    """CLI of ``earthrl export``; prints the output folder. Returns the exit status (module doc)."""
    args = _parser().parse_args(argv)
    try:
        print(export(args))
    except ExportError as exc:
        print(f"earthrl: error: {exc}", file=sys.stderr)
        return 2
    return 0
