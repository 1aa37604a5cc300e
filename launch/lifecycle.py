"""Stopping a run: Ctrl-C / SIGTERM, a second Ctrl-C, and what a killed run left behind.

Each command's entry point runs its job inside :class:`RunLifecycle`:

- the first SIGINT or SIGTERM raises :class:`RunInterrupted` in the main thread (deferred to the end of a
  :func:`protected` block, e.g. a checkpoint write), so the job's own ``finally`` stops Ray, the engine and
  the env pool; then every process the run started is killed, one line tells how to resume, and the
  process exits with 128 + the signal number (``os._exit``: nothing the stop abandoned runs at exit);
- a watchdog thread learns of each signal at once (``signal.set_wakeup_fd``, even while the main thread
  sits in C code): when the stop overruns :data:`STOP_DEADLINE_S`, or on a second signal, it kills the
  run's processes and exits at once;
- the run's processes (pid and start time) are recorded in ``<run folder>/.processes.json``; a run
  started in a folder whose recording driver is dead kills those still alive (never another run's
  or another user's: pid, start time and owner must match).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_DEADLINE_S = 8.0
"""Seconds from the first signal to a forced exit (the run's processes killed) when the clean stop hangs."""
REPEAT_S = 1.0
"""A signal this soon after the first is the same stop (a terminal's Ctrl-C reaches a stage and its parent)."""
PROCESS_FILE = ".processes.json"

_active: RunLifecycle | None = None


class RunInterrupted(KeyboardInterrupt):
    """The run was asked to stop by SIGINT or SIGTERM; ``signum`` is the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _same(entry: dict) -> psutil.Process | None:
    """The live process an entry of :data:`PROCESS_FILE` recorded (pid, start time and owner match), or None."""
    try:
        p = psutil.Process(int(entry["pid"]))
        if abs(p.create_time() - float(entry["started"])) > 0.05 or p.uids().real != os.getuid():
            return None
        return p
    except (psutil.Error, KeyError, TypeError, ValueError):
        return None


def kill_processes(procs: list[psutil.Process], grace_s: float = 1.0) -> int:
    """SIGTERM ``procs``, wait up to ``grace_s``, SIGKILL those left; returns how many were alive (zombies,
    dead already, are not)."""
    alive = []
    for p in procs:
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            p.terminate()
            alive.append(p)
        except psutil.Error:
            pass
    _, left = psutil.wait_procs(alive, timeout=grace_s)
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=1.0)
    return len(alive)


def reap_leftovers(run_dir: Path) -> list[int]:
    """Kill what a dead run recorded in ``run_dir/.processes.json`` and is still alive; returns their pids.

    Nothing is touched while the recording driver lives (another run in the same folder); a pid reused
    by another process (start time differs) or owned by another user is left alone.
    """
    path = Path(run_dir) / PROCESS_FILE
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if _same(record.get("driver", {})) is not None and record["driver"]["pid"] != os.getpid():
        return []
    procs = [p for p in (_same(e) for e in record.get("processes", [])) if p is not None and p.pid != os.getpid()]
    kill_processes(procs, grace_s=0.0)  # Ray's agents ignore SIGTERM; a dead run's processes need no grace
    path.unlink(missing_ok=True)
    return [p.pid for p in procs]


def invoked_as(orig_argv: list[str] | None = None) -> str:
    """The ``earthrl`` program as the user started this process, for a command line to copy: the console
    script as typed (``.venv/bin/earthrl``; ``earthrl`` when that is what ``PATH`` finds), or
    ``<python> -m earthrl.launch``; ``earthrl`` for a process started otherwise (a job run from Python).

    Args:
        orig_argv: the interpreter's own arguments (default :data:`sys.orig_argv`, which the CLI's
            rewriting of ``sys.argv`` for Hydra leaves alone).
    """
    orig = list(sys.orig_argv if orig_argv is None else orig_argv)
    if "-m" in orig[:-1] and orig[orig.index("-m") + 1].startswith("earthrl.launch"):
        return shlex.join(orig[: orig.index("-m") + 2])
    if len(orig) >= 2 and Path(orig[1]).name == "earthrl":
        found = shutil.which("earthrl")
        return "earthrl" if found and Path(found).resolve() == Path(orig[1]).resolve() else shlex.quote(orig[1])
    return "earthrl"


class RunLifecycle:
    """Turns SIGINT/SIGTERM into a clean stop of one command's job (module doc).

    Args:
        command: the ``earthrl`` command (``train``, ``eval``, ``sft``, ``learn``, ``bench``).
        args: its arguments as the user gave them (they make the resume line).
        deadline_s: first signal → forced exit when the clean stop takes longer.

    Use as a context manager around the job; after a stop it ends the process (exit code 128 + signum,
    without the interpreter's exit handlers: the job's cleanup has run). Raises nothing of its own.
    """

    def __init__(self, command: str, args: list[str], deadline_s: float = STOP_DEADLINE_S) -> None:
        self.command, self.args, self.deadline_s = command, list(args), deadline_s
        self.where = "setup"
        self.run_dir: Path | None = None
        self.seen: dict[int, psutil.Process] = {}
        self.signum: int | None = None
        self.first_at = 0.0
        self.raised = False
        self.pending = False
        self.protect_depth = 0
        self.first_lock = threading.Lock()
        self.done = threading.Event()
        self.force_lock = threading.Lock()

    # ------------------------------------------------------------ entering and leaving
    def __enter__(self) -> RunLifecycle:
        global _active
        self.before = {p.pid for p in psutil.Process().children(recursive=True)}  # not this run's
        self.armed = threading.current_thread() is threading.main_thread()  # signals reach the main thread only
        _active = self
        if not self.armed:
            return self
        self.previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
        for s in STOP_SIGNALS:
            signal.signal(s, self._on_signal)
        self.rx, tx = socket.socketpair()
        tx.setblocking(False)
        self.tx = tx
        self.previous_fd = signal.set_wakeup_fd(tx.fileno(), warn_on_full_buffer=False)
        threading.Thread(target=self._watch, name="earthrl-stop-watchdog", daemon=True).start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        global _active
        stopped = isinstance(exc, RunInterrupted) or self.signum is not None
        self.snapshot()
        kill_processes([p for p in list(self.seen.values()) if p.is_running()], grace_s=1.0 if stopped else 3.0)
        if self.run_dir is not None:
            (self.run_dir / PROCESS_FILE).unlink(missing_ok=True)
        _active = None
        self.done.set()
        if self.armed:
            signal.set_wakeup_fd(self.previous_fd)
            for s, handler in self.previous.items():
                signal.signal(s, handler)
            self.tx.close()
        if stopped:  # exit now: what the stop abandoned (episodes in flight) must not run at the interpreter's exit
            signum = exc.signum if isinstance(exc, RunInterrupted) else self.signum
            print(self.resume_line(), flush=True)
            sys.stderr.flush()
            os._exit(128 + signum)

    def resume_line(self) -> str:
        """The one line printed after a stop: where it stopped and the command that continues it."""
        args = [a for a in self.args if not a.startswith(("trainer.resume=", "eval.resume="))]
        again = f"{invoked_as()} {shlex.join([self.command, *args])}"
        if self.command == "train":
            return f"interrupted at {self.where}: continue with {again} trainer.resume=auto"
        if self.command in ("eval", "learn"):
            return f"interrupted at {self.where}: continue with {again}"
        if self.command == "sft":
            return (f"interrupted at {self.where}: earthrl sft does not resume; empty sft.output_dir"
                    f"{'=' + str(self.run_dir) if self.run_dir else ''} and run {again}")
        return f"interrupted at {self.where}: nothing was written; run {again} again"

    # ------------------------------------------------------------ the job's side
    def attach(self, run_dir: Path) -> None:
        """Record this run's processes in ``run_dir`` from now on, after killing what a dead run left there."""
        self.run_dir = Path(run_dir)
        left = reap_leftovers(self.run_dir)
        if left:
            print(f"stopped {len(left)} processes a killed run left in {self.run_dir} (pids "
                  f"{', '.join(map(str, left))})", flush=True)
        self.record()

    def snapshot(self) -> None:
        """Remember every live descendant this run started (those Ray's shutdown orphans are killed too); what
        ran before the run (e.g. a Ray instance it reuses) and what that started are not the run's."""
        try:
            found = psutil.Process().children(recursive=True)
        except psutil.Error:
            return
        for p in found:
            try:
                if p.pid not in self.seen and not ({p.pid} | {q.pid for q in p.parents()}) & self.before:
                    self.seen[p.pid] = p
            except psutil.Error:
                pass

    def record(self) -> None:
        """Write the run's live processes to ``<run folder>/.processes.json`` (what the next start reaps)."""
        self.snapshot()
        if self.run_dir is None or not self.run_dir.is_dir():
            return
        entries = []
        for p in list(self.seen.values()):
            try:
                entries.append({"pid": p.pid, "started": p.create_time(), "name": p.name()})
            except psutil.Error:
                pass
        me = psutil.Process()
        record = {"driver": {"pid": me.pid, "started": me.create_time()}, "processes": entries}
        tmp = self.run_dir / f"{PROCESS_FILE}.tmp"
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self.run_dir / PROCESS_FILE)

    # ------------------------------------------------------------ signals
    def _on_signal(self, signum: int, frame) -> None:
        if not self.raised:  # the first signal (the watchdog may have noted it already)
            self.raised = True
            self._first(signum)
            if self.protect_depth:
                self.pending = True
                return
            raise RunInterrupted(self.signum)
        if time.monotonic() - self.first_at > REPEAT_S:
            self.force(f"second {signal.Signals(signum).name}")

    def _first(self, signum: int) -> None:
        with self.first_lock:
            if self.signum is not None:
                return
            self.signum, self.first_at = signum, time.monotonic()
        again = "Ctrl-C again" if signum == signal.SIGINT else "send it again"
        os.write(2, (f"\nearthrl {self.command}: {signal.Signals(signum).name} received, stopping (finishing the "
                     f"checkpoint being written, stopping the processes it started); {again} to exit at once\n").encode())

    def _watch(self) -> None:
        """Watchdog thread: counts signals from the wakeup socket, forces the exit on a second signal or when
        the stop overruns its deadline."""
        self.rx.settimeout(0.2)
        with self.rx:
            self._count_signals()

    def _count_signals(self) -> None:
        while not self.done.is_set():
            try:
                data = self.rx.recv(64)
            except (TimeoutError, BlockingIOError):
                data = b""
            except OSError:
                return
            for signum in data:
                if signum not in STOP_SIGNALS:
                    continue
                if self.signum is None:
                    self._first(signum)
                    self.snapshot()  # before the main thread's handler stops Ray
                    continue
                if time.monotonic() - self.first_at > REPEAT_S:
                    self.force(f"second {signal.Signals(signum).name}")
            if self.signum is not None and time.monotonic() - self.first_at > self.deadline_s:
                self.force(f"the stop took over {self.deadline_s:.0f} s")

    def force(self, why: str) -> None:
        """Kill every process of the run at once and exit with 128 + the first signal's number."""
        if self.done.is_set() or not self.force_lock.acquire(blocking=False):
            return
        os.write(2, f"earthrl {self.command}: {why}: killing the run's processes and exiting\n".encode())
        self.snapshot()
        kill_processes(list(self.seen.values()), grace_s=0.0)
        if self.run_dir is not None:
            (self.run_dir / PROCESS_FILE).unlink(missing_ok=True)
        try:
            sys.stdout.flush()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass
        os.write(1, (self.resume_line() + "\n").encode())
        os._exit(128 + (self.signum or signal.SIGINT))


# ---------------------------------------------------------------- the job's hooks (no-ops outside a run)
def attach(run_dir: Path) -> None:
    """:meth:`RunLifecycle.attach` of the active run, if any."""
    if _active is not None:
        _active.attach(run_dir)


def at(where: str) -> None:
    """Name the point the run reached (``step 3``) for the resume line; records the run's processes."""
    if _active is not None:
        _active.where = where
        _active.record()


@contextmanager
def protected():
    """A stop signal inside the block takes effect at its end (a checkpoint write is finished, not torn)."""
    run = _active
    if run is None:
        yield
        return
    run.protect_depth += 1
    try:
        yield
    finally:
        run.protect_depth -= 1
        if not run.protect_depth and run.pending:
            run.pending = False
            raise RunInterrupted(run.signum)
