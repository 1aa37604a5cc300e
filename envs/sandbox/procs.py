"""The processes of one sandbox seen from ``/proc``: who they are, their CPU time, stop/continue.

Used by :class:`earthrl.envs.sandbox.parent.Sandbox` where no cgroup is available
(:mod:`earthrl.envs.sandbox.cgroup`), and to find the interpreter's pids to put into its cgroups.
Every process of the sandbox descends from the process the parent started (orphans are re-parented
to the sandbox's PID-namespace init, itself a descendant), so walking ``/proc/*/stat`` from it
finds them all.
"""

from __future__ import annotations

import os
import signal

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (field 3 onwards), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> list[int]:
    """Pids of every living descendant of ``pid`` (not ``pid`` itself), parents first."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                children.setdefault(int(st[1]), []).append(int(name))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out.extend(kids)
        todo.extend(kids)
    return out


def cpu_s(pids) -> float:
    """CPU seconds (user + system, all threads, and their waited-for children) of ``pids``."""
    total = 0
    for pid in pids:
        st = _stat(pid)
        if st is not None:
            total += sum(int(x) for x in st[11:15])  # utime stime cutime cstime
    return total / _TICK


def signal_all(pids, sig: int) -> None:
    """Send ``sig`` to each of ``pids`` (gone ones are skipped)."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_tree(root: int, include_root: bool) -> list[int]:
    """SIGSTOP every descendant of ``root`` (and ``root`` when ``include_root``), repeating until no
    new process appears (a process forking while being stopped); returns the pids stopped."""
    stopped: set[int] = set()
    for _ in range(50):
        pids = set(descendants(root)) | ({root} if include_root else set())
        new = pids - stopped
        if not new:
            break
        signal_all(new, signal.SIGSTOP)
        stopped |= new
    return sorted(stopped)
