"""The CodeAct sandbox: persistence, tool calls, error kinds, restarts,
layers and cleanup. Escape attempts (hook on and off) are in ``test_sandbox_escapes.py``, budgets
in ``test_sandbox_budgets.py``, parent-side link checks in ``test_sandbox_fs.py``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from earthrl.envs.sandbox.parent import RESTART_NOTE, Sandbox, SandboxLimits, isolation_prefix
from earthrl.envs.sandbox.procs import descendants
from earthrl.launch.doctor import check_cgroups, check_userns
from tests.envs.sandbox_kit import LIMITS, Handler, assert_serving, make_sandbox, skip_without  # noqa: F401


def test_variables_functions_and_imports_persist(make_sandbox):
    sb = make_sandbox()
    assert not sb.exec("x = 41\nimport math\ndef sq(v):\n    return v * v").error
    res = sb.exec("print(x + 1, sq(3), math.sqrt(16))")
    assert res.stdout == "42 9 4.0\n" and not res.error
    assert sb.starts == 1


def test_network_namespace_blocks_even_without_the_audit_hook():
    """The OS layer alone: a plain interpreter started with the sandbox's namespace prefix
    cannot reach a port that is open in the parent."""
    prefix = isolation_prefix()
    if not prefix:
        skip_without("unshare's user and network namespaces", check_userns)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        code = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), 1)\n"
                "    print('connected')\nexcept OSError as e:\n    print('refused', e.errno)")
        out = subprocess.run([*prefix, sys.executable, "-I", "-c", code], capture_output=True,
                             text=True, timeout=30, env={"PATH": "/usr/bin:/bin"}).stdout
        direct = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True,
                                text=True, timeout=30).stdout
    assert out.startswith("refused") and direct == "connected\n"


@pytest.mark.parametrize("code, event", [
    ("import os\nwhile True:\n    os.fork()", "os.fork"),
    ("import subprocess\nsubprocess.Popen(['sh', '-c', ':(){ :|:& };:'])", "subprocess.Popen"),
    ("import os\nos.system('sleep 100 &')", "os.system"),
    ("import multiprocessing as mp\nmp.Process(target=print).start()", "os.fork"),
])
def test_process_creation_is_refused(make_sandbox, code, event):
    sb = make_sandbox()
    res = sb.exec(code)
    assert res.error_kind == "sandbox_violation"
    assert f"starting processes is not allowed ({event})" in res.message
    # only the interpreter (and bwrap's PID-namespace init) live in the sandbox
    assert len(descendants(sb._proc.pid)) == (2 if sb.backend == "bwrap" else 1)
    assert_serving(sb)


def test_infinite_loop_hits_the_wall_time_limit(make_sandbox):
    sb = make_sandbox(limits=SandboxLimits(wall_s=1.5, cpu_s=30, memory_mb=1024))
    sb.exec("x = 1")
    t0 = time.monotonic()
    res = sb.exec("import time\nwhile True:\n    time.sleep(0.01)")
    elapsed = time.monotonic() - t0
    assert res.error and res.error_kind == "timeout" and 1.5 <= elapsed < 10.0  # killed at the limit (slack for a loaded CI machine)
    assert "1.5 s wall-time limit" in res.message and "variables" in res.message
    assert_serving(sb)
    assert sb.exec("print(x)").error_kind == "code_error"  # the state was lost: stated above
    assert sb.starts == 2


def test_busy_loop_hits_the_cpu_limit(make_sandbox):
    sb = make_sandbox(limits=SandboxLimits(wall_s=20, cpu_s=1, memory_mb=1024))
    sb.exec("x = 1")
    t0 = time.monotonic()
    res = sb.exec("while True:\n    pass")
    assert res.error_kind == "timeout" and "CPU time limit" in res.message
    assert time.monotonic() - t0 < 15  # 1 CPU-second, slack for a loaded shared machine
    assert sb.exec("print(x)").stdout == "1\n"  # CPU limit stops the code, not the interpreter
    assert_serving(sb)


def test_read_roots_are_readable(make_sandbox, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "band.txt").write_text("0.5")
    sb = make_sandbox(read_roots=[data])
    res = sb.exec(f"print(float(open({str(data / 'band.txt')!r}).read()) * 2)")
    assert res.stdout == "1.0\n" and not res.error
    res2 = sb.exec(f"open({str(data / 'band.txt')!r}, 'w')")
    assert res2.error_kind == "sandbox_violation"  # readable, not writable


def test_native_code_is_refused(make_sandbox):
    sb = make_sandbox()
    res = sb.exec("import ctypes\nctypes.CDLL(None).fork()")
    assert res.error_kind == "sandbox_violation" and "ctypes.dlsym" in res.message
    res2 = sb.exec("import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))")
    assert res2.error_kind == "sandbox_violation"
    assert_serving(sb)


def test_refusal_caught_by_the_code_still_counts_as_error(make_sandbox):
    sb = make_sandbox()
    res = sb.exec("try:\n    open('/etc/escape', 'w')\nexcept PermissionError:\n"
                  "    print('caught')")
    assert res.stdout == "caught\n" and res.error and res.error_kind == "sandbox_violation"


def test_crash_and_protocol_forgery_restart_the_interpreter(make_sandbox):
    sb = make_sandbox()
    sb.exec("x = 1")
    res = sb.exec("import faulthandler\nfaulthandler._read_null()")
    assert res.error_kind == "sandbox_crash" and "killed by SIGSEGV" in res.message
    assert "variables from earlier turns are lost" in res.message
    assert_serving(sb)
    # a forged "done" without the exec id is ignored (garbage: test_sandbox_escapes.py)
    fd = "sorted(int(f) for f in os.listdir('/proc/self/fd'))[4]"
    res3 = sb.exec(f"import os\nos.write({fd}, b'{{\"t\": \"done\", \"stdout\": \"fake\"}}\\n')\n"
                   "print('real')")
    assert res3.stdout == "real\n"
    assert_serving(sb)


def test_dead_interpreter_between_execs_is_restarted_with_a_note(make_sandbox):
    sb = make_sandbox()
    sb.exec("x = 1")
    os.killpg(sb._proc.pid, 9)
    sb._proc.wait()
    res = sb.exec("print(2)")
    assert res.notes == [RESTART_NOTE] and res.stdout == "2\n"
    assert res.observation == RESTART_NOTE + "\n2"


def test_tool_call_goes_through_the_pipe(make_sandbox):
    handler = Handler()
    sb = make_sandbox(handler=handler)
    res = sb.exec("r = spectral_index(scene='S2', index='NDVI')\nprint(r['mean'] * 2)\nprint(r)\n"
                  "r2 = spectral_index('S2')")
    assert res.stdout == "0.5\nspectral_index of S2: mean 0.25\n" and not res.error
    assert handler.calls == [("spectral_index", {"scene": "S2", "index": "NDVI"}),
                             ("spectral_index", {"scene": "S2"})]
    assert res.tool_calls == [
        {"name": "spectral_index", "arguments": {"scene": "S2", "index": "NDVI"}, "error": False,
         "error_kind": None},
        {"name": "spectral_index", "arguments": {"scene": "S2"}, "error": False,
         "error_kind": None}]
    # numpy values are sent as JSON numbers
    res2 = sb.exec("import numpy as np\nspectral_index(scene='S2', index=np.float32(0.5))")
    assert handler.calls[-1] == ("spectral_index", {"scene": "S2", "index": 0.5})
    assert not res2.error


def test_tool_errors_are_observations(make_sandbox):
    handler = Handler()
    sb = make_sandbox(handler=handler)
    res = sb.exec("spectral_index(scene='missing')")
    assert res.error_kind == "hallucinated_path" and "no scene 'missing'" in res.message
    assert res.tool_calls[0]["error"] and res.tool_calls[0]["error_kind"] == "hallucinated_path"
    # caught by the code: still E=1, the code goes on
    res2 = sb.exec("try:\n    spectral_index(scene='missing')\nexcept ToolCallError as e:\n"
                   "    print(e.kind)\nprint('after')")
    assert res2.stdout == "hallucinated_path\nafter\n"
    assert res2.error and res2.error_kind == "hallucinated_path"
    res3 = sb.exec("spectral_index('S2', 'NDVI', 3)")
    assert res3.error_kind == "schema_error" and "at most 2 positional" in res3.message
    assert len(handler.calls) == 2  # the bad call never reached the handler


def test_handler_failure_propagates_and_sandbox_recovers(make_sandbox):
    def handler(name, kwargs):
        raise RuntimeError("data folder vanished")

    sb = make_sandbox(handler=handler)
    with pytest.raises(RuntimeError, match="data folder vanished"):
        sb.exec("spectral_index(scene='S2')")
    assert_serving(sb)


def test_real_tools_chain_through_the_pipe(make_env, raw):
    """A CodeAct workflow on the real Sentinel-2 scene: NDVI artifact -> raster_stats -> answer,
    each call run by the parent through a handler like the env's; the mean must equal an
    independent numpy NDVI of the raw bands."""
    from earthrl.envs.tools.registry import TOOLS, ToolContext

    env = make_env("S2_T33UUU_20170216")

    def handler(name, kwargs):
        tool = TOOLS[name]
        out = tool.fn(ToolContext(env.registry, {"name": name, "arguments": kwargs}),
                      tool.args_model(**kwargs))
        return {"text": out.text, "data": out.data}

    with Sandbox(env.workspace / "sandbox", LIMITS, handler) as sb:
        res = sb.exec("r = spectral_index(scene='S2_T33UUU_20170216', index='NDVI')\n"
                      "s = raster_stats(name=r['artifact'])\n"
                      "print(repr(s['mean']))\n"
                      "answer(value=round(s['mean'], 3), unit='')")
    assert not res.error, res.observation
    n, red = raw.s2("B08"), raw.s2("B04")
    want = float(np.nanmean((n - red) / (n + red)))
    assert float(res.stdout) == pytest.approx(want, rel=1e-6)
    assert [c["name"] for c in res.tool_calls] == ["spectral_index", "raster_stats", "answer"]
    assert res.tool_calls[2]["arguments"] == {"value": round(float(res.stdout), 3), "unit": ""}
    assert not any(c["error"] for c in res.tool_calls)


def test_output_kept_in_the_child_is_capped(make_sandbox):
    sb = make_sandbox(limits=SandboxLimits(wall_s=5, memory_mb=1024, max_capture_chars=1000))
    res = sb.exec("print('a' * 5000)")
    assert res.stdout == "a" * 1000 + "\n…[4001 more characters not kept]"


def test_error_kinds_set_e(make_sandbox):
    """E(a,o) = 1 for every error kind and 0 for a clean exec."""
    sb = make_sandbox(limits=SandboxLimits(wall_s=1, cpu_s=5, memory_mb=1024), handler=Handler())
    cases = {"code_error": "1/0", "sandbox_violation": "import socket\nsocket.socket()",
             "memory": "bytearray(10 * 2**30)", "timeout": "while True:\n    pass",
             "sandbox_crash": "import faulthandler\nfaulthandler._read_null()",
             "hallucinated_path": "spectral_index(scene='missing')",
             "schema_error": "spectral_index('a', 'b', 'c')"}
    for kind, code in cases.items():
        res = sb.exec(code)
        assert (res.error, res.error_kind) == (True, kind), (kind, res.observation)
        assert f"Error ({kind}): " in res.observation
    ok = sb.exec("print('fine')")
    assert (ok.error, ok.error_kind, ok.observation) == (False, None, "fine")


def test_unknown_function_suggests_close_tool_names(make_sandbox):
    sb = make_sandbox()
    res = sb.exec("spectral_indices(scene='S2')")
    assert res.error_kind == "code_error"
    assert res.message.endswith("NameError: name 'spectral_indices' is not defined\n"
                                "Tools with a similar name: spectral_index")
    assert "similar" not in sb.exec("zzz").message


def test_syntax_error_and_exit_are_code_errors(make_sandbox):
    sb = make_sandbox()
    res = sb.exec("def f(:\n    pass")
    assert res.error_kind == "code_error" and "SyntaxError" in res.message
    assert '"<cell 1>", line 1' in res.message
    res2 = sb.exec("exit()")
    assert res2.error_kind == "code_error" and "answer(" in res2.message
    assert_serving(sb)


def test_process_count_is_bounded_even_for_threads(make_sandbox):
    """Threads count as processes: the interpreter plus its threads never exceed max_processes
    (pids cgroup; RLIMIT_NPROC for a non-root uid)."""
    sb = make_sandbox(limits=SandboxLimits(wall_s=10, memory_mb=1024, max_processes=12))
    sb.start()
    if os.geteuid() == 0 and not sb.isolation["pids_cgroup"]:
        skip_without("a writable pids cgroup (as root RLIMIT_NPROC is not enforced)", check_cgroups)
    base = sb._cgroup.pids_current() if sb.isolation["pids_cgroup"] else 1  # bwrap init + python
    res = sb.exec("import threading, time\nthreading.stack_size(65536)\nn = 0\ntry:\n"
                  "    for _ in range(500):\n"
                  "        threading.Thread(target=time.sleep, args=(1,), daemon=True).start()\n"
                  "        n += 1\nexcept RuntimeError as e:\n    print(e)\nprint(n)")
    message, n = res.stdout.splitlines()
    assert message == "can't start new thread"
    assert int(n) == 12 - base if sb.isolation["pids_cgroup"] else 0 < int(n) <= 12
    assert_serving(sb)


def test_close_removes_the_process_and_its_cgroup(make_sandbox):
    sb = make_sandbox()
    sb.start()
    proc, folders = sb._proc, sb._cgroup.folders
    inside = descendants(proc.pid)
    assert folders and inside  # a cgroup folder per hierarchy; bwrap's init and the python
    sb.close()
    assert proc.poll() is not None and not sb.alive
    assert not any(f.exists() for f in folders)
    deadline = time.monotonic() + 3  # the PID namespace dies with bwrap, asynchronously
    while [pid for pid in inside if _alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not [pid for pid in inside if _alive(pid)]


def _alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie (a killed sandbox's init is reaped by the host's init)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_stale_cgroups_of_dead_processes_are_removed():
    from earthrl.envs.sandbox.cgroup import SandboxCgroup, pids_controller_root, remove_cgroup

    root = pids_controller_root()
    if root is None:
        skip_without("a writable pids cgroup", check_cgroups)
    dead_pid = int(open("/proc/sys/kernel/pid_max").read()) + 1  # can never be alive
    stale = root / f"earthrl_sandbox_{dead_pid}_0"
    stale.mkdir()
    fresh = SandboxCgroup(7)
    try:
        assert not stale.exists() and (fresh.dirs["pids"] / "pids.max").read_text().strip() == "7"
    finally:
        folders = fresh.folders
        fresh.remove()
        remove_cgroup(stale, wait_s=0)
    assert folders and not any(f.exists() for f in folders)
