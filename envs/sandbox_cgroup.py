"""Process-count limit of a sandbox through the Linux ``pids`` cgroup controller.

RLIMIT_NPROC does not bind a process whose real uid is root, which is how the sandbox runs on the
training machines (see :mod:`earthrl.envs.sandbox`). Where the ``pids`` controller is mounted and
writable (cgroup v1 ``.../pids``, or cgroup v2 with ``pids`` in the root's subtree_control), each
sandbox gets its own cgroup with ``pids.max`` = ``SandboxLimits.max_processes``: processes and
threads of the interpreter together can never exceed it. The interpreter moves itself into the
cgroup (``echo 0 > cgroup.procs``) before any model code runs; :func:`remove_cgroup` deletes it
after the interpreter is dead.
"""

from __future__ import annotations

import itertools
import os
import time
from functools import lru_cache
from pathlib import Path

_COUNTER = itertools.count()


@lru_cache(maxsize=1)
def pids_controller_root() -> Path | None:
    """Mount point of a writable ``pids`` cgroup hierarchy, or None."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) < 4:
            continue
        mount, fstype, opts = Path(fields[1]), fields[2], fields[3].split(",")
        if fstype == "cgroup" and "pids" in opts:
            root = mount
        elif fstype == "cgroup2":
            try:
                if "pids" not in (mount / "cgroup.subtree_control").read_text().split():
                    continue
            except OSError:
                continue
            root = mount
        else:
            continue
        if os.access(root, os.W_OK):
            return root
    return None


def make_cgroup(max_pids: int) -> Path | None:
    """Create a cgroup with ``pids.max = max_pids``; None when the machine does not allow it."""
    root = pids_controller_root()
    if root is None:
        return None
    _remove_stale(root)
    path = root / f"earthrl_sandbox_{os.getpid()}_{next(_COUNTER)}"
    try:
        path.mkdir()
        (path / "pids.max").write_text(str(int(max_pids)))
    except OSError:
        remove_cgroup(path)
        return None
    return path


def _remove_stale(root: Path) -> None:
    """Delete cgroups left by EarthRL processes that died without closing their sandboxes."""
    for path in root.glob("earthrl_sandbox_*_*"):
        owner = path.name.split("_")[2]
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            remove_cgroup(path, wait_s=0)


def remove_cgroup(path: Path | None, wait_s: float = 2.0) -> None:
    """Delete the cgroup once its processes are gone (retries while busy; never raises)."""
    if path is None:
        return
    deadline = time.monotonic() + wait_s
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)
