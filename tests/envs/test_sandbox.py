"""The CodeAct sandbox (EarthRL issue 3, item 8): every escape attempt is a real attempt that must
fail with a clear observation, and the sandbox must keep serving afterwards (``print(1+1)``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from typing import Literal

import numpy as np
import pytest

from earthrl.envs.sandbox import RESTART_NOTE, Sandbox, SandboxLimits, isolation_prefix
from earthrl.envs.tool_registry import Args, Tool, ToolResult

LIMITS = SandboxLimits(wall_s=5.0, cpu_s=5, memory_mb=1024)


class IndexArgs(Args):
    scene: str
    index: Literal["NDVI", "NDWI"] = "NDVI"


def _tool(name, args):
    return Tool(name, lambda ctx, a: ToolResult(""), args, f"{name} tool.", "AI Interpretation",
                "PRA", ("spectral_index",), ("any",), "raster")


FAKE_TOOLS = {"spectral_index": _tool("spectral_index", IndexArgs)}


class Handler:
    """Fake env side: records calls; ``missing`` scenes come back as hallucinated paths."""

    def __init__(self):
        self.calls = []

    def __call__(self, name, kwargs):
        self.calls.append((name, kwargs))
        if kwargs.get("scene") == "missing":
            return {"text": "no scene 'missing'; scenes: S2", "error": True,
                    "error_kind": "hallucinated_path"}
        return {"text": f"{name} of {kwargs['scene']}: mean 0.25", "data": {"mean": 0.25}}


@pytest.fixture
def make_sandbox(tmp_path):
    boxes = []

    def make(name="ws", limits=LIMITS, handler=None, **kw):
        sb = Sandbox(tmp_path / name, limits, handler, tools=kw.pop("tools", FAKE_TOOLS), **kw)
        boxes.append(sb)
        return sb

    yield make
    for sb in boxes:
        sb.close()


def assert_serving(sb):
    res = sb.exec("print(1+1)")
    assert (res.stdout, res.error) == ("2\n", False), res.observation


def test_variables_functions_and_imports_persist(make_sandbox):
    sb = make_sandbox()
    assert not sb.exec("x = 41\nimport math\ndef sq(v):\n    return v * v").error
    res = sb.exec("print(x + 1, sq(3), math.sqrt(16))")
    assert res.stdout == "42 9 4.0\n" and not res.error
    assert sb.starts == 1


def test_secret_environment_variable_is_absent(make_sandbox, monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("EARTHRL_TEST_SECRET", secret)
    sb = make_sandbox()
    res = sb.exec("import os\nprint(os.environ.get('EARTHRL_TEST_SECRET'))\n"
                  "print(os.environ['EARTHRL_TEST_SECRET'])")
    assert res.stdout == "None\n"
    assert res.error and res.error_kind == "sandbox_violation"
    assert "environment variable 'EARTHRL_TEST_SECRET' is not available" in res.message
    # nor through the parent's /proc entry
    res2 = sb.exec(f"print(open('/proc/{os.getpid()}/environ').read())")
    assert res2.error_kind == "sandbox_violation" and "is not allowed" in res2.message
    env = sb.exec("import os\nprint(sorted(os.environ))").stdout
    assert secret not in res.observation + res2.observation + env
    assert "EARTHRL_TEST_SECRET" not in env and "PATH" in env
    assert_serving(sb)


def test_socket_is_refused(make_sandbox):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.2)
        port = server.getsockname()[1]
        sb = make_sandbox()
        res = sb.exec(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)")
        assert res.error and res.error_kind == "sandbox_violation"
        assert "network access is not allowed (socket.getaddrinfo)" in res.message
        res2 = sb.exec(f"import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {port}))")
        assert res2.error_kind == "sandbox_violation"
        assert "network access is not allowed (socket.__new__)" in res2.message
        with pytest.raises(socket.timeout):
            server.accept()  # nothing connected
    assert_serving(sb)


def test_network_namespace_blocks_even_without_the_audit_hook():
    """The OS layer alone: a plain interpreter started with the sandbox's namespace prefix
    cannot reach a port that is open in the parent."""
    prefix = isolation_prefix()
    if not prefix:
        pytest.skip("unshare (network namespaces) is not available on this machine")
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


def test_write_outside_workspace_is_refused(make_sandbox, tmp_path):
    target = f"/tmp/escape_{uuid.uuid4().hex}"
    sb = make_sandbox()
    res = sb.exec(f"open({target!r}, 'w').write('x')")
    assert res.error_kind == "sandbox_violation"
    assert f"writing outside the episode workspace is not allowed (open {target})" in res.message
    # through a symlink planted in the workspace, and with os.open
    res2 = sb.exec(f"import os\nos.symlink({target!r}, 'link')")
    res3 = sb.exec(f"import os\nos.open({target!r}, os.O_WRONLY | os.O_CREAT)")
    assert res2.error_kind == res3.error_kind == "sandbox_violation"
    assert not os.path.exists(target)
    # the workspace itself is writable
    res4 = sb.exec("open('out.txt', 'w').write('ok')\nprint(open('out.txt').read())")
    assert res4.stdout == "ok\n" and (tmp_path / "ws" / "out.txt").read_text() == "ok"
    assert_serving(sb)


def _processes_in_group(pgid: int) -> int:
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                n += int(f.read().rsplit(")", 1)[1].split()[2]) == pgid
        except (OSError, IndexError, ValueError):
            pass
    return n


@pytest.mark.parametrize("code, event", [
    ("import os\nwhile True:\n    os.fork()", "os.fork"),
    ("import subprocess\nsubprocess.Popen(['sh', '-c', ':(){ :|:& };:'])", "subprocess.Popen"),
    ("import os\nos.system('sleep 100 &')", "os.system"),
    ("import multiprocessing as mp\nmp.Process(target=print).start()", "os.fork"),
])
def test_fork_bomb_is_refused(make_sandbox, code, event):
    sb = make_sandbox()
    res = sb.exec(code)
    assert res.error_kind == "sandbox_violation"
    assert f"starting processes is not allowed ({event})" in res.message
    # only the interpreter (and its unshare wrapper) live in the sandbox's process group
    assert _processes_in_group(sb._proc.pid) == (2 if sb.prefix else 1)
    assert_serving(sb)


def test_ten_gigabyte_allocation_is_a_memory_error(make_sandbox):
    sb = make_sandbox()
    sb.exec("keep = 'still here'")
    res = sb.exec("b = bytearray(10 * 2**30)")
    assert res.error and res.error_kind == "memory"
    assert "MemoryError" in res.message and "memory limit of the sandbox" in res.message
    res2 = sb.exec("import numpy as np\nz = np.zeros(10 * 2**30 // 8)")
    assert res2.error_kind == "memory"
    assert sb.exec("print(keep)").stdout == "still here\n"  # the interpreter survived
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


def test_other_episode_workspace_is_unreadable(make_sandbox, tmp_path):
    a, b = make_sandbox("ep_a"), make_sandbox("ep_b")
    assert not a.exec("open('secret.txt', 'w').write('episode A')").error
    assert (tmp_path / "ep_a" / "secret.txt").read_text() == "episode A"
    res = b.exec(f"print(open({str(tmp_path / 'ep_a' / 'secret.txt')!r}).read())")
    assert res.error_kind == "sandbox_violation" and "episode A" not in res.observation
    assert f"reading {tmp_path / 'ep_a' / 'secret.txt'} is not allowed" in res.message
    res2 = b.exec(f"import os\nprint(os.listdir({str(tmp_path / 'ep_a')!r}))")
    assert res2.error_kind == "sandbox_violation" and "secret.txt" not in res2.stdout
    assert a.exec("print(open('secret.txt').read())").stdout == "episode A\n"
    assert_serving(b)


def test_read_roots_are_readable(make_sandbox, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "band.txt").write_text("0.5")
    sb = make_sandbox(read_roots=[data])
    res = sb.exec(f"print(float(open({str(data / 'band.txt')!r}).read()) * 2)")
    assert res.stdout == "1.0\n" and not res.error
    res2 = sb.exec(f"open({str(data / 'band.txt')!r}, 'w')")
    assert res2.error_kind == "sandbox_violation"  # readable, not writable


@pytest.mark.parametrize("target", ["os.getppid()", "PARENT", "0", "-1"])
def test_killing_the_parent_is_refused(make_sandbox, target):
    sb = make_sandbox()
    target = target.replace("PARENT", str(os.getpid()))
    code = f"import os, signal\nos.kill({target}, signal.SIGKILL)"
    res = sb.exec(code)
    assert res.error_kind == "sandbox_violation"
    assert "sending signals to other processes is not allowed (os.kill" in res.message
    res2 = sb.exec(f"import os\nos.killpg({os.getpgid(0)}, 9)")
    assert res2.error_kind == "sandbox_violation"
    os.kill(os.getpid(), 0)  # still alive
    assert_serving(sb)


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
    # garbage and a forged "done" on the channel: the first breaks the protocol, the second is
    # ignored because it lacks the exec id
    fd = "sorted(int(f) for f in os.listdir('/proc/self/fd'))[4]"
    res2 = sb.exec(f"import os\nos.write({fd}, b'garbage\\n')")
    assert res2.error_kind == "sandbox_crash"
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


def test_tool_time_does_not_count_against_the_wall_limit(make_sandbox):
    def slow_handler(name, kwargs):
        time.sleep(1.2)
        return {"text": "done", "data": {"ok": True}}

    sb = make_sandbox(limits=SandboxLimits(wall_s=1.0, memory_mb=1024), handler=slow_handler)
    res = sb.exec("print(spectral_index(scene='S2')['ok'])")
    assert (res.stdout, res.error) == ("True\n", False) and res.seconds > 1.2


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
    from earthrl.envs.tools import TOOLS, ToolContext

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
        pytest.skip("root without a writable pids cgroup: RLIMIT_NPROC is not enforced")
    res = sb.exec("import threading, time\nthreading.stack_size(65536)\nn = 0\ntry:\n"
                  "    for _ in range(500):\n"
                  "        threading.Thread(target=time.sleep, args=(1,), daemon=True).start()\n"
                  "        n += 1\nexcept RuntimeError as e:\n    print(e)\nprint(n)")
    message, n = res.stdout.splitlines()
    assert message == "can't start new thread"
    assert int(n) == 11 if sb.isolation["pids_cgroup"] else 0 < int(n) <= 12
    assert_serving(sb)


def test_close_removes_the_process_and_its_cgroup(make_sandbox):
    sb = make_sandbox()
    sb.start()
    proc, cgroup = sb._proc, sb._cgroup
    sb.close()
    assert proc.poll() is not None and not sb.alive
    assert cgroup is None or not cgroup.exists()


BYPASS = ("import gc\nguard = [o for o in gc.get_objects() if type(o).__name__ == '_Guard'][0]\n"
          "guard.trusted = True  # the audit hook now lets everything through\n")


def test_kernel_layers_hold_when_the_audit_hook_is_disabled(make_sandbox, tmp_path):
    """Python code can switch the audit hook off; Landlock, the namespaces and the cgroup still
    stop the escape (plain OSErrors then, not sandbox_violation)."""
    a, b = make_sandbox("ep_a"), make_sandbox("ep_b")
    a.exec("open('secret.txt', 'w').write('episode A')")
    b.start()
    if not b.isolation["landlock"]:
        pytest.skip("Landlock is not available on this kernel")
    target = f"/tmp/escape_{uuid.uuid4().hex}"
    res = b.exec(BYPASS + f"open({target!r}, 'w').write('x')")
    assert res.error_kind == "code_error" and "PermissionError: [Errno 13]" in res.message
    assert not os.path.exists(target)
    res = b.exec(BYPASS + f"print(open({str(tmp_path / 'ep_a' / 'secret.txt')!r}).read())")
    assert "PermissionError: [Errno 13]" in res.message and "episode A" not in res.observation
    res = b.exec(BYPASS + f"import os\nos.kill({os.getpid()}, 9)")
    assert res.error_kind == "code_error"
    assert "ProcessLookupError" in res.message or "PermissionError" in res.message
    res = b.exec(BYPASS + "import socket\nsocket.create_connection(('127.0.0.1', 22), 1)")
    assert res.error_kind == "code_error"
    # Landlock TCP rule (EACCES) or, on an older ABI, the empty network namespace (ENETUNREACH)
    assert "PermissionError: [Errno 13]" in res.message or "[Errno 101]" in res.message
    assert b.exec("print(1+1)").stdout == "2\n"  # the hook is armed again for the next cell
    assert b.exec("open('/tmp/x', 'w')").error_kind == "sandbox_violation"


def test_fork_bomb_without_the_audit_hook_is_bounded_by_the_cgroup(make_sandbox):
    sb = make_sandbox(limits=SandboxLimits(wall_s=10, memory_mb=1024, max_processes=16))
    sb.start()
    if not sb.isolation["pids_cgroup"]:
        pytest.skip("no writable pids cgroup on this machine")
    res = sb.exec(BYPASS + "import os\nwhile True:\n    os.fork()")
    assert res.error_kind == "code_error" and "BlockingIOError: [Errno 11]" in res.message
    assert int((sb._cgroup / "pids.current").read_text()) <= 16
    assert_serving(sb)


def test_bench_sandbox_measures_startup_and_overhead():
    from earthrl.envs.bench_sandbox import bench_sandbox

    out = bench_sandbox(n=5)
    assert set(out) == {"startup_s", "exec_median_ms", "exec_p90_ms", "tool_call_ms", "netns",
                        "pids_cgroup", "landlock", "n"}
    assert 0 < out["startup_s"] < 30 and 0 < out["exec_median_ms"] <= out["exec_p90_ms"]
    assert out["tool_call_ms"] > 0 and out["n"] == 5
    with pytest.raises(ValueError, match="n must be >= 1"):
        bench_sandbox(n=0)


def test_stale_cgroups_of_dead_processes_are_removed():
    from earthrl.envs.sandbox_cgroup import make_cgroup, pids_controller_root, remove_cgroup

    root = pids_controller_root()
    if root is None:
        pytest.skip("no writable pids cgroup on this machine")
    dead_pid = int(open("/proc/sys/kernel/pid_max").read()) + 1  # can never be alive
    stale = root / f"earthrl_sandbox_{dead_pid}_0"
    stale.mkdir()
    fresh = make_cgroup(7)
    try:
        assert not stale.exists() and (fresh / "pids.max").read_text().strip() == "7"
    finally:
        remove_cgroup(fresh)
        remove_cgroup(stale, wait_s=0)
    assert not fresh.exists()
