"""The boundary of the CodeAct sandbox: bubblewrap (Debian ``bubblewrap``, ``/usr/bin/bwrap``;
https://github.com/containers/bubblewrap).

:func:`bwrap_command` runs the interpreter as::

    bwrap --unshare-all --cap-drop ALL --die-with-parent --new-session --hostname sandbox
          --proc /proc --dev /dev --tmpfs /tmp --tmpfs /dev/shm (size-capped, empty)
          --ro-bind /usr/lib (and /lib, /lib64 as on the host)
          --ro-bind <the interpreter's own sys.path folders: stdlib, lib-dynload, the venv's
                     site-packages> --ro-bind <its binary, pyvenv.cfg, libpython>
          --ro-bind <child.py> --ro-bind <landlock.py> --ro-bind <arg_bounds.py> --ro-bind <read_roots>
          --symlink <the links on the way to the binary and the read_roots>
          --bind <workspace>          (the only writable place)
          --clearenv --setenv ... --chdir <workspace> --seccomp FD
          -- <venv>/bin/python -I -B child.py

Everything is bound at its real path, and the interpreter runs by a path that exists inside, so
a virtual environment, repository or data folder reached through a symbolic link works.
Nothing else of the host is bound: not the folders the parent put on its own ``sys.path``, not
EarthRL's package (see :mod:`earthrl.envs.sandbox.interpreter`).

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
import tempfile
from functools import lru_cache

from earthrl.envs.sandbox.interpreter import interpreter_layout, symlink_hops, under

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
    """The ``bwrap ... --`` prefix for one interpreter; run :func:`interpreter_layout`'s
    ``exe`` after it.

    Args:
        workspace: real path of the episode workspace (bound read-write, the cwd).
        read_roots: folders bound read-only at their real path (task data); missing ones are
            skipped; the symbolic links on the way to them are recreated, so the given path
            works inside too.
        files: extra files bound read-only (the child's own scripts).
        env: the whole environment of the interpreter.
        seccomp_fd: descriptor of a BPF program (inherited by bwrap), or None.
        tmp_bytes: size cap of the empty ``/tmp`` and ``/dev/shm`` tmpfs, bytes.

    Raises:
        FileNotFoundError: bubblewrap is not installed.
        RuntimeError: the interpreter cannot be started to learn its layout.
    """
    bwrap = bwrap_path()
    if bwrap is None:
        raise FileNotFoundError(f"bubblewrap is not installed; {INSTALL_HINT}")
    py = interpreter_layout()
    cmd = [bwrap, "--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--new-session",
           "--hostname", "sandbox", "--proc", "/proc", "--dev", "/dev",
           "--size", str(tmp_bytes), "--tmpfs", "/tmp", "--size", str(tmp_bytes),
           "--tmpfs", "/dev/shm"]  # first: later binds may lie under /tmp
    for d in _SYSTEM_DIRS:
        cmd += ["--ro-bind-try", d, d]
    cmd += _bind_top_libs()
    for f in _SYSTEM_FILES:
        cmd += ["--ro-bind-try", f, f]
    bound = [*_SYSTEM_DIRS, *_TOP_LIBS, *py.folders, workspace]
    for p in py.folders:
        cmd += ["--ro-bind", p, p]
    for f in [*py.files, *map(str, files)]:
        if not under(f, bound):
            cmd += ["--ro-bind", f, f]
    hops = list(py.links)
    for given in read_roots:
        real = os.path.realpath(given)
        if os.path.isdir(real) and not under(real, bound):
            cmd += ["--ro-bind", real, real]
            bound.append(real)
        hops += symlink_hops(given)
    for link, target in dict(hops).items():
        if not under(link, bound):
            cmd += ["--symlink", target, link]
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
        code = "import os; print(os.getpid(), os.getcwd())"
        try:
            cmd = bwrap_command(ws, [], [], {"PATH": _PATH}, None, 1 << 20)
            p = subprocess.run([*cmd, interpreter_layout().exe, "-I", "-c", code],
                               capture_output=True,
                               text=True, timeout=30, env={"PATH": _PATH})
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
            return False, f"bwrap did not run ({e})"
        if p.returncode != 0 or p.stdout.split()[1:] != [ws]:
            err = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
            return False, f"bwrap cannot run here: {err[:200]}"
    return True, "ok"

