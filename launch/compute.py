"""Where and in which dtype a job computes: ``cluster.device`` and ``model.dtype`` resolved once, here.

Every command resolves both through these two functions and passes the results down as plain values
(``"cuda"``, ``"bfloat16"``): the learner (:class:`~earthrl.models.policy.Policy`), the rollout engines and
the warm start's cache key see the same answer. ``model.dtype=auto`` follows the device
(:func:`earthrl.models.dtype.resolve_dtype`): bfloat16 on a CUDA GPU, the CPU's own rule elsewhere.
"""

from __future__ import annotations

from earthrl.envs.errors import ConfigError
from earthrl.models.device import resolve_device
from earthrl.models.dtype import resolve_dtype


def job_device(cfg) -> tuple[str, str]:
    """``(device, reason)`` of a composed config: ``"cpu"`` or ``"cuda"`` (:func:`resolve_device` of
    ``cluster.device``). ``backend=verl`` always computes on CUDA (verl's trainer has no CPU rollout; it stops
    on its own, after printing its config, where CUDA is missing).

    Raises:
        ConfigError: ``cluster.device=cuda`` without CUDA, or an unknown name (one line with the fix).
    """
    if str(cfg.get("backend", "local")) == "verl":
        return "cuda", "backend=verl"
    try:
        return resolve_device(str(cfg.cluster.device))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def job_dtype(cfg, device: str | None = None) -> tuple[str, str]:
    """``(dtype, reason)`` of a composed config: ``model.dtype`` resolved for ``device`` (default:
    :func:`job_device`).

    Raises:
        ConfigError: a bad ``model.dtype`` or ``cluster.device`` (one line with the fix).
    """
    device = device or job_device(cfg)[0]
    try:
        return resolve_dtype(str(cfg.model.dtype), cuda=device == "cuda")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
