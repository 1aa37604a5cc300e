"""Files of a served folder, read without leaving it: every path a browser asks for is hostile (a workspace is
written by agent code, which may plant links). Each component is one plain name opened relative to its parent's
descriptor with ``O_NOFOLLOW``, so neither ``..`` nor a symbolic link anywhere on the way can reach outside.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_BYTES = 32 * 2**20
"""Largest file served (bytes): a quick-look PNG is far smaller."""


class OutsideFolder(OSError):
    """A requested path that is not a plain file inside the served folder (a ``..``, a link, a device, …)."""


def _check(part: str) -> None:
    if not part or part in (".", "..") or "/" in part or "\\" in part or "\x00" in part:
        raise OutsideFolder(f"{part!r} is not a plain name inside the served folder")


def _open_dir(root: Path, parts: list[str]) -> int:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            _check(part)
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                raise OutsideFolder(f"{part!r}: not a folder inside the served folder ({exc.strerror})") from None
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_file(root: Path, parts: list[str], max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of ``root/parts[0]/…/parts[-1]``.

    Raises:
        OutsideFolder: a component that is not a plain name, a folder or file that is a symbolic link, a last
            component that is not a regular file with one link, a file over ``max_bytes``, or no such file.
    """
    if not parts:
        raise OutsideFolder("no file named")
    _check(parts[-1])
    dfd = _open_dir(root, parts[:-1])
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            raise OutsideFolder(f"{parts[-1]!r}: not a file inside the served folder ({exc.strerror})") from None
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > max_bytes:
            raise OutsideFolder(f"{parts[-1]!r} is not a plain file of at most {max_bytes} bytes")
        return f.read(max_bytes + 1)[:max_bytes]


def list_files(root: Path, parts: list[str], suffix: str) -> list[str]:
    """Names of the regular files ending in ``suffix`` in ``root/parts…`` (links left out), sorted; [] when that
    folder is not a plain folder inside ``root``."""
    try:
        fd = _open_dir(root, parts)
    except (OutsideFolder, OSError):
        return []
    try:
        with os.scandir(fd) as it:
            return sorted(e.name for e in it if e.name.endswith(suffix) and e.is_file(follow_symlinks=False))
    finally:
        os.close(fd)
