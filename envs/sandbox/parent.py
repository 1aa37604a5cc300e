"""The CodeAct sandbox: a persistent, isolated Python interpreter per episode (EarthRL issues 3
and 9; action format of CodeAct, Wang et al. 2024, "Executable Code Actions Elicit Better LLM
Agents", §2).

One :class:`Sandbox` is one separate process (``python -I -B envs/sandbox/child.py``) that keeps
its variables between :meth:`Sandbox.exec` calls. Layers, outermost first
(:attr:`Sandbox.isolation` says which are in force):

- **bubblewrap** (:mod:`earthrl.envs.sandbox.bwrap`), the boundary: new user, mount, PID, IPC,
  UTS, network and cgroup namespaces, no capabilities, read-only binds (at their real paths) of
  what the interpreter needs (:mod:`earthrl.envs.sandbox.interpreter`), the system libraries and
  the ``read_roots``, the workspace the only writable bind, its own /proc and /dev, an empty
  size-capped /tmp, an empty environment, dies with the parent.
- **seccomp** (:mod:`earthrl.envs.sandbox.seccomp_filter`, loaded by bwrap): ptrace, mount, namespaces,
  keyrings, BPF, perf, io_uring, SysV IPC, non-UNIX sockets... kill the interpreter (SIGSYS); the
  parent counts that as a ``sandbox_violation``.
- **cgroups** (:mod:`earthrl.envs.sandbox.cgroup`): process + thread cap, freezer, CPU accounting
  (``/proc`` and SIGSTOP/SIGCONT where no cgroup is writable: :mod:`earthrl.envs.sandbox.procs`).
- **Landlock** (:mod:`earthrl.envs.sandbox.landlock`) and the **audit hook** (PEP 578,
  :mod:`earthrl.envs.sandbox.child`), inner layers for clear refusals (``sandbox_violation``
  observations naming the action), and **rlimits** (memory, CPU, file size, open files).

The sandbox never weakens by itself: where bubblewrap cannot run, :class:`Sandbox` refuses with
:class:`SandboxUnavailable` (one line naming why and the fix) unless ``allow_weaker=True``
(config ``env.format_options.sandbox.allow_weaker=true``), which runs on the kernel layers (``unshare``
network + PID namespaces and Landlock) if the machine offers both, or else on the audit hook and
rlimits, and says in one line what that backend lacks (:data:`LACKS`).

**Trust model of the protocol.** Messages are JSON lines on two pipes, never pickles. The model's
code runs in the same process as the child's runner, so it can write the protocol descriptor,
read any secret in the child's memory and impersonate the runner: nothing the child says is
trusted to *lower* E. The parent decides E(a,o) from what it observes itself: the tool calls it
ran (their errors, and its own refusals such as a link planted in the workspace), the budgets it
measures (wall time including tool time, tool calls, CPU seconds of all threads, workspace bytes,
bytes received), the interpreter's death (SIGSYS = forbidden system call, other signals, broken
protocol). What the child reports (its ``done`` message's error, ``violation`` messages the audit
hook sends the moment it refuses, before the code can react) may only *add* to E and to
:attr:`Sandbox.violations`, the parent's count. A forged ``done`` therefore ends the exec early with
the code's own output, never with "E=0" after a refusal the parent saw. A refusal by a kernel
layer that the code catches (EACCES, a path that does not exist in its mount namespace) is not
seen by the parent; it achieves nothing. The sandbox is frozen between execs and while the parent
runs a tool, so no thread of the code computes between turns or races the parent's file checks.

Tools are bound inside the interpreter as Python functions with the tool's keyword arguments
(the pydantic fields of :data:`earthrl.envs.tools.registry.TOOLS`). A call sends ``{name, kwargs}``; the
parent runs ``tool_handler(name, kwargs)`` (the env runs the real tool, records the call and E)
and sends back ``{"text", "data", "error", "error_kind"}``; the function returns ``data`` (a
dict whose ``str()`` is ``text``) or raises ``ToolCallError`` (``.kind``, ``.message``).
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path

from earthrl.envs.data.workspace_fs import workspace_usage
from earthrl.envs.sandbox.bwrap import INSTALL_HINT, bwrap_command, bwrap_probe
from earthrl.envs.sandbox.cgroup import SandboxCgroup
from earthrl.envs.sandbox.interpreter import interpreter_layout
from earthrl.envs.sandbox.landlock import landlock_abi
from earthrl.envs.sandbox.procs import cpu_s as proc_cpu_s
from earthrl.envs.sandbox.procs import descendants, signal_all, stop_tree
from earthrl.envs.sandbox.seccomp_filter import seccomp_fd
from earthrl.envs.tools.registry import TOOLS

CHILD = Path(__file__).with_name("child.py")
LANDLOCK = Path(__file__).with_name("landlock.py")
#: :mod:`earthrl.envs.tools.arg_bounds`, loaded by the interpreter to check a call's arguments
ARG_BOUNDS = Path(__file__).parents[1] / "tools" / "arg_bounds.py"
RESTART_NOTE = "Note: the interpreter was restarted; variables from earlier turns are lost."
LOST = "the interpreter restarts on the next turn, so variables from earlier turns are lost"
ERROR_KINDS = ("sandbox_violation", "timeout", "memory", "code_error", "sandbox_crash",
               "budget_exceeded", "tool_error", "schema_error", "hallucinated_path",
               "unknown_tool", "internal_error", "raster_too_large")
_PATH = "/usr/bin:/bin"
_SIGSYS = int(signal.SIGSYS)
log = logging.getLogger(__name__)

ToolHandler = Callable[[str, dict], dict]


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits and budgets of one sandbox; the parent measures and enforces each one.

    Attributes:
        wall_s: wall-clock seconds per exec, tool time included.
        episode_wall_s: wall-clock seconds of all execs of the sandbox together, tool time
            included; once used up every exec is refused.
        cpu_s: CPU seconds per exec of all processes and threads of the sandbox (the interpreter's
            own RLIMIT_CPU stops the code at this value and keeps the variables; the parent stops
            the interpreter at ``cpu_s`` + 1.5 s).
        cpu_episode_s: CPU seconds of all execs together (also the interpreter's hard RLIMIT_CPU).
        max_tool_calls: tool calls per exec; the next one stops the exec.
        max_tool_calls_episode: tool calls of all execs together.
        workspace_mb: disk quota of the workspace, MiB on disk (tool outputs included), measured
            after each tool call, every ``check_every_s`` while code runs and after each exec.
        max_workspace_files: files + folders in the workspace (same checks).
        max_output_bytes: bytes the interpreter may send the parent per exec (printed output and
            tool requests).
        memory_mb: address-space limit, MiB (RLIMIT_AS; an allocation past it is a MemoryError).
        file_mb: largest file the code may write, MiB (RLIMIT_FSIZE).
        max_processes: processes + threads of the sandbox (pids cgroup when available;
            RLIMIT_NPROC, which Linux does not enforce for a root uid).
        max_open_files: RLIMIT_NOFILE.
        max_capture_chars: printed characters kept per exec inside the child (the session
            truncates further to its observation budget).
        start_timeout_s: seconds to wait for a new interpreter to report ready.
        check_every_s: seconds between the parent's budget checks while code runs.

    Raises:
        ValueError: a limit that is not a positive number (names the field).
    """

    wall_s: float = 30.0
    episode_wall_s: float = 900.0
    cpu_s: float = 30.0
    cpu_episode_s: float = 1800.0
    max_tool_calls: int = 50
    max_tool_calls_episode: int = 500
    workspace_mb: float = 2048.0
    max_workspace_files: int = 10_000
    max_output_bytes: int = 8 * 2**20
    memory_mb: int = 2048
    file_mb: int = 256
    max_processes: int = 64
    max_open_files: int = 256
    max_capture_chars: int = 100_000
    start_timeout_s: float = 30.0
    check_every_s: float = 0.1

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"SandboxLimits.{f.name} must be a positive number, got {v!r}; "
                                 f"e.g. env.format_options.limits.{f.name}={f.default}")


@dataclass
class ExecResult:
    """Outcome of one exec.

    Attributes:
        stdout: printed output (stdout and stderr of the code).
        error: E(a,o) = 1: the code raised, the sandbox refused an action (even one the code
            caught), a budget or limit stopped it, or a tool call failed (even one the code caught).
        error_kind: one of :data:`ERROR_KINDS` (``parse_error`` from the CodeAct parser) or None.
        message: the error text: traceback's last lines, the refusal, or the limit reached.
        tool_calls: every tool call the code made: ``{"name", "arguments", "error",
            "error_kind"}`` (arguments as the code passed them).
        notes: remarks for the agent (interpreter restarted, extra code blocks ignored).
        seconds: wall time of the exec, tool time included, s.
        violations: sandbox violations the parent counted in this exec.
        cpu_s: CPU seconds the sandbox used in this exec (all threads).
    """

    stdout: str = ""
    error: bool = False
    error_kind: str | None = None
    message: str = ""
    tool_calls: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    violations: int = 0
    cpu_s: float = 0.0

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


@dataclass
class SandboxSettings:
    """How the CodeAct sandbox may run on this machine: the one settings object that config
    ``env.format_options.sandbox`` becomes and that the action format hands to each sandbox (its
    default lives in the config schema, ``earthrl.launch.config_schema.env``).

    Attributes:
        allow_weaker: where bubblewrap cannot run, run on a weaker backend that says what it lacks
            (:func:`sandbox_backend`); false: refuse with :class:`SandboxUnavailable`.
    """

    allow_weaker: bool


class SandboxUnavailable(RuntimeError):
    """Bubblewrap cannot isolate the interpreter on this machine and no weaker backend was
    allowed (``allow_weaker``)."""


class _ChildGone(Exception):
    """The interpreter died (``exited``) or broke the protocol (``violation``)."""

    def __init__(self, message: str, exited: bool = False, violation: bool = False):
        super().__init__(message)
        self.exited = exited
        self.violation = violation


class _Breach(Exception):
    """A budget the parent measures was passed: ``kind`` and the message naming the limit."""

    def __init__(self, kind: str, message: str, untrusted_files: bool = False):
        super().__init__(message)
        self.kind = kind
        self.untrusted_files = untrusted_files


@lru_cache(maxsize=1)
def isolation_prefix() -> tuple[str, ...]:
    """Command prefix that runs a program in new network + PID namespaces (``unshare --net
    --pid --fork --kill-child``, plus ``--user --map-root-user`` without root), or ``()`` when
    the machine does not allow it. The fallback when bubblewrap cannot run."""
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


#: what each backend other than bubblewrap lacks (said in one line whenever it is chosen)
LACKS = {
    "kernel": ("bubblewrap's mount, IPC and UTS namespaces (host files, SysV shared memory and "
               "UNIX sockets such as Ray's stay reachable), its seccomp filter and its "
               "capability drop"),
    "weaker": ("bubblewrap's namespaces, seccomp filter and capability drop, and network/PID "
               "namespaces or Landlock: the audit hook (which the code can switch off) and "
               "rlimits are what holds"),
}
USERNS_HINT = ("enable unprivileged user namespaces when not root (sysctl "
               "kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)")


@lru_cache(maxsize=2)
def sandbox_backend(allow_weaker: bool = False) -> str:
    """Which boundary the interpreter gets (probed once per process). Only ``"bwrap"`` is
    chosen by itself; where bubblewrap cannot run, ``allow_weaker`` (config
    ``env.format_options.sandbox.allow_weaker=true``) picks ``"kernel"`` (``unshare`` network + PID namespaces
    and Landlock, where both work) or else ``"weaker"``, and a warning line says what it lacks
    (:data:`LACKS`).

    Raises:
        SandboxUnavailable: bubblewrap cannot run and not ``allow_weaker``; one line naming why,
            the fixes and the setting.
    """
    ok, why = bwrap_probe()
    if ok:
        return "bwrap"
    backend = "kernel" if isolation_prefix() and landlock_abi() > 0 else "weaker"
    if not allow_weaker:
        raise SandboxUnavailable(
            f"the CodeAct sandbox needs bubblewrap and it cannot run here ({why}); "
            f"{INSTALL_HINT}, {USERNS_HINT}, or set env.format_options.sandbox.allow_weaker=true to run on the "
            f"{backend!r} backend, which lacks {LACKS[backend]}")
    log.warning("CodeAct sandbox on the %r backend (env.format_options.sandbox.allow_weaker=true; bubblewrap "
                "cannot run: %s): it lacks %s", backend, why, LACKS[backend])
    return backend


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


def _empty_folder(path: Path) -> None:
    """Delete everything inside ``path`` (links are removed, never followed)."""
    for entry in os.scandir(path):
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        except OSError:
            pass


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
        tools: name -> :class:`~earthrl.envs.tools.registry.Tool` to bind; default all of
            :data:`earthrl.envs.tools.registry.TOOLS` when a handler is given.
        read_roots: extra folders the code may read (e.g. the task data), by the given path or
            the real one where a symbolic link leads there; the workspace and the Python
            installation are always readable.
        isolate: use the isolation layers (False: audit hook and rlimits only, for debugging;
            needs ``allow_weaker``).
        allow_weaker: run on a backend other than bubblewrap where bubblewrap cannot run (see
            :func:`sandbox_backend`); :attr:`isolation` ``["lacks"]`` says what it lacks.

    Attributes:
        violations: sandbox violations the parent counted over the sandbox's life.
        usage: ``{"execs", "wall_s", "cpu_s", "tool_calls"}`` over the sandbox's life (the episode
            budgets of :class:`SandboxLimits`).

    Raises:
        SandboxUnavailable: see :func:`sandbox_backend`.
        ValueError: ``isolate=False`` without ``allow_weaker=True``.

    The interpreter starts on the first :meth:`exec` (or :meth:`start`) and restarts after a
    timeout, breach or crash. Use as a context manager or call :meth:`close`.
    """

    def __init__(self, workspace: Path, limits: SandboxLimits = SandboxLimits(),
                 tool_handler: ToolHandler | None = None, *, tools: dict | None = None,
                 read_roots: Sequence[Path] = (), isolate: bool = True,
                 allow_weaker: bool = False):
        if not isolate and not allow_weaker:
            raise ValueError("Sandbox(isolate=False) runs the code with only the audit hook and "
                             "rlimits; pass allow_weaker=True as well to mean it")
        self.backend = sandbox_backend(allow_weaker) if isolate else "weaker"
        self.workspace = Path(workspace).resolve()
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.workspace.chmod(0o700)
        self.limits = limits
        self.tool_handler = tool_handler
        if tools is None and tool_handler is not None:
            tools = TOOLS
        self.tool_specs = [tool_spec(t) for t in (tools or {}).values()]
        self.read_roots = [str(Path(r).resolve()) for r in read_roots]
        self._read_given = [os.path.abspath(r) for r in read_roots]  # links recreated by bwrap
        self.isolate = isolate
        self.prefix = isolation_prefix() if self.backend == "kernel" or (
            self.backend == "weaker" and isolate) else ()
        self.starts = 0
        self.violations = 0
        self.usage = {"execs": 0, "wall_s": 0.0, "cpu_s": 0.0, "tool_calls": 0}
        self._proc: subprocess.Popen | None = None
        self._buf = b""
        self._rx = 0
        self._cgroup: SandboxCgroup | None = None
        self._seccomp = False
        self._landlock_abi = 0
        self._stopped: list[int] = []
        self._cpu_used = 0.0

    @property
    def isolation(self) -> dict:
        """Layers in force: ``{"backend": "bwrap" | "kernel" | "weaker", "lacks": what the
        backend lacks ("" for bwrap; :data:`LACKS`), "bwrap", "seccomp", "netns", "pidns",
        "mountns", "ipcns", "pids_cgroup", "freezer": "cgroup" | "signals", "cpu_accounting":
        "cgroup" | "proc", "landlock": ABI (0 = none), "audit_hook", "rlimits"}``; the cgroup,
        seccomp and Landlock entries are known once the interpreter has started."""
        bw = self.backend == "bwrap"
        ns = bw or bool(self.prefix)
        cg = self._cgroup
        return {"backend": self.backend, "lacks": LACKS.get(self.backend, ""), "bwrap": bw,
                "seccomp": self._seccomp, "netns": ns, "pidns": ns, "mountns": bw, "ipcns": bw,
                "pids_cgroup": bool(cg and cg.has("pids")),
                "freezer": "cgroup" if cg and cg.has("freezer") else "signals",
                "cpu_accounting": "cgroup" if cg and cg.has("cpu") else "proc",
                "landlock": self._landlock_abi, "audit_hook": True, "rlimits": True}

    @property
    def alive(self) -> bool:
        """The interpreter process is running."""
        return self._proc is not None and self._proc.poll() is None

    # -- process control ----------------------------------------------------------------
    def _wrapped(self) -> bool:
        return self.backend == "bwrap" or bool(self.prefix)

    def _members(self) -> list[int]:
        """Pids of the sandbox's processes (the wrapper process outside excluded)."""
        procs = self._cgroup.procs() if self._cgroup else None
        if procs is not None:
            return procs
        kids = descendants(self._proc.pid)
        return kids if self._wrapped() else [self._proc.pid, *kids]

    def _freeze(self, frozen: bool, proc: subprocess.Popen | None = None) -> None:
        """Stop (or continue) every process and thread of the sandbox."""
        proc = proc or self._proc
        if proc is None:
            return
        if self._cgroup is not None and self._cgroup.freeze(frozen):
            return
        if frozen:
            self._stopped = stop_tree(proc.pid, include_root=not self._wrapped())
        else:
            members = self._cgroup.procs() if self._cgroup else None
            signal_all(set(self._stopped) | set(members or descendants(proc.pid)) | {proc.pid},
                       signal.SIGCONT)
            self._stopped = []

    def _cpu_now(self) -> float:
        """CPU seconds used so far by the sandbox's processes (all threads)."""
        value = self._cgroup.cpu_s() if self._cgroup is not None else None
        return value if value is not None else proc_cpu_s(self._members())

    def start(self) -> None:
        """Start the interpreter (no-op when it runs), frozen until the next exec.

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
        prefix, fds = list(self.prefix), ()
        if self.backend == "bwrap":
            sfd = seccomp_fd()
            fds = (sfd,) if sfd is not None else ()
            prefix = bwrap_command(ws, self._read_given, [os.path.realpath(p) for p in
                                   (CHILD, LANDLOCK, ARG_BOUNDS)], env, sfd,
                                   tmp_bytes=16 * 2**20)
            self._seccomp = sfd is not None
        exe = interpreter_layout().exe if self.backend == "bwrap" else sys.executable
        try:
            self._proc = subprocess.Popen([*prefix, exe, "-I", "-B", str(CHILD)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, env=env, cwd=ws,
                                          start_new_session=True, close_fds=True, pass_fds=fds)
        finally:
            for fd in fds:
                os.close(fd)
        self._buf, self._rx = b"", 0
        self.starts += 1
        self._cgroup = SandboxCgroup(self.limits.max_processes)
        deadline = time.monotonic() + self.limits.start_timeout_s
        try:
            msg = self._recv(deadline, 1 << 20)
            if isinstance(msg, dict) and msg.get("t") == "hello":
                self._cgroup.add(self._members())  # before any model code or thread exists
                self._send({"t": "init", "workspace": ws, "read_roots": self.read_roots,
                            "tools": self.tool_specs, "limits": lim,
                            "landlock": str(LANDLOCK) if self.isolate else None,
                            "arg_bounds": str(ARG_BOUNDS)})
                msg = self._recv(deadline, 1 << 20)
        except _ChildGone as e:
            msg = e
        self._landlock_abi = msg.get("landlock", 0) if isinstance(msg, dict) else 0
        if not isinstance(msg, dict) or msg.get("t") != "ready":
            self._stop()
            raise RuntimeError(f"the sandbox interpreter did not start ({msg or 'no answer'}); "
                               f"backend {self.backend}: {' '.join(prefix[:1])} "
                               f"{exe} -I {CHILD}")
        self._freeze(True)

    def _send(self, obj: dict) -> None:
        data = (json.dumps(obj, default=_json_default) + "\n").encode()
        try:
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as e:
            raise _ChildGone(f"cannot write to the interpreter: {e}", exited=True) from None

    def _recv(self, deadline: float, max_bytes: int) -> dict | None:
        """Next message, or None when ``deadline`` (monotonic s) passes first.

        Raises:
            _ChildGone: the interpreter exited or sent something that is not a JSON object
                (or one nested too deep to decode).
            _Breach: more than ``max_bytes`` received since the counter was reset.
        """
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise _ChildGone("the interpreter exited", exited=True)
            self._buf += chunk
            self._rx += len(chunk)
            if self._rx > max_bytes:
                raise _Breach("budget_exceeded", (
                    f"the code sent more than {max_bytes} bytes of output and tool requests in "
                    f"one exec (SandboxLimits.max_output_bytes={max_bytes}) and was stopped; "
                    f"print less; {LOST}"))
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):  # the runner never nests past arg_bounds.MAX_DEPTH
            raise _ChildGone("the interpreter broke the protocol", violation=True) from None
        if not isinstance(msg, dict):
            raise _ChildGone("the interpreter broke the protocol", violation=True)
        return msg

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._freeze(False, proc)  # after the kill: frozen tasks die only once thawed
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
        if self._cgroup is not None:
            self._cgroup.remove()
        self._cgroup = None

    def _exit_status(self, wait_s: float) -> tuple[str, int | None]:
        """How the interpreter ended and the signal that killed it, e.g. ``("killed by SIGSEGV",
        11)`` (waits up to ``wait_s``)."""
        try:
            code = self._proc.wait(timeout=wait_s) if wait_s else self._proc.poll()
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            return "it was still running and has been stopped", None
        if self.backend == "bwrap" and 128 < code < 128 + 65:  # bwrap exits 128 + signal
            code = 128 - code
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}", -code
            except ValueError:
                return f"killed by signal {-code}", -code
        return f"exit status {code}", None

    # -- budgets --------------------------------------------------------------------------
    def _episode_left(self) -> str | None:
        """Why no exec may run any more (an episode budget used up), or None."""
        lim, u = self.limits, self.usage
        if u["wall_s"] >= lim.episode_wall_s:
            return (f"the episode used its {lim.episode_wall_s:g} s of sandbox wall time "
                    f"(SandboxLimits.episode_wall_s={lim.episode_wall_s:g}); no more code runs "
                    "in this episode: give the answer")
        if u["cpu_s"] >= lim.cpu_episode_s:
            return (f"the episode used its {lim.cpu_episode_s:g} CPU seconds "
                    f"(SandboxLimits.cpu_episode_s={lim.cpu_episode_s:g}); no more code runs in "
                    "this episode: give the answer")
        if u["tool_calls"] >= lim.max_tool_calls_episode:
            return (f"the episode made its {lim.max_tool_calls_episode} tool calls "
                    f"(SandboxLimits.max_tool_calls_episode={lim.max_tool_calls_episode}); no "
                    "more code runs in this episode: give the answer")
        return None

    def _check(self, deadline: float, wall: float, wall_name: str, cpu0: float,
               tool_calls: int) -> None:
        """Raise :class:`_Breach` for the first budget passed (wall, tool calls, CPU, disk)."""
        lim = self.limits
        if time.monotonic() >= deadline:
            raise _Breach("timeout", (
                f"the code ran past the {wall:g} s wall-time limit (SandboxLimits.{wall_name}="
                f"{getattr(lim, wall_name):g}, tool time included) and was stopped; {LOST}"))
        if tool_calls > lim.max_tool_calls:
            raise _Breach("budget_exceeded", (
                f"the code made more than {lim.max_tool_calls} tool calls in one exec "
                f"(SandboxLimits.max_tool_calls={lim.max_tool_calls}) and was stopped; {LOST}"))
        if self.usage["tool_calls"] + tool_calls > lim.max_tool_calls_episode:
            raise _Breach("budget_exceeded", (
                f"the episode made more than {lim.max_tool_calls_episode} tool calls "
                f"(SandboxLimits.max_tool_calls_episode={lim.max_tool_calls_episode}); the code "
                "was stopped"))
        used = self._cpu_used = self._cpu_now() - cpu0
        if used > lim.cpu_s + 1.5:
            raise _Breach("timeout", (
                f"the code used {used:.1f} CPU seconds, past the {lim.cpu_s:g} s CPU limit of an "
                f"exec (SandboxLimits.cpu_s={lim.cpu_s:g}, all threads) and was stopped; {LOST}"))
        if self.usage["cpu_s"] + used > lim.cpu_episode_s:
            raise _Breach("timeout", (
                f"the episode used more than its {lim.cpu_episode_s:g} CPU seconds "
                f"(SandboxLimits.cpu_episode_s={lim.cpu_episode_s:g}); the code was stopped"))
        quota = int(lim.workspace_mb * 2**20)
        size, entries = workspace_usage(self.workspace, stop_bytes=quota)
        if size > quota or entries > lim.max_workspace_files:
            what = (f"{size} bytes, past the {lim.workspace_mb:g} MiB disk quota "
                    f"(SandboxLimits.workspace_mb={lim.workspace_mb:g})") if size > quota else (
                f"{entries} files, past SandboxLimits.max_workspace_files="
                f"{lim.max_workspace_files}")
            raise _Breach("budget_exceeded", (
                f"the workspace holds {what}; the code was stopped and the workspace emptied "
                f"(its files are not trusted; earlier artifacts must be re-created); {LOST}"),
                untrusted_files=True)

    # -- exec -----------------------------------------------------------------------------
    def _tool(self, msg: dict) -> tuple[dict, dict]:
        """Run one tool request; returns (reply to the child, call record)."""
        name, kwargs = msg.get("name"), msg.get("kwargs")
        if not isinstance(name, str) or not isinstance(kwargs, dict):
            raise _ChildGone("the interpreter sent a malformed tool request", violation=True)
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
            timeout_s: wall-clock limit, s (default ``limits.wall_s``; the episode's remaining
                wall time caps it).

        Returns:
            :class:`ExecResult`; never raises for anything the code does.

        Raises:
            RuntimeError: the interpreter cannot be started.
            Exception: whatever ``tool_handler`` raised (environment failure), or a fault of
                the bridge; the interpreter is stopped first, so the next exec starts afresh.
        """
        t0 = time.monotonic()
        notes: list[str] = []
        used_up = self._episode_left()
        if used_up:
            return ExecResult("", True, "budget_exceeded", used_up, notes=notes)
        if self._proc is not None and not self.alive:
            notes.append(RESTART_NOTE)
        self.start()
        wall, wall_name = (self.limits.wall_s if timeout_s is None else timeout_s), "wall_s"
        left = self.limits.episode_wall_s - self.usage["wall_s"]
        if left < wall:
            wall, wall_name = left, "episode_wall_s"
        calls: list[dict] = []
        failures: list[tuple[str, str]] = []  # (kind, text) observed or reported, in order
        violations: list[str] = []
        cpu0 = self._cpu_now()
        self._rx, self._cpu_used = 0, 0.0
        result = None
        try:
            self.usage["execs"] += 1
            exec_id = f"{self.usage['execs']}-{os.urandom(8).hex()}"
            self._freeze(False)
            self._send({"t": "exec", "id": exec_id, "code": code, "cpu_s": self.limits.cpu_s})
            deadline = t0 + wall
            while True:
                tick = min(deadline, time.monotonic() + self.limits.check_every_s)
                msg = self._recv(tick, self.limits.max_output_bytes)
                if msg is None:
                    self._check(deadline, wall, wall_name, cpu0, len(calls))
                    continue
                kind = msg.get("t")
                if kind == "done":
                    if msg.get("id") == exec_id:
                        break
                    continue  # a stale reply of an earlier exec
                if kind == "violation":
                    violations.append(str(msg.get("text", "sandbox: refused"))[:500])
                    continue
                if kind != "tool":
                    raise _ChildGone("the interpreter sent an unexpected message", violation=True)
                self._check(deadline, wall, wall_name, cpu0, len(calls) + 1)
                self._freeze(True)  # no thread of the code runs while the parent runs a tool
                reply, record = self._tool(msg)
                calls.append(record)
                if record["error"]:
                    failures.append((record["error_kind"], f"{record['name']}: {reply['text']}"))
                    if record["error_kind"] == "sandbox_violation":
                        violations.append(f"{record['name']}: {reply['text']}")
                self._check(deadline, wall, wall_name, cpu0, len(calls))
                self._freeze(False)
                self._send(reply)
            self._freeze(True)
            self._check(float("inf"), wall, wall_name, cpu0, len(calls))
        except _Breach as b:
            self._stop()
            if b.untrusted_files:
                _empty_folder(self.workspace)
            result = ExecResult("", True, b.kind, str(b), calls, notes)
        except _ChildGone as e:
            status, sig = self._exit_status(wait_s=1.0 if e.exited else 0.0)
            self._stop()
            if sig == _SIGSYS:
                violations.append(f"sandbox: the code made a forbidden system call and the "
                                  f"interpreter was killed ({status}); {LOST}")
            elif e.violation:
                violations.append(f"sandbox: {e}: only the sandbox's runner may write its "
                                  f"channel; {LOST}")
            else:
                result = ExecResult("", True, "sandbox_crash", f"{e} ({status}); {LOST}", calls,
                                    notes)
            msg = {}
        except BaseException:
            # an environment failure (a tool handler's exception, a bug here): the interpreter
            # may wait for a reply that never comes, so it is stopped and the next exec starts
            # a fresh one instead of talking past it
            self._stop()
            raise
        if result is None:
            result = self._result(msg, calls, failures, violations, notes)
        result.seconds = time.monotonic() - t0
        result.violations = len(violations) or int(result.error_kind == "sandbox_violation")
        self.violations += result.violations
        self._account(result, cpu0, len(calls))
        return result

    def _account(self, result: ExecResult, cpu0: float, n_calls: int) -> None:
        """Add the exec's wall time, CPU and tool calls to :attr:`usage`."""
        result.cpu_s = max(0.0, self._cpu_now() - cpu0 if self._proc else self._cpu_used)
        self.usage["wall_s"] += result.seconds
        self.usage["cpu_s"] += result.cpu_s
        self.usage["tool_calls"] += n_calls

    @staticmethod
    def _result(msg: dict, calls: list, failures: list, violations: list,
                notes: list) -> ExecResult:
        """E from the parent's own observations (violations, tool failures); the child's
        ``done`` error can only add to them."""
        stdout = msg.get("stdout") if isinstance(msg.get("stdout"), str) else ""
        err = msg.get("error") if isinstance(msg.get("error"), dict) else None
        if violations:
            return ExecResult(stdout, True, "sandbox_violation", "; ".join(violations[:5]),
                              calls, notes)
        if err is not None:
            kind = err.get("kind") if err.get("kind") in ERROR_KINDS else "code_error"
            return ExecResult(stdout, True, kind, str(err.get("message", "")), calls, notes)
        if failures:
            kind, text = failures[0]
            return ExecResult(stdout, True, kind, f"tool call failed: {text}", calls, notes)
        return ExecResult(stdout, False, None, "", calls, notes)

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
