"""The interpreter side of the CodeAct sandbox (run by :class:`earthrl.envs.sandbox.parent.Sandbox`).

Started as ``python -I child.py`` (isolated mode: no PYTHON* variables, no user site),
with an empty environment, cwd = the episode workspace, inside a network + PID namespace when
the machine allows it. It imports nothing of EarthRL. Protocol: newline-delimited JSON on the
inherited stdin/stdout pipes (moved to private descriptors; fds 0-2 then point at /dev/null so
stray writes cannot corrupt it). Never pickle: the parent must not unpickle untrusted bytes.

Child -> parent first: ``{"t": "hello"}`` (the parent then puts the process into the sandbox's
cgroups). Parent -> child: ``{"t": "init", ...}`` once, then ``{"t": "exec", "id", "code",
"cpu_s"}`` and ``{"t": "tool_result", "text", "data", "error", "error_kind"}`` answers to tool
requests. Child -> parent: ``{"t": "ready", "pid", "landlock": ABI}``, ``{"t": "tool", "name",
"kwargs"}``, ``{"t": "violation", "text"}`` (sent by the audit hook the moment it refuses, before
the code can catch the refusal), and ``{"t": "done", "id", "stdout", "error": None | {"kind",
"message"}}``. The parent trusts none of it to lower E (see :mod:`earthrl.envs.sandbox.parent`).

Guards installed before any model code runs (``sys.addaudithook``, PEP 578): no sockets; no
fork/exec/spawn/subprocess/os.system; os.kill/killpg only of itself; writes (open for writing,
remove, rename, mkdir, chmod, links, truncate, utime, rmtree) only inside the workspace; reads and
directory listings only inside the workspace, the ``read_roots`` and the Python installation; no
ctypes symbol lookup or raw-memory access; no resource.setrlimit. rlimits: RLIMIT_AS (memory),
RLIMIT_CPU (soft re-armed per exec, hard = the interpreter's lifetime budget; SIGXCPU raises
:class:`CpuTimeExceeded`), RLIMIT_FSIZE (SIGXFSZ ignored so a big write fails with EFBIG),
RLIMIT_NOFILE, RLIMIT_NPROC, RLIMIT_CORE=0. Then Landlock (``init["landlock"]`` = path of
:mod:`earthrl.envs.sandbox.landlock`) confines
file access to the same readable roots and the writable workspace at the kernel level, with no
TCP and no signals outside the sandbox. Audit hooks are not a security boundary (PEP 578 says
so): they give clear refusals; bubblewrap, seccomp, the cgroups and Landlock are the boundary.
The hook's ``trusted`` switch is per thread: threads the code starts are always checked.
"""

import difflib
import io
import json
import linecache
import math
import os
import resource
import signal
import sys
import threading
import traceback

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PROCESS_EVENTS = {"os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
                   "os.startfile", "subprocess.Popen", "pty.spawn", "os.setns", "os.unshare"}
# event -> indexes of the path arguments that must lie inside the workspace
_WRITE_EVENTS = {"os.remove": (0,), "os.rename": (0, 1), "os.mkdir": (0,), "os.rmdir": (0,),
                 "os.chmod": (0,), "os.chown": (0,), "os.link": (0, 1), "os.symlink": (0, 1),
                 "os.truncate": (0,), "os.utime": (0,), "os.chflags": (0,), "os.lchown": (0,),
                 "os.setxattr": (0,), "os.removexattr": (0,), "shutil.rmtree": (0,),
                 "shutil.copyfile": (1,), "shutil.copymode": (1,), "shutil.copystat": (1,),
                 "shutil.copytree": (1,), "shutil.move": (0, 1), "shutil.chown": (0,)}
_READ_EVENTS = {"os.listdir": 0, "os.scandir": 0, "os.chdir": 0, "os.listxattr": 0,
                "glob.glob": 0, "os.getxattr": 0}
_SYSTEM_READ = ("/usr/lib", "/usr/lib64", "/usr/share", "/lib", "/lib64", "/etc/localtime",
                "/etc/ld.so.cache", "/dev/null", "/dev/urandom", "/dev/zero", "/proc/self",
                "/sys/devices/system/cpu")


class SandboxViolation(PermissionError):
    """An action the sandbox refuses (network, write outside the workspace, process, signal...)."""


class EnvironmentVariableMissing(KeyError):
    """Reading an environment variable the sandbox does not have (parent variables are not
    passed)."""

    def __str__(self):
        return self.args[0]


class CpuTimeExceeded(BaseException):
    """The exec used its CPU-time budget (SIGXCPU from RLIMIT_CPU)."""


class ToolCallError(Exception):
    """A tool call failed. Attributes: ``kind`` (``tool_error``, ``schema_error``,
    ``hallucinated_path`` ...) and ``message``."""

    def __init__(self, kind, message):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class ToolOutput(dict):
    """A tool's structured result (a dict); ``str()``/``print`` show the tool's summary text."""

    def __init__(self, data, text):
        super().__init__(data)
        self.text = text

    def __str__(self):
        return self.text or dict.__repr__(self)


class _Capture(io.TextIOBase):
    """stdout of a cell, kept up to ``cap`` characters (the rest is counted, not stored)."""

    def __init__(self, cap):
        self.cap, self.parts, self.kept, self.dropped = cap, [], 0, 0

    def writable(self):
        return True

    def write(self, s):
        s = str(s)
        room = self.cap - self.kept
        if len(s) <= room:
            self.parts.append(s)
            self.kept += len(s)
        else:
            self.parts.append(s[:max(room, 0)])
            self.kept += max(room, 0)
            self.dropped += len(s) - max(room, 0)
        return len(s)

    def value(self):
        text = "".join(self.parts)
        return text + (f"\n…[{self.dropped} more characters not kept]" if self.dropped else "")


class _SandboxEnviron(type(os.environ)):
    def __getitem__(self, key):
        try:
            return super().__getitem__(key)
        except KeyError:
            raise EnvironmentVariableMissing(
                f"environment variable {key!r} is not available: the sandbox starts with an empty "
                "environment (no variables of the parent process)") from None


def readable_roots(workspace, read_roots):
    """Real paths the code may read: the workspace, ``read_roots``, the Python installation
    and a few system files (shared libraries, time zone, CPU topology, /dev/null)."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    prefixes |= {p for p in sys.path if p.startswith(tuple(prefixes))}
    return tuple(sorted({os.path.realpath(p) for p in
                         [workspace, *read_roots, *prefixes, *_SYSTEM_READ]}))


def _load(name, module_path):
    """The standalone EarthRL module at ``module_path``, loaded by path (before the audit hook
    and Landlock are in force); None when no path is given."""
    if not module_path:
        return None
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_earthrl_sandbox_{name}", module_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _landlock(module_path, workspace, read_roots):
    """Apply Landlock (:mod:`earthrl.envs.sandbox.landlock`, loaded by path); the ABI applied,
    0 when unavailable or refused (the parent reports it in ``Sandbox.isolation``)."""
    mod = _load("landlock", module_path)
    if mod is None:
        return 0
    ws = os.path.realpath(workspace)
    try:
        return mod.restrict([p for p in readable_roots(ws, read_roots) if p != ws], [ws])
    except OSError:  # a kernel that refuses a rule: run with the other layers (reported as 0)
        return 0


class _Guard:
    """The audit hook. ``trusted`` is True while the child's own code runs in the main thread
    (protocol, traceback formatting); other threads are never trusted. Each refusal is sent to
    the parent at once through ``report``."""

    def __init__(self, workspace, read_roots, protocol_fds, report):
        self.workspace = os.path.realpath(workspace)
        self.read_roots = readable_roots(self.workspace, read_roots)
        self.protocol_fds = set(protocol_fds)
        self.pid = os.getpid()
        self.report = report
        self._local = threading.local()
        self._local.trusted = True

    @property
    def trusted(self):
        return getattr(self._local, "trusted", False)

    @trusted.setter
    def trusted(self, value):
        self._local.trusted = value

    @staticmethod
    def _under(path, roots):
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)

    def _resolve(self, path):
        if isinstance(path, int) or path is None:
            return path
        return os.path.realpath(os.fsdecode(path))

    def _refuse(self, what):
        msg = f"sandbox: {what}"
        try:
            self.report({"t": "violation", "text": msg})
        except OSError:
            pass
        raise SandboxViolation(msg)

    def _check_write(self, path, event):
        p = self._resolve(path)
        if isinstance(p, int) or p is None:
            return
        if not self._under(p, (self.workspace,)):
            self._refuse(f"writing outside the episode workspace is not allowed ({event} {p}); "
                         "write files under the current directory")

    def _check_read(self, path, event):
        p = self._resolve(path)
        if p is None or isinstance(p, int):
            return
        if not self._under(p, self.read_roots):
            self._refuse(f"reading {p} is not allowed ({event}); only the episode workspace and "
                         "the task data are readable")

    def __call__(self, event, args):
        if self.trusted:
            return
        if event == "open":
            path, mode, flags = args
            if isinstance(path, int):
                if path in self.protocol_fds:
                    self._refuse("the sandbox's own channel cannot be opened")
                return
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                bool((flags or 0) & _WRITE_FLAGS)
            (self._check_write if writing else self._check_read)(path, "open")
        elif event in _WRITE_EVENTS:
            for i in _WRITE_EVENTS[event]:
                if i < len(args):
                    self._check_write(args[i], event)
        elif event in _READ_EVENTS:
            self._check_read(args[_READ_EVENTS[event]], event)
        elif event.startswith("socket.") and event != "socket.gethostname":
            self._refuse(f"network access is not allowed ({event})")
        elif event in _PROCESS_EVENTS:
            self._refuse(f"starting processes is not allowed ({event})")
        elif event in ("os.kill", "os.killpg", "signal.pthread_kill"):
            if not (event == "os.kill" and args[0] == self.pid):
                self._refuse(f"sending signals to other processes is not allowed ({event} "
                             f"{args[0]})")
        elif event.startswith(("ctypes.dlsym", "ctypes.cdata", "ctypes.dlopen")):
            if not (event == "ctypes.dlopen" and args[0] is None):
                self._refuse(f"native code access is not allowed ({event})")
        elif event in ("resource.setrlimit", "resource.prlimit", "sys.addaudithook"):
            self._refuse(f"changing the sandbox's limits or hooks is not allowed ({event})")


class _Channel:
    def __init__(self, rfd, wfd):
        self.r = os.fdopen(rfd, "rb")
        self.wfd = wfd
        self.lock = threading.Lock()  # one tool request/reply at a time
        self.wlock = threading.Lock()  # whole lines from several threads

    def send(self, obj):
        data = (json.dumps(obj, default=_jsonable) + "\n").encode()
        with self.wlock:
            while data:
                data = data[os.write(self.wfd, data):]

    def recv(self):
        line = self.r.readline()
        if not line:
            os._exit(0)  # the parent is gone
        return json.loads(line)


def _jsonable(x):
    for attr in ("tolist", "item"):  # numpy scalars/arrays
        if hasattr(x, attr):
            return getattr(x, attr)()
    if isinstance(x, (set, tuple)):
        return list(x)
    raise TypeError(f"{type(x).__name__} is not JSON-serializable; pass numbers, strings, lists "
                    "or dicts")


def _payload(name, kw, bounds):
    """``kw`` as the JSON the parent receives, or ``ToolCallError("schema_error")`` naming the
    argument: one past a bound of ``bounds`` (:mod:`earthrl.envs.tools.arg_bounds`, checked
    before and after the conversion of numpy values) or one JSON cannot carry."""
    def check(values):
        problems = bounds.argument_problems(values) if bounds is not None else {}
        if problems:
            raise ToolCallError("schema_error", bounds.problem_message(name, problems))

    check(kw)
    payload = {}
    for key, value in kw.items():
        try:
            payload[key] = json.loads(json.dumps(value, default=_jsonable))
        except (TypeError, ValueError, RecursionError) as e:
            raise ToolCallError("schema_error", f"{name}: argument {key!r} cannot be passed to "
                                f"the tool ({type(e).__name__}: {e})") from None
    check(payload)
    return payload


def _tool_function(spec, channel, guard, bounds=None):
    """A Python function ``name(*args, **kwargs)`` that asks the parent to run the tool.
    Positional arguments take the tool's argument names in order; the parent validates them
    (a missing or unknown argument comes back as a ``schema_error``); values past a bound of
    ``bounds`` never leave the interpreter (:func:`_payload`)."""
    name = spec["name"]
    names = [p["name"] for p in spec["params"]]

    def call(*args, **kwargs):
        if len(args) > len(names):
            raise ToolCallError("schema_error", f"{name}{spec['signature']} takes at most "
                                f"{len(names)} positional arguments, got {len(args)}")
        dup = [n for n in names[:len(args)] if n in kwargs]
        if dup:
            raise ToolCallError("schema_error", f"{name}: argument {dup[0]!r} given twice")
        payload = _payload(name, {**dict(zip(names, args)), **kwargs}, bounds)
        with channel.lock:  # one request/reply at a time, even from threads of the code
            guard.trusted = True
            try:
                channel.send({"t": "tool", "name": name, "kwargs": payload})
                reply = channel.recv()
            finally:
                guard.trusted = False
        if reply.get("error"):
            raise ToolCallError(reply.get("error_kind") or "tool_error", reply.get("text", ""))
        return ToolOutput(reply.get("data") or {}, reply.get("text", ""))

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"{name}{spec['signature']}: {spec.get('doc', '')}"
    return call


def _classify(exc, cell_names, tool_names):
    """(kind, message) of an uncaught exception: the traceback's last lines, cell frames only."""
    if isinstance(exc, CpuTimeExceeded):
        return "timeout", "CPU time limit of the exec reached; the computation was stopped"
    tb = exc.__traceback__
    frames = [f for f in traceback.extract_tb(tb) if f.filename in cell_names]
    lines = traceback.format_list(frames[-3:])
    lines += traceback.format_exception_only(type(exc), exc)
    text = "".join(lines).rstrip()
    if isinstance(exc, SystemExit):
        text = "exit() does not end the episode here; give the result with answer(...)"
    close = difflib.get_close_matches(getattr(exc, "name", None) or "", tool_names, n=3)
    if isinstance(exc, NameError) and close:
        text += f"\nTools with a similar name: {', '.join(close)}"
    if isinstance(exc, ToolCallError):
        return exc.kind, text
    if isinstance(exc, SandboxViolation):
        return "sandbox_violation", text
    if isinstance(exc, EnvironmentVariableMissing):
        return "sandbox_violation", text
    if isinstance(exc, MemoryError):
        return "memory", text + "\n(memory limit of the sandbox reached)"
    return "code_error", text


def _set_limits(lim):
    R = resource
    caps = [(R.RLIMIT_AS, int(lim["memory_mb"] * 2**20)),
            (R.RLIMIT_FSIZE, int(lim["file_mb"] * 2**20)),
            (R.RLIMIT_NOFILE, lim["max_open_files"]), (R.RLIMIT_CORE, 0),
            (R.RLIMIT_CPU, math.ceil(lim["cpu_episode_s"]))]
    if lim.get("max_processes"):
        caps.append((R.RLIMIT_NPROC, lim["max_processes"]))
    for which, value in caps:
        _, hard = R.getrlimit(which)
        value = value if hard == R.RLIM_INFINITY else min(value, hard)
        R.setrlimit(which, (value, value))


def _arm_cpu(cpu_s):
    """Soft RLIMIT_CPU = CPU used so far + ``cpu_s`` (the hard limit stays the lifetime cap)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(ru.ru_utime + ru.ru_stime + cpu_s)
    resource.setrlimit(resource.RLIMIT_CPU, (min(soft, hard), hard))


def _on_xcpu(signum, frame):
    raise CpuTimeExceeded()


def _xcpu_to_main_thread():
    """Threads started by the code block SIGXCPU, so that the kernel delivers it to the main
    thread, whose handler interrupts even a ``time.sleep`` there (a busy thread besides a
    sleeping main thread is then stopped at the CPU limit, not at the wall limit)."""
    inner = threading.Thread._bootstrap_inner

    def bootstrap(self):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGXCPU})
        inner(self)

    threading.Thread._bootstrap_inner = bootstrap


def main():
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    channel = _Channel(rfd, wfd)
    channel.send({"t": "hello"})
    init = channel.recv()
    workspace = init["workspace"]
    os.chdir(workspace)
    sys.path = [p for p in sys.path if p]  # never import from the workspace
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGXCPU, _on_xcpu)
    _set_limits(init["limits"])
    bounds = _load("arg_bounds", init.get("arg_bounds"))
    landlock_abi = _landlock(init.get("landlock"), workspace, init["read_roots"])
    guard = _Guard(workspace, init["read_roots"], (rfd, wfd), channel.send)
    tool_names = [s["name"] for s in init["tools"]]
    ns = {"__name__": "__main__", "__builtins__": __builtins__, "ToolCallError": ToolCallError}
    for spec in init["tools"]:
        ns[spec["name"]] = _tool_function(spec, channel, guard, bounds)
    try:  # a multiprocessing/_posixsubprocess fork does not raise an audit event in 3.11
        import _posixsubprocess

        def _refused(*a, **k):
            raise SandboxViolation("sandbox: starting processes is not allowed")
        _posixsubprocess.fork_exec = _refused
    except ImportError:
        pass
    _xcpu_to_main_thread()
    os.environ.__class__ = _SandboxEnviron
    sys.addaudithook(guard)
    cap = init["limits"]["max_capture_chars"]
    channel.send({"t": "ready", "pid": os.getpid(), "landlock": landlock_abi})
    cell = 0
    cell_names = set()
    while True:
        msg = channel.recv()
        if msg.get("t") != "exec":
            continue
        cell += 1
        name = f"<cell {cell}>"
        cell_names.add(name)
        code = msg["code"]
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        out, error = _Capture(cap), None
        _arm_cpu(msg["cpu_s"])
        old_out, old_err = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = out
        try:
            compiled = compile(code, name, "exec")
            guard.trusted = False
            exec(compiled, ns)
        except BaseException as e:  # noqa: B036 (the model's code may raise anything)
            guard.trusted = True
            kind, message = _classify(e, cell_names | {name}, tool_names)
            if isinstance(e, SyntaxError):
                message = "".join(traceback.format_exception_only(type(e), e)).rstrip()
            error = {"kind": kind, "message": message}
        finally:
            guard.trusted = True
            sys.stdout, sys.stderr = old_out, old_err
        channel.send({"t": "done", "id": msg.get("id"), "stdout": out.value(), "error": error})


if __name__ == "__main__":
    main()
