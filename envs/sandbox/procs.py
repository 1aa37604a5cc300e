"""The processes of one sandbox (through psutil): who they are, their CPU time, stop/continue.

Used by :class:`earthrl.envs.sandbox.parent.Sandbox` where no cgroup is available
(:mod:`earthrl.envs.sandbox.cgroup`), and to find the interpreter's pids to put into its cgroups.
Every process of the sandbox descends from the process the parent started (orphans are re-parented
to the sandbox's PID-namespace init, itself a descendant), so walking ``/proc/*/stat`` from it
finds them all.
"""

from __future__ import annotations

import signal

import psutil


def descendants(pid: int) -> list[int]:
    """Pids of every living descendant of ``pid`` (not ``pid`` itself), parents first
    (``psutil.Process.children(recursive=True)``); [] when ``pid`` is gone."""
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def cpu_s(pids) -> float:
    """CPU seconds (user + system, all threads, and their waited-for children) of ``pids``
    (``psutil.Process.cpu_times``; gone ones count 0)."""
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def signal_all(pids, sig: int) -> None:
    """Send ``sig`` to each of ``pids`` (gone ones are skipped)."""
    for pid in pids:
        try:
            psutil.Process(pid).send_signal(sig)
        except psutil.Error:
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
