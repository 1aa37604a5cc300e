"""The boundary of the CodeAct sandbox: bubblewrap (Debian ``bubblewrap``, ``/usr/bin/bwrap``;
https://github.com/containers/bubblewrap).

:func:`bwrap_command` runs the interpreter as::

    bwrap --unshare-all --cap-drop ALL --die-with-parent --new-session --hostname sandbox
          --proc /proc --dev /dev --tmpfs /tmp --tmpfs /dev/shm (size-capped, empty)
          --ro-bind <Python installation: sys.base_prefix, the venv, sys.path entries>
          --ro-bind /usr/lib (and /lib, /lib64 as on the host) --ro-bind <read_roots>
          --ro-bind <child.py> --ro-bind <landlock.py> --ro-bind <arg_bounds.py>
          --bind <workspace>          (the only writable place)
          --clearenv --setenv ... --chdir <workspace> --seccomp FD
          -- python -I -B child.py

New user, mount, PID, IPC, UTS, network and cgroup namespaces: the host's files, processes,
sockets (Ray's under /tmp/ray among them), SysV IPC objects and network are not there; no
capabilities, even as root; no shell or other program (``/usr/bin`` is not bound); the
process tree dies with the parent. :func:`bwrap_probe` checks once per process that this command
runs here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache

_PATH = "/usr/bin:/bin"
_SYSTEM_DIRS = ("/usr/lib", "/usr/lib64", "/usr/lib32")
_TOP_LIBS = ("/lib", "/lib64", "/lib32", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")
INSTALL_HINT = "install bubblewrap (`apt-get install bubblewrap`; `make install` does it as root)"


def bwrap_path() -> str | None:
    """Path of the ``bwrap`` executable (``/usr/bin/bwrap`` first), or None."""
    if os.access("/usr/bin/bwrap", os.X_OK):
        return "/usr/bin/bwrap"
    return shutil.which("bwrap", path=_PATH)


def python_paths() -> list[str]:
    """Folders of the Python installation the interpreter needs (base prefix, venv, sys.path)."""
    roots = {sys.base_prefix, sys.prefix, sys.base_exec_prefix, sys.exec_prefix}
    paths = {os.path.realpath(p) for p in roots}
    for p in sys.path:
        if p and os.path.isdir(p) and not any(p.startswith(r + "/") or p == r for r in roots):
            paths.add(os.path.realpath(p))
    return sorted(paths)


def _bind_top_libs() -> list[str]:
    args = []
    for p in _TOP_LIBS:
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            args += ["--ro-bind", p, p]
    return args


def bwrap_command(workspace: str, read_roots, files, env: dict, seccomp_fd: int | None,
                  tmp_bytes: int) -> list[str]:
    """The ``bwrap ... --`` prefix for one interpreter.

    Args:
        workspace: real path of the episode workspace (bound read-write, the cwd).
        read_roots: real paths bound read-only (task data); missing ones are skipped.
        files: extra files bound read-only (the child's own scripts).
        env: the whole environment of the interpreter.
        seccomp_fd: descriptor of a BPF program (inherited by bwrap), or None.
        tmp_bytes: size cap of the empty ``/tmp`` and ``/dev/shm`` tmpfs, bytes.

    Raises:
        FileNotFoundError: bubblewrap is not installed.
    """
    bwrap = bwrap_path()
    if bwrap is None:
        raise FileNotFoundError(f"bubblewrap is not installed; {INSTALL_HINT}")
    cmd = [bwrap, "--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--new-session",
           "--hostname", "sandbox", "--proc", "/proc", "--dev", "/dev",
           "--size", str(tmp_bytes), "--tmpfs", "/tmp", "--size", str(tmp_bytes),
           "--tmpfs", "/dev/shm"]  # first: later binds may lie under /tmp
    for d in _SYSTEM_DIRS:
        cmd += ["--ro-bind-try", d, d]
    cmd += _bind_top_libs()
    for f in _SYSTEM_FILES:
        cmd += ["--ro-bind-try", f, f]
    for p in python_paths():
        cmd += ["--ro-bind", p, p]
    for p in read_roots:
        cmd += ["--ro-bind-try", p, p]
    for f in files:
        cmd += ["--ro-bind", str(f), str(f)]
    cmd += ["--bind", workspace, workspace, "--clearenv"]
    for k, v in env.items():
        cmd += ["--setenv", k, v]
    cmd += ["--chdir", workspace]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    return [*cmd, "--"]


@lru_cache(maxsize=1)
def bwrap_probe() -> tuple[bool, str]:
    """``(works, reason)``: whether :func:`bwrap_command` starts this Python here (checked once
    per process; the reason says what failed, e.g. user namespaces disabled)."""
    if bwrap_path() is None:
        return False, "bwrap is not installed"
    with tempfile.TemporaryDirectory(prefix="earthrl_bwrap_probe_") as ws:
        ws = os.path.realpath(ws)
        cmd = bwrap_command(ws, [], [], {"PATH": _PATH}, None, 1 << 20)
        code = "import os; print(os.getpid(), os.getcwd())"
        try:
            p = subprocess.run([*cmd, sys.executable, "-I", "-c", code], capture_output=True,
                               text=True, timeout=30, env={"PATH": _PATH})
        except (OSError, subprocess.TimeoutExpired) as e:
            return False, f"bwrap did not run ({e})"
        if p.returncode != 0 or p.stdout.split()[1:] != [ws]:
            err = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
            return False, f"bwrap cannot run here: {err[:200]}"
    return True, "ok"

