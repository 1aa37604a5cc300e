"""Export a training checkpoint as a merged, plain Hugging Face folder (for vLLM serving).

Checkpoint layout (written by the trainer's ``save_checkpoint``)::

    ckpt_dir/
      meta.json      {"base_model": "<HF folder or registry model name>", "step": int,
                      optional "lora_alpha": number (used when the adapter config says 0)}
      adapter/       peft ``save_pretrained`` folder: adapter_config.json + adapter_model.safetensors

Export layout::

    out_dir/
      config.json, generation_config.json, model*.safetensors   merged weights (base + B·A·alpha/r)
      tokenizer files + chat template                            copied from the base folder
      adapter/                                                   the adapter with its real lora_alpha
      earthrl_export.json                                        provenance (base, step, r, alpha, dtype)

A checkpoint with one adapter per role (``agent.adapters`` naming several: ``adapter/<name>/``) cannot be one
merged model; it exports as the base model's name plus each adapter with its real alpha, for multi-LoRA serving
(vLLM ``--enable-lora --lora-modules <name>=<out_dir>/adapters/<name>``)::

    out_dir/
      adapters/<name>/        one peft folder per role's adapter
      tokenizer files + chat template
      earthrl_export.json     provenance (base, step, adapters, r, alpha)

verl's model merger writes adapters with ``lora_alpha`` 0 and does not merge;
here the adapter keeps its real alpha and the merged folder is produced.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from earthrl.envs.paths import model_dir
from earthrl.models.checkpoint import checkpoint_adapters
from earthrl.models.fs import atomic_folder, file_in_the_way

EXPORT_MARKER = "earthrl_export.json"
_DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16,
           "float32": torch.float32, "fp32": torch.float32}
EXPORT_DTYPES = ("bfloat16", "float16", "float32")  # the names `earthrl export --dtype` takes


class ExportError(RuntimeError):
    """A checkpoint cannot be exported; the message is one line naming the problem and the fix."""


@dataclass(frozen=True)
class ArgNames:
    """How the caller's user writes the export arguments, for the messages: Python's keywords
    (:data:`PYTHON_NAMES`) or the ``earthrl export`` flags (:data:`CLI_NAMES`)."""

    base_model: str = "base_model"
    lora_alpha: str = "lora_alpha"
    overwrite: str = "overwrite=True"
    out: str = "out_dir"


PYTHON_NAMES = ArgNames()
CLI_NAMES = ArgNames("--base-model", "--lora-alpha", "--overwrite", "OUT")


def require_folder(path: Path) -> None:
    """Raises:
        ExportError: ``path`` is a file or not there (one line naming which, what to give instead)."""
    if not Path(path).is_dir():
        what = f"checkpoint {path} is a file, not a checkpoint folder" if Path(path).exists() else \
            f"checkpoint {path}: no such folder"
        raise ExportError(f"{what}; give an EarthRL checkpoint folder "
                          "(runs/<exp>/checkpoints/step_NNNNNN) or a verl checkpoint's LoRA adapter folder")


def read_checkpoint(ckpt_dir: Path) -> dict:
    """Read and check ``ckpt_dir/meta.json`` and the adapter files; return the meta dict.

    Raises:
        ExportError: no such folder; ``meta.json``, ``adapter/adapter_config.json`` or
            ``adapter/adapter_model.safetensors`` missing (a checkpoint of several adapters: ``adapter/<name>/``
            holds them), or meta lacks ``base_model``.
    """
    ckpt_dir = Path(ckpt_dir)
    require_folder(ckpt_dir)
    roles = len(checkpoint_adapters(ckpt_dir)) > 1 and not (ckpt_dir / "adapter" / "adapter_model.safetensors").exists()
    required = {
        "meta.json": "the trainer writes it next to adapter/ with base_model and step",
        "adapter/adapter_config.json": "save the LoRA adapter with peft save_pretrained into ckpt_dir/adapter",
        "adapter/adapter_model.safetensors": "save the LoRA adapter with peft save_pretrained (safetensors) into ckpt_dir/adapter",
    }
    for rel, fix in required.items():
        if roles and rel.startswith("adapter/"):
            continue
        if not (ckpt_dir / rel).is_file():
            raise ExportError(f"checkpoint {ckpt_dir} has no {rel}; {fix}")
    try:
        meta = json.loads((ckpt_dir / "meta.json").read_text())
    except ValueError as exc:
        raise ExportError(f"{ckpt_dir / 'meta.json'} is not valid JSON ({exc}); rewrite the checkpoint") from exc
    if not isinstance(meta, dict) or not meta.get("base_model"):
        raise ExportError(f"{ckpt_dir / 'meta.json'} has no 'base_model'; add the path of the base HF folder")
    return meta


def resolve_base_model(base_model: str, source: str = "meta.json") -> Path:
    """Return the base model folder: an existing path, or a fetched registry model of that name.

    Args:
        source: where the value came from, named in the error (``meta.json``, ``--base-model``, …).

    Raises:
        ExportError: neither an existing folder nor a fetched registry model.
    """
    path = Path(base_model).expanduser()
    if (path / "config.json").is_file():
        return path

    fetched = model_dir(str(base_model))
    if (fetched / "config.json").is_file():
        return fetched
    fix = "fix base_model in meta.json" if source == "meta.json" else f"give {source} the base HF folder the run trained"
    raise ExportError(f"base model {base_model!r} (from {source}) is not an HF folder nor a fetched model; "
                      f"fetch it (earthrl fetch model <name>) or {fix}")


def adapter_alpha(adapter_config: dict, meta: dict) -> float:
    """The real ``lora_alpha``: the adapter config's, or ``meta['lora_alpha']`` if the config says 0/None.

    Raises:
        ExportError: alpha is 0 or missing in both (merging would silently drop the adapter).
    """
    alpha = adapter_config.get("lora_alpha")
    if not alpha:
        alpha = meta.get("lora_alpha")
    if not alpha:
        raise ExportError(
            "adapter_config.json has lora_alpha 0 (verl's merger writes 0) and meta.json has no lora_alpha; "
            "add the training alpha to meta.json as \"lora_alpha\""
        )
    return alpha


def export_merged(
    ckpt_dir: Path,
    out_dir: Path,
    dtype: str | torch.dtype = "bfloat16",
    overwrite: bool = False,
    names: ArgNames = PYTHON_NAMES,
    base_model: str | Path | None = None,
) -> Path:
    """Merge the checkpoint's LoRA adapter into its base and save a plain HF folder at ``out_dir``.

    Loads the base in ``dtype`` (``"bfloat16"`` default; ``"float16"`` for GPUs without bf16, e.g. a
    V100 or T4 serving it with vLLM; ``"float32"`` for exact comparisons), merges and saves in it, applies the adapter with ``peft.PeftModel.from_pretrained`` (with the
    real alpha, see :func:`adapter_alpha`), writes the adapter to ``out_dir/adapter/``,
    ``merge_and_unload()``, saves safetensors + the base's tokenizer, and writes
    ``earthrl_export.json``. The folder is built in a temporary sibling and renamed, so a
    failure leaves ``out_dir`` untouched. ``names``: how the messages write the arguments.
    ``base_model``: use this base folder instead of the one ``meta.json`` records (the caller decides when).
    A checkpoint with one adapter per role is exported adapter by adapter, not merged (module doc).

    Returns:
        ``out_dir``.
    Raises:
        ExportError: missing checkpoint files, base model not found, alpha 0, unknown dtype,
            ``out_dir`` is (or is under) a file, or ``out_dir`` exists and is non-empty while ``overwrite`` is False.
    """
    from peft import LoraConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt_dir, out_dir = Path(ckpt_dir), Path(out_dir)
    meta = read_checkpoint(ckpt_dir)
    if isinstance(dtype, str):
        if dtype not in _DTYPES:
            raise ExportError(f"unknown dtype {dtype!r}; choose one of {sorted(_DTYPES)}")
        dtype = _DTYPES[dtype]
    if (blocker := file_in_the_way(out_dir)) is not None:
        where = "is a file" if blocker == out_dir else f"is under {blocker}, which is a file"
        raise ExportError(f"{names.out} {out_dir} {where}; name a folder (new or empty) to write the export into")
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise ExportError(f"{out_dir} exists and is not empty; choose another output folder or pass {names.overwrite}")
    base_dir = (resolve_base_model(str(base_model), source=names.base_model) if base_model is not None
                else resolve_base_model(str(meta["base_model"])))
    folders = checkpoint_adapters(ckpt_dir)
    if "default" not in folders:
        return _export_adapters(ckpt_dir, out_dir, meta, base_dir, folders, overwrite)
    adapter_dir = ckpt_dir / "adapter"
    peft_cfg = LoraConfig.from_pretrained(str(adapter_dir))
    peft_cfg.lora_alpha = adapter_alpha(json.loads((adapter_dir / "adapter_config.json").read_text()), meta)
    peft_cfg.base_model_name_or_path = str(base_dir)
    peft_cfg.inference_mode = True

    base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=dtype)
    model = PeftModel.from_pretrained(base, str(adapter_dir), config=peft_cfg)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    with atomic_folder(out_dir, overwrite=overwrite) as tmp:
        model.save_pretrained(str(tmp / "adapter"), safe_serialization=True)
        merged = model.merge_and_unload()
        merged.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        record = {
            "base_model": str(base_dir),
            "checkpoint": str(ckpt_dir.resolve()),
            "step": meta.get("step"),
            "lora_r": peft_cfg.r,
            "lora_alpha": peft_cfg.lora_alpha,
            "target_modules": sorted(peft_cfg.target_modules),
            "dtype": str(dtype).removeprefix("torch."),
            "exported_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        }
        (tmp / EXPORT_MARKER).write_text(json.dumps(record, indent=2) + "\n")
    return out_dir


def _export_adapters(ckpt_dir: Path, out_dir: Path, meta: dict, base_dir: Path, folders: dict[str, Path],
                     overwrite: bool) -> Path:
    """:func:`export_merged` of a checkpoint with one adapter per role (module doc): each adapter with its real
    alpha under ``out_dir/adapters/<name>/``, the base's tokenizer and ``earthrl_export.json``; nothing merged."""
    import shutil

    from transformers import AutoTokenizer

    configs = {}
    with atomic_folder(out_dir, overwrite=overwrite) as tmp:
        for name, folder in folders.items():
            config = json.loads((folder / "adapter_config.json").read_text())
            config["lora_alpha"] = adapter_alpha(config, meta)
            config["base_model_name_or_path"] = str(base_dir)
            (tmp / "adapters" / name).mkdir(parents=True)
            (tmp / "adapters" / name / "adapter_config.json").write_text(json.dumps(config, indent=2))
            shutil.copyfile(folder / "adapter_model.safetensors", tmp / "adapters" / name / "adapter_model.safetensors")
            configs[name] = config
        AutoTokenizer.from_pretrained(str(base_dir)).save_pretrained(str(tmp))
        first = next(iter(configs.values()))
        record = {
            "base_model": str(base_dir),
            "checkpoint": str(ckpt_dir.resolve()),
            "step": meta.get("step"),
            "adapters": sorted(configs),
            "lora_r": first.get("r"),
            "lora_alpha": first["lora_alpha"],
            "target_modules": sorted(first.get("target_modules") or []),
            "merged": False,
            "exported_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        }
        (tmp / EXPORT_MARKER).write_text(json.dumps(record, indent=2) + "\n")
    return out_dir


def export_verl_adapter(adapter_dir: Path, out_dir: Path, base_model: str | Path, lora_alpha: float,
                        dtype: str | torch.dtype = "bfloat16", overwrite: bool = False,
                        names: ArgNames = PYTHON_NAMES) -> Path:
    """Export a verl checkpoint's LoRA adapter (a peft folder: ``adapter_config.json`` +
    ``adapter_model.safetensors``, as verl's FSDP checkpoint / model merger writes it) as a merged HF folder.

    verl's merger writes ``lora_alpha`` 0 and does not merge: the trained alpha
    (``actor_rollout_ref.model.lora_alpha``, EarthRL's ``model.lora.alpha``) is given here, written into
    ``out_dir/adapter/adapter_config.json`` and used for the merge (:func:`export_merged`).

    Raises:
        ExportError: the adapter files are missing, ``lora_alpha`` is not a positive finite number, or as
            :func:`export_merged`.
    """
    import tempfile

    adapter_dir = Path(adapter_dir)
    require_folder(adapter_dir)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        if not (adapter_dir / name).is_file():
            raise ExportError(f"{adapter_dir} has no {name}; point at the lora adapter folder of the verl checkpoint")
    if not lora_alpha or not math.isfinite(float(lora_alpha)) or float(lora_alpha) <= 0:
        raise ExportError(f"{names.lora_alpha}={lora_alpha}: give the alpha the run trained with (model.lora.alpha)")
    base_dir = resolve_base_model(str(base_model), source=names.base_model)
    with tempfile.TemporaryDirectory(prefix="earthrl-verl-export-") as tmp:
        ckpt = Path(tmp)
        (ckpt / "adapter").mkdir()
        config = json.loads((adapter_dir / "adapter_config.json").read_text())
        config["lora_alpha"] = float(lora_alpha)
        (ckpt / "adapter" / "adapter_config.json").write_text(json.dumps(config, indent=1))
        (ckpt / "adapter" / "adapter_model.safetensors").symlink_to((adapter_dir / "adapter_model.safetensors").resolve())
        (ckpt / "meta.json").write_text(json.dumps({"base_model": str(base_dir), "step": None,
                                                    "lora_alpha": float(lora_alpha), "source": "verl"}))
        out = export_merged(ckpt, out_dir, dtype=dtype, overwrite=overwrite, names=names)
    marker = out / EXPORT_MARKER  # provenance names the verl adapter, not the temporary checkpoint
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "checkpoint": str(adapter_dir.resolve())}, indent=2))
    return out
