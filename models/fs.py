"""Atomic folder writes shared by model/data fetches and checkpoint export.

A folder is built under a hidden temporary sibling (``.<name>.partial-<pid>``) and moved
into place with one ``os.replace``; readers therefore see either nothing, the old folder
or the finished new one, never a half-written folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path


def file_in_the_way(folder: Path) -> Path | None:
    """The file that keeps ``folder`` from being a folder: ``folder`` itself or the nearest existing path
    above it, when that is not a folder; None when ``folder`` is (or can be created as) a folder."""
    folder = Path(folder).expanduser()
    existing = next((at for at in (folder, *folder.parents) if at.exists()), None)
    return existing if existing is not None and not existing.is_dir() else None


def partial_dir(final: Path) -> Path:
    """Temporary sibling of ``final`` that this process builds into (``.<name>.partial-<pid>``)."""
    return final.parent / f".{final.name}.partial-{os.getpid()}"


def remove_stale_partials(final: Path) -> None:
    """Delete leftover ``.<name>.partial-*`` siblings of ``final`` (from killed builds).

    Only call this while holding :func:`folder_lock` for ``final``.
    """
    if not final.parent.is_dir():
        return
    for stale in final.parent.glob(f".{final.name}.partial-*"):
        shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def folder_lock(final: Path, lock_root: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` for building ``final`` (one builder per folder at a time).

    The lock file lives in ``lock_root`` (never inside the folder it guards) so that it
    leaves nothing behind next to the finished folders.
    """
    lock_root.mkdir(parents=True, exist_ok=True)
    lock_path = lock_root / f"{final.parent.name}-{final.name}.lock"
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def atomic_folder(final: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty temporary folder; on success move it to ``final`` atomically.

    On an exception inside the ``with`` block the temporary folder is deleted and
    ``final`` is left as it was. With ``overwrite=True`` an existing ``final`` is replaced
    (moved aside, then deleted after the new folder is in place); otherwise an existing
    non-empty ``final`` raises ``FileExistsError`` before anything is built.

    Raises:
        FileExistsError: ``final`` exists, is non-empty and ``overwrite`` is False.
    """
    final = Path(final)
    if final.exists() and any(final.iterdir()) and not overwrite:
        raise FileExistsError(f"{final} exists and is not empty; pass overwrite=True to replace it")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_dir(final)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = final.parent / f".{final.name}.old-{os.getpid()}"
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
