"""The CodeAct sandbox: a persistent, isolated Python interpreter per episode (EarthRL issue 3,
item 8; action format of CodeAct, Wang et al. 2024, "Executable Code Actions Elicit Better LLM
Agents", §2).

One :class:`Sandbox` is one separate process (``python -I -B envs/sandbox_child.py``) that keeps
its variables between :meth:`Sandbox.exec` calls. Isolation layers (:attr:`Sandbox.isolation`
says which are in force; each is probed and skipped where the machine does not offer it):

- **Namespaces** (:func:`isolation_prefix`, ``unshare``): a new network namespace (no
  interfaces, loopback down: even 127.0.0.1 is unreachable) and a new PID namespace (the env
  and every other process are invisible; the interpreter is PID 1). Without root a user
  namespace is added.
- **Landlock** (:mod:`earthrl.envs.sandbox_landlock`, kernel LSM): at the kernel level the
  interpreter can read only the workspace, the ``read_roots`` and the Python installation, write
  only the workspace, make no TCP connection and signal no process outside the sandbox. Root
  and capabilities do not lift it.
- **pids cgroup** (:mod:`earthrl.envs.sandbox_cgroup`): processes + threads <=
  ``max_processes``. RLIMIT_NPROC does the same for a non-root uid; Linux does not enforce it
  for root, and the interpreter cannot drop to another uid on these machines because the Python
  installation lives under ``/root`` (mode 0700).
- **rlimits**: RLIMIT_AS (memory), RLIMIT_CPU (per exec, plus a lifetime cap), RLIMIT_FSIZE,
  RLIMIT_NOFILE, RLIMIT_NPROC, no core files.
- **Environment**: empty apart from PATH=/usr/bin:/bin, HOME=TMPDIR=workspace, LANG and
  single-thread BLAS settings; cwd = the workspace (mode 0700).
- **Audit hook** (PEP 578, installed before model code; :mod:`earthrl.envs.sandbox_child`):
  refuses sockets, writes outside the workspace, reads outside the readable roots, process
  creation, signals to other processes, ctypes symbol lookup and changing rlimits, with a clear
  ``sandbox_violation`` observation. Python code can dig out and disable a hook (PEP 578 says so);
  the layers above are the boundary.
- **Wall time**: enforced here; an exec past its limit has its process group killed, the
  observation says so, and the next exec starts a fresh interpreter (variables lost).

Tools are bound inside the interpreter as Python functions with the tool's keyword arguments
(the pydantic fields of :data:`earthrl.envs.tools.TOOLS`). A call sends ``{name, kwargs}`` over
the pipe; this process runs ``tool_handler(name, kwargs)`` (the env runs the real tool, records
the call and E) and sends back ``{"text", "data", "error", "error_kind"}``; the function returns
``data`` (a dict whose ``str()`` is ``text``) or raises ``ToolCallError`` (``.kind``,
``.message``). Messages are JSON lines, never pickles.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

from earthrl.envs.sandbox_cgroup import make_cgroup, remove_cgroup

CHILD = Path(__file__).with_name("sandbox_child.py")
LANDLOCK = Path(__file__).with_name("sandbox_landlock.py")
RESTART_NOTE = "Note: the interpreter was restarted; variables from earlier turns are lost."
ERROR_KINDS = ("sandbox_violation", "timeout", "memory", "code_error", "sandbox_crash",
               "tool_error", "schema_error", "hallucinated_path", "unknown_tool")
_MAX_MESSAGE = 16 * 2**20
_PATH = "/usr/bin:/bin"

ToolHandler = Callable[[str, dict], dict]


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandbox.

    Attributes:
        wall_s: wall-clock seconds per exec (time spent in the parent's tool handler excluded).
        cpu_s: CPU seconds per exec (soft RLIMIT_CPU, re-armed each exec; SIGXCPU -> timeout).
        cpu_total_s: CPU seconds over the interpreter's life (hard RLIMIT_CPU -> SIGKILL).
        memory_mb: address-space limit, MiB (RLIMIT_AS; an allocation past it is a MemoryError).
        file_mb: largest file the code may write, MiB (RLIMIT_FSIZE).
        max_processes: processes + threads of the interpreter (pids cgroup when available;
            RLIMIT_NPROC, which Linux does not enforce for a root uid).
        max_open_files: RLIMIT_NOFILE.
        max_capture_chars: printed characters kept per exec inside the child (the session
            truncates further to its observation budget).
        start_timeout_s: seconds to wait for a new interpreter to report ready.
    """

    wall_s: float = 30.0
    cpu_s: int = 30
    cpu_total_s: int = 1800
    memory_mb: int = 2048
    file_mb: int = 256
    max_processes: int = 64
    max_open_files: int = 256
    max_capture_chars: int = 100_000
    start_timeout_s: float = 30.0


@dataclass
class ExecResult:
    """Outcome of one exec.

    Attributes:
        stdout: printed output (stdout and stderr of the code).
        error: E(a,o) = 1: the code raised, the sandbox refused an action (even one the code
            caught), a limit stopped it, or a tool call failed (even one the code caught).
        error_kind: one of :data:`ERROR_KINDS` (``parse_error`` from the CodeAct parser) or None.
        message: the error text: traceback's last lines, the refusal, or the limit reached.
        tool_calls: every tool call the code made: ``{"name", "arguments", "error",
            "error_kind"}`` (arguments as the code passed them).
        notes: remarks for the agent (interpreter restarted, extra code blocks ignored).
        seconds: wall time of the exec, s.
    """

    stdout: str = ""
    error: bool = False
    error_kind: str | None = None
    message: str = ""
    tool_calls: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def observation(self) -> str:
        """What the agent sees: notes, printed output, then ``Error (<kind>): <message>``."""
        parts = [*self.notes, self.stdout.rstrip("\n")] if self.stdout else list(self.notes)
        if self.error:
            parts.append(f"Error ({self.error_kind}): {self.message}")
        return "\n".join(parts) or "(no output: print() the values you want to see)"

    def to_dict(self) -> dict:
        """Plain dict of the fields."""
        return asdict(self)


class _ChildGone(Exception):
    """The interpreter died (``exited``) or broke the protocol."""

    def __init__(self, message: str, exited: bool = False):
        super().__init__(message)
        self.exited = exited


@lru_cache(maxsize=1)
def isolation_prefix() -> tuple[str, ...]:
    """Command prefix that runs a program in new network + PID namespaces (``unshare --net
    --pid --fork --kill-child``, plus ``--user --map-root-user`` without root), or ``()`` when
    the machine does not allow it (no ``unshare``, user namespaces disabled, seccomp...)."""
    unshare = shutil.which("unshare", path=_PATH)
    if unshare is None:
        return ()
    flags = ["--net", "--pid", "--fork", "--kill-child"]
    if os.geteuid() != 0:
        flags = ["--user", "--map-root-user", *flags]
    cmd = (unshare, *flags, "--")
    try:
        ok = subprocess.run([*cmd, "true"], capture_output=True, timeout=10,
                            env={"PATH": _PATH}).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return cmd if ok else ()


def tool_spec(tool) -> dict:
    """What the interpreter needs to bind ``tool`` as a function: ``{"name", "params":
    [{"name", "required"}], "signature", "doc"}`` from the pydantic argument model."""
    params = [{"name": n, "required": f.is_required()}
              for n, f in tool.args_model.model_fields.items()]
    sig = ", ".join(p["name"] if p["required"] else f"{p['name']}=..." for p in params)
    return {"name": tool.name, "params": params, "signature": f"({sig})",
            "doc": tool.description}


def _user_process_count() -> int:
    uid = os.getuid()
    n = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    n += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                pass
    return n


def _json_default(x):
    return x.tolist() if hasattr(x, "tolist") else str(x)


class Sandbox:
    """A persistent sandboxed Python interpreter for one episode.

    Args:
        workspace: the episode's folder (created, mode 0700); the code's cwd and only writable
            place.
        limits: :class:`SandboxLimits`.
        tool_handler: ``handler(name, kwargs) -> {"text", "data", "error", "error_kind"}`` run in
            this process for every tool call of the code; it returns agent errors as
            ``error=True`` dicts and raises only for environment failures (then the exec stops,
            the interpreter is killed and the exception propagates). None: no tools bound.
        tools: name -> :class:`~earthrl.envs.tool_registry.Tool` to bind; default all of
            :data:`earthrl.envs.tools.TOOLS` when a handler is given.
        read_roots: extra folders the code may read (e.g. the task data); the workspace and the
            Python installation are always readable.
        isolate: use namespaces when the machine allows (:func:`isolation_prefix`).

    The interpreter starts on the first :meth:`exec` (or :meth:`start`) and restarts after a
    timeout or crash. Use as a context manager or call :meth:`close`.
    """

    def __init__(self, workspace: Path, limits: SandboxLimits = SandboxLimits(),
                 tool_handler: ToolHandler | None = None, *, tools: dict | None = None,
                 read_roots: Sequence[Path] = (), isolate: bool = True):
        self.workspace = Path(workspace).resolve()
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.workspace.chmod(0o700)
        self.limits = limits
        self.tool_handler = tool_handler
        if tools is None and tool_handler is not None:
            from earthrl.envs.tools import TOOLS as tools
        self.tool_specs = [tool_spec(t) for t in (tools or {}).values()]
        self.read_roots = [str(Path(r).resolve()) for r in read_roots]
        self.isolate = isolate
        self.prefix = isolation_prefix() if isolate else ()
        self.starts = 0
        self._execs = 0
        self._proc: subprocess.Popen | None = None
        self._buf = b""
        self._cgroup: Path | None = None
        self._in_cgroup = False
        self._landlock_abi = 0

    @property
    def isolation(self) -> dict:
        """Layers in force: ``{"netns", "pidns", "pids_cgroup" (process count bound by a pids
        cgroup), "landlock" (Landlock ABI applied, 0 = none), "audit_hook": True, "rlimits":
        True}``; the cgroup and Landlock entries are known once the interpreter has started."""
        on = bool(self.prefix)
        return {"netns": on, "pidns": on, "pids_cgroup": self._in_cgroup,
                "landlock": self._landlock_abi, "audit_hook": True, "rlimits": True}

    @property
    def alive(self) -> bool:
        """The interpreter process is running."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the interpreter (no-op when it runs).

        Raises:
            RuntimeError: it did not report ready within ``limits.start_timeout_s``.
        """
        if self.alive:
            return
        self._stop()
        ws = str(self.workspace)
        env = {"PATH": _PATH, "HOME": ws, "TMPDIR": ws, "LANG": "C.UTF-8",
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        lim = asdict(self.limits)
        if os.geteuid() != 0:  # RLIMIT_NPROC counts every process of the uid
            lim["max_processes"] += _user_process_count()
        self._proc = subprocess.Popen([*self.prefix, sys.executable, "-I", "-B", str(CHILD)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, env=env, cwd=ws,
                                      start_new_session=True, close_fds=True)
        self._buf = b""
        self.starts += 1
        self._cgroup = make_cgroup(self.limits.max_processes)
        try:
            self._send({"t": "init", "workspace": ws, "read_roots": self.read_roots,
                        "tools": self.tool_specs, "limits": lim,
                        "cgroup": str(self._cgroup) if self._cgroup else None,
                        "landlock": str(LANDLOCK) if self.isolate else None})
            msg = self._recv(time.monotonic() + self.limits.start_timeout_s)
        except _ChildGone as e:
            msg = e
        self._in_cgroup = isinstance(msg, dict) and msg.get("cgroup") is True
        self._landlock_abi = msg.get("landlock", 0) if isinstance(msg, dict) else 0
        if not isinstance(msg, dict) or msg.get("t") != "ready":
            self._stop()
            raise RuntimeError(f"the sandbox interpreter did not start ({msg or 'no answer'}); "
                               f"command: {' '.join(self.prefix)} {sys.executable} -I {CHILD}")

    def _send(self, obj: dict) -> None:
        data = (json.dumps(obj, default=_json_default) + "\n").encode()
        try:
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as e:
            raise _ChildGone(f"cannot write to the interpreter: {e}", exited=True) from None

    def _recv(self, deadline: float) -> dict | None:
        """Next message, or None when ``deadline`` (monotonic s) passes first."""
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise _ChildGone("the interpreter exited", exited=True)
            self._buf += chunk
            if len(self._buf) > _MAX_MESSAGE:
                raise _ChildGone("the interpreter sent an oversized message")
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            msg = json.loads(line)
        except ValueError:
            raise _ChildGone("the interpreter broke the protocol") from None
        if not isinstance(msg, dict):
            raise _ChildGone("the interpreter broke the protocol")
        return msg

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
        remove_cgroup(self._cgroup)
        self._cgroup = None

    def _exit_status(self, wait_s: float) -> str:
        """How the interpreter ended, e.g. ``killed by SIGSEGV`` (waits up to ``wait_s``)."""
        try:
            code = self._proc.wait(timeout=wait_s) if wait_s else self._proc.poll()
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            return "it was still running and has been stopped"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit status {code}"

    def _tool(self, msg: dict) -> tuple[dict, dict]:
        """Run one tool request; returns (reply to the child, call record)."""
        name, kwargs = msg.get("name"), msg.get("kwargs")
        if not isinstance(name, str) or not isinstance(kwargs, dict):
            raise _ChildGone("the interpreter sent a malformed tool request")
        if self.tool_handler is None:
            out = {"text": f"no tools are available in this sandbox (called {name})",
                   "error": True, "error_kind": "unknown_tool"}
        else:
            out = self.tool_handler(name, kwargs)
        err = bool(out.get("error"))
        kind = (out.get("error_kind") or "tool_error") if err else None
        reply = {"t": "tool_result", "text": str(out.get("text", "")),
                 "data": out.get("data") or {}, "error": err, "error_kind": kind}
        return reply, {"name": name, "arguments": kwargs, "error": err, "error_kind": kind}

    def exec(self, code: str, timeout_s: float | None = None) -> ExecResult:
        """Run ``code`` in the interpreter (variables persist between calls).

        Args:
            code: Python source.
            timeout_s: wall-clock limit, s (default ``limits.wall_s``).

        Returns:
            :class:`ExecResult`; never raises for anything the code does.

        Raises:
            RuntimeError: the interpreter cannot be started.
            Exception: whatever ``tool_handler`` raised (environment failure).
        """
        t0 = time.monotonic()
        notes = []
        if self._proc is not None and not self.alive:
            notes.append(RESTART_NOTE)
        self.start()
        wall = self.limits.wall_s if timeout_s is None else timeout_s
        calls, failures = [], []
        try:
            self._execs += 1
            exec_id = f"{self._execs}-{os.urandom(8).hex()}"
            self._send({"t": "exec", "id": exec_id, "code": code, "cpu_s": self.limits.cpu_s})
            deadline = time.monotonic() + wall
            while True:
                msg = self._recv(deadline)
                if msg is None:
                    self._stop()
                    return ExecResult("", True, "timeout", (
                        f"the code ran past the {wall:g} s wall-time limit and was stopped; the "
                        "interpreter restarts on the next turn, so variables from earlier turns "
                        "are lost"), calls, notes, time.monotonic() - t0)
                if msg.get("t") == "done":
                    if msg.get("id") == exec_id:
                        break
                    continue  # a stale or forged reply of an earlier exec
                if msg.get("t") != "tool":
                    raise _ChildGone("the interpreter sent an unexpected message")
                t_tool = time.monotonic()
                try:
                    reply, record = self._tool(msg)
                except _ChildGone:
                    raise
                except BaseException:
                    self._stop()
                    raise
                deadline += time.monotonic() - t_tool
                calls.append(record)
                if record["error"]:
                    failures.append((record["error_kind"], f"{record['name']}: {reply['text']}"))
                self._send(reply)
        except _ChildGone as e:
            status = self._exit_status(wait_s=1.0 if e.exited else 0.0)
            self._stop()
            return ExecResult("", True, "sandbox_crash", (
                f"{e} ({status}); the interpreter restarts on the next turn, so variables "
                "from earlier turns are lost"), calls, notes, time.monotonic() - t0)
        return self._result(msg, calls, failures, notes, time.monotonic() - t0)

    @staticmethod
    def _result(msg: dict, calls: list, failures: list, notes: list, seconds: float) -> ExecResult:
        stdout = msg.get("stdout") if isinstance(msg.get("stdout"), str) else ""
        err = msg.get("error") if isinstance(msg.get("error"), dict) else None
        violations = [v for v in msg.get("violations") or [] if isinstance(v, str)]
        if err is not None:
            kind = err.get("kind") if err.get("kind") in ERROR_KINDS else "code_error"
            return ExecResult(stdout, True, kind, str(err.get("message", "")), calls, notes,
                              seconds)
        if violations:
            return ExecResult(stdout, True, "sandbox_violation", "; ".join(violations), calls,
                              notes, seconds)
        if failures:
            kind, text = failures[0]
            return ExecResult(stdout, True, kind, f"tool call failed: {text}", calls, notes,
                              seconds)
        return ExecResult(stdout, False, None, "", calls, notes, seconds)

    def close(self) -> None:
        """Kill the interpreter (the workspace is left to its owner)."""
        self._stop()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self._stop()
        except Exception:
            pass
