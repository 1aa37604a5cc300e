"""Parent-side file access to an episode workspace that the sandboxed code can also write.

The code in the sandbox may plant a symbolic link, a hard link, a folder or a FIFO under any name in
its workspace, e.g. ``ndvi_S2_T33UUU_20170216.tif -> /home/user/.ssh/authorized_keys``, and wait
for a tool (run by the unsandboxed parent) to write or read that name. Every file the parent writes
or reads in a workspace therefore goes through this module:

- the workspace is opened once per operation as a directory (``O_DIRECTORY | O_NOFOLLOW``) and
  names are single path components resolved against that descriptor (``dir_fd``);
- writes go to a fresh ``O_CREAT | O_EXCL | O_NOFOLLOW`` temporary name, then ``os.rename`` onto
  the final name (a rename replaces a directory entry; it never writes through a link); an existing
  final entry that is not a plain regular file with one link is refused;
- reads open with ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat`` the descriptor: a regular file with
  ``st_nlink == 1``, else refused.

Refusals raise :class:`UnsafeWorkspaceFile`; the artifact registry turns it into a
``sandbox_violation`` observation. The sandbox is frozen while the parent runs a tool
(:class:`earthrl.envs.sandbox.parent.Sandbox`), so nothing changes a checked entry before it is used.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeWorkspaceFile(OSError):
    """A workspace entry the parent will not write or read (a link, a folder, a device...)."""


def _check_name(name: str) -> None:
    if not name or "/" in name or name in (".", ".."):
        raise UnsafeWorkspaceFile(f"{name!r} is not a single file name inside the workspace")


def _open_dir(workspace: Path) -> int:
    try:
        return os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise UnsafeWorkspaceFile(f"the workspace {workspace} cannot be opened as a folder "
                                  f"({e.strerror})") from None


def _describe(st: os.stat_result) -> str | None:
    """Why an entry with this (l)stat is unsafe, or None for a plain file with one link."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_nlink != 1:
        return f"has {st.st_nlink} hard links"
    return None


def check_entry(workspace: Path, name: str) -> bool:
    """True when ``workspace/name`` is a plain regular file with one link, False when it does not
    exist.

    Raises:
        UnsafeWorkspaceFile: it exists and is a link, a hard-linked file, a folder or a device.
    """
    _check_name(name)
    dfd = _open_dir(workspace)
    try:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        why = _describe(st)
        if why:
            raise UnsafeWorkspaceFile(f"{name} {why} in the workspace; tools never follow links "
                                      "out of the workspace: remove it")
        return True
    finally:
        os.close(dfd)


def write_bytes(workspace: Path, name: str, data: bytes) -> None:
    """Write ``data`` as ``workspace/name`` without following any link (temp file + rename).

    Raises:
        UnsafeWorkspaceFile: the name exists and is not a plain file (left unchanged).
        OSError: the disk refused the write.
    """
    check_entry(workspace, name)
    dfd = _open_dir(workspace)
    tmp = f".{name}.{os.urandom(6).hex()}.part"
    try:
        fd = os.open(tmp, _TMP_FLAGS, 0o600, dir_fd=dfd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise
    finally:
        os.close(dfd)


def read_bytes(workspace: Path, name: str, max_bytes: int = 2**31) -> bytes:
    """Content of ``workspace/name``, opened without following links.

    Raises:
        FileNotFoundError: no such file.
        UnsafeWorkspaceFile: a link, a hard-linked file, not a regular file, or over ``max_bytes``.
    """
    _check_name(name)
    dfd = _open_dir(workspace)
    try:
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dfd)
        except OSError as e:
            if e.errno == 40:  # ELOOP: the final component is a symbolic link
                raise UnsafeWorkspaceFile(f"{name} is a symbolic link in the workspace; tools "
                                          "never follow links out of the workspace") from None
            raise
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        why = _describe(st) or (f"is larger than {max_bytes} bytes"
                                if st.st_size > max_bytes else None)
        if why:
            raise UnsafeWorkspaceFile(f"{name} {why} in the workspace; tools read only plain "
                                      "files the episode wrote")
        chunks, left = [], st.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def workspace_usage(workspace: Path, stop_bytes: int | None = None) -> tuple[int, int]:
    """``(bytes on disk, entries)`` under ``workspace``, links not followed; stops counting once
    ``stop_bytes`` is passed (a breach is then certain)."""
    total = entries = 0
    todo = [str(workspace)]
    while todo:
        try:
            it = os.scandir(todo.pop())
        except OSError:
            continue
        with it:
            for e in it:
                entries += 1
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512
                if e.is_dir(follow_symlinks=False):
                    todo.append(e.path)
                if stop_bytes is not None and total > stop_bytes:
                    return total, entries
    return total, entries
