"""Atomic, resumable checkpoints of the local learner.

Layout of ``<output_dir>/checkpoints/step_000003/``:

- ``adapter/``: peft ``save_pretrained`` LoRA adapter (what ``earthrl export`` merges); a policy with several
  adapters (one per role, ``agent.adapters``) has one subfolder per adapter, ``adapter/<name>/``, as peft writes them;
- ``trainer_state.pt``: optimizer state, step counter, python/numpy/torch RNG states;
- ``meta.json``: ``{"base_model", "step", "config"}``; written last, so a folder that has
  it is complete. Folders are built under a ``.tmp-`` name and renamed into place, so a process
  killed while writing (SIGKILL, power loss) leaves the previous checkpoint as the newest complete
  one and a ``.tmp-`` folder that the next write of that step replaces.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

from earthrl.envs.kill_points import kill_point

_STEP_DIR = re.compile(r"^step_(\d{6})$")


def rng_state() -> dict:
    """Python, numpy and torch RNG states."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    """Restore what :func:`rng_state` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(root: Path, step: int, policy_model, optimizer: torch.optim.Optimizer | None,
                    base_model: str, config: dict, keep: int = 2) -> Path:
    """Write checkpoint ``root/step_<step>`` atomically and prune old ones.

    Args:
        root: the run's checkpoints folder.
        step: number of completed optimizer steps.
        policy_model: the peft model (its adapter is saved).
        optimizer: its state is saved for exact resumption; None saves none (a DeepSpeed SFT job, whose ZeRO
            optimizer state is partitioned over its processes: the checkpoint starts a run by its adapter only).
        base_model: path of the base HF folder (for export and resume).
        config: the resolved run config (plain dict).
        keep: newest complete checkpoints to keep (older ones are removed).

    Returns:
        the final checkpoint folder.
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp-step_{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    policy_model.save_pretrained(str(tmp / "adapter"))
    kill_point("checkpoint", step)  # test hook: a kill in the middle of the write (kill-anywhere resume)
    torch.save({"optimizer": optimizer.state_dict() if optimizer is not None else None, "step": step, "rng": rng_state()},
               tmp / "trainer_state.pt")
    (tmp / "meta.json").write_text(json.dumps({"base_model": base_model, "step": step, "config": config}, indent=2))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in list_checkpoints(root)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints in ``root`` (those with meta.json), oldest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if _STEP_DIR.match(p.name) and (p / "meta.json").is_file()]
    return sorted(found, key=lambda p: int(_STEP_DIR.match(p.name).group(1)))


def resolve_resume(resume: str, root: Path) -> Path | None:
    """Which checkpoint to resume from.

    Args:
        resume: "off" (none), "auto" (newest complete one in ``root``, or none), or a path.
        root: the run's checkpoints folder.

    Raises:
        FileNotFoundError: if a path is given and it is not a complete checkpoint.
    """
    if resume in ("off", "", None, False):
        return None
    if resume == "auto":
        found = list_checkpoints(root)
        return found[-1] if found else None
    path = Path(resume)
    if not (path / "meta.json").is_file():
        raise FileNotFoundError(f"trainer.resume={resume}: no complete checkpoint there (meta.json missing); use trainer.resume=auto")
    return path


def checkpoint_step(path: Path) -> int:
    """The completed optimizer steps of the complete checkpoint ``path`` (its ``meta.json``), read
    without loading weights.

    Raises:
        FileNotFoundError: no ``meta.json`` there (not a complete checkpoint).
    """
    return int(json.loads((Path(path) / "meta.json").read_text())["step"])


def checkpoint_adapters(path: Path) -> dict[str, Path]:
    """The adapter folders of checkpoint ``path``: ``{"default": path/adapter}`` for one adapter, else
    ``{name: path/adapter/<name>}`` for each subfolder holding an adapter (a policy with one adapter per role).
    Empty when there is none."""
    adapter = Path(path) / "adapter"
    if (adapter / "adapter_model.safetensors").is_file():
        return {"default": adapter}
    if not adapter.is_dir():
        return {}
    return {p.name: p for p in sorted(adapter.iterdir()) if (p / "adapter_model.safetensors").is_file()}


def check_init_checkpoint(path: Path, lora: dict) -> Path:
    """Check that ``path`` is a complete checkpoint whose adapters have the LoRA shape ``lora``
    (``rank``, ``target_modules``) of the run it is to start (``trainer.init_from``).

    Raises:
        FileNotFoundError: no ``meta.json`` or adapter files there (names the fix).
        ValueError: an adapter's rank or target modules differ from ``lora`` (names both).
    """
    path = Path(path)
    folders = checkpoint_adapters(path)
    if not (path / "meta.json").is_file() or not folders:
        raise FileNotFoundError(f"{path}: not a complete checkpoint (meta.json and adapter/adapter_model.safetensors); "
                                "give a folder like runs/<exp>/checkpoints/step_000003")
    for folder in folders.values():
        conf = json.loads((folder / "adapter_config.json").read_text())
        if int(conf.get("r", -1)) != int(lora["rank"]) or sorted(conf.get("target_modules") or []) != sorted(lora["target_modules"]):
            raise ValueError(f"{path}: its adapter has rank {conf.get('r')} on {sorted(conf.get('target_modules') or [])}, "
                             f"the run's model.lora has rank {lora['rank']} on {sorted(lora['target_modules'])}; "
                             "set model.lora.rank / model.lora.target_modules to the checkpoint's")
    return path


def load_adapter_weights(path: Path, policy_model) -> None:
    """Load only the adapter weights of checkpoint ``path`` into ``policy_model`` (no optimizer,
    step or RNG state: a new run starts from them, ``trainer.init_from``).

    Each adapter of ``policy_model`` (peft's ``peft_config`` names) loads the checkpoint's adapter of its name;
    a checkpoint with one adapter (an SFT warm start, a run without roles) starts every adapter of the model
    (each role starts from it).

    Raises:
        FileNotFoundError: the checkpoint has several adapters and none of an adapter's name (names both sets).
    """
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    folders = checkpoint_adapters(path)
    for name in policy_model.peft_config:
        folder = folders.get(name) or (folders.get("default") if len(folders) == 1 else None)
        if folder is None:
            raise FileNotFoundError(f"{path}: no adapter {name!r} (it holds {sorted(folders)}); the run's agent.adapters "
                                    "must name the checkpoint's adapters")
        set_peft_model_state_dict(policy_model, load_file(str(folder / "adapter_model.safetensors")), adapter_name=name)


def load_checkpoint(path: Path, policy_model, optimizer: torch.optim.Optimizer) -> int:
    """Load adapter weights, optimizer and RNG state; returns the completed step count.

    Raises:
        ValueError: the checkpoint has no optimizer state (a DeepSpeed SFT checkpoint: start from it with
            ``trainer.init_from``).
    """
    state = torch.load(path / "trainer_state.pt", weights_only=False)
    if state["optimizer"] is None:
        raise ValueError(f"{path} holds no optimizer state (a DeepSpeed SFT checkpoint), so it cannot be resumed: "
                         f"start a run from its adapter with trainer.init_from={path}")
    load_adapter_weights(path, policy_model)
    optimizer.load_state_dict(state["optimizer"])
    set_rng_state(state["rng"])
    return int(state["step"])
