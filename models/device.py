"""Where the policy and the rollout engine compute: ``cluster.device``.

``auto`` (the default) picks CUDA where ``torch.cuda.is_available()`` (a CUDA build of torch and a visible
NVIDIA GPU; PyTorch docs, ``torch.cuda.is_available``) and the CPU elsewhere. ``cuda`` on a machine without
CUDA is refused with one line naming the key and the fix, never silently run on the CPU. The launcher
resolves the name once and passes the result down as a plain value (``"cpu"`` or ``"cuda"``); the compute
dtype follows it (:func:`earthrl.models.dtype.resolve_dtype` with ``cuda=device == "cuda"``), so that
``model.dtype=auto`` gives bfloat16 on a CUDA GPU.
"""

from __future__ import annotations

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(name: str, cuda: bool | None = None) -> tuple[str, str]:
    """The device ``cluster.device=name`` stands for on this machine, and why.

    Args:
        name: one of :data:`DEVICES`.
        cuda: whether CUDA is usable (default: ``torch.cuda.is_available()``).

    Returns:
        ``(device, reason)``: device is ``"cpu"`` or ``"cuda"``; reason a short phrase for the start-up
        line, e.g. ``"auto: CUDA GPU found"``.

    Raises:
        ValueError: ``name`` is not one of :data:`DEVICES`, or is ``cuda`` where CUDA is not usable
            (one line naming ``cluster.device`` and the fix).
    """
    if name not in DEVICES:
        raise ValueError(f"cluster.device={name!r}: choose one of {', '.join(DEVICES)}")
    if name == "cpu":
        return "cpu", "set by cluster.device"
    if cuda is None:
        import torch  # lazy: torch is heavy and only this branch needs it

        cuda = torch.cuda.is_available()
    if name == "cuda":
        if not cuda:
            raise ValueError("cluster.device=cuda but torch.cuda.is_available() is False here (no NVIDIA GPU "
                             "visible, or a CPU build of torch): set cluster.device=auto or cpu, or run on a GPU "
                             "machine with the gpu extra (pip install -e '.[gpu]')")
        return "cuda", "set by cluster.device"
    return ("cuda", "auto: CUDA GPU found") if cuda else ("cpu", "auto: no CUDA GPU")
