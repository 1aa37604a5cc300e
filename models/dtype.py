"""The compute dtype of the policy and the rollout engine: ``model.dtype``.

``auto`` (the default of the real models' configs) picks bfloat16 where the hardware computes it
natively — a CUDA GPU, or a CPU with AVX512-BF16 or AMX (``/proc/cpuinfo`` flags ``avx512_bf16``,
``amx_bf16``) — and float32 elsewhere: on an AVX2-only CPU bf16 matmuls are emulated and were
measured about 5× slower than float32 (2.2 vs 11.2 tok/s generating 8 × 96 tokens on 2 AVX2 cores). The learner and the
engine resolve the same name with the same rule, so their logprobs stay comparable.
"""

from __future__ import annotations

from pathlib import Path

DTYPES = ("auto", "bfloat16", "float16", "float32")
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_bf16_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """The native-bf16 instruction flags of this CPU (subset of :data:`BF16_CPU_FLAGS`); [] when
    none or when ``cpuinfo`` cannot be read (non-Linux)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                return [f for f in BF16_CPU_FLAGS if f in flags]
    except OSError:
        pass
    return []


def resolve_dtype(name: str, cuda: bool | None = None, cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, str]:
    """The concrete torch dtype name for ``model.dtype=name`` and why.

    Args:
        name: one of :data:`DTYPES`.
        cuda: whether a CUDA GPU computes (default: ``torch.cuda.is_available()``).
        cpuinfo: the file read for CPU flags.

    Returns:
        ``(dtype, reason)``: dtype is "bfloat16", "float16" or "float32"; reason a short phrase
        for the start-up log, e.g. ``"auto: CPU has amx_bf16"``.

    Raises:
        ValueError: ``name`` is not one of :data:`DTYPES` (names the field and the choices).
    """
    if name not in DTYPES:
        raise ValueError(f"model.dtype={name!r}: choose one of {', '.join(DTYPES)}")
    if name != "auto":
        return name, "set by model.dtype"
    if cuda is None:
        import torch  # lazy: torch is heavy and only this branch needs it

        cuda = torch.cuda.is_available()
    if cuda:
        return "bfloat16", "auto: CUDA GPU"
    flags = cpu_bf16_flags(cpuinfo)
    if flags:
        return "bfloat16", f"auto: CPU has {', '.join(flags)}"
    return "float32", "auto: CPU without native bf16 (AVX512-BF16/AMX), where bf16 is emulated and ~5x slower"
