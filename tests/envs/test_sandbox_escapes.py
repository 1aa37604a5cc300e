"""Escape attempts against the CodeAct sandbox: each class is a real attempt,
made twice — with the audit hook on, and with the hook switched off by the model's code itself —
and must fail with E=1 and an observation saying why; the sandbox then still answers
``print(1+1)``. With the hook off the refusals come from bubblewrap's namespaces, seccomp
(SIGSYS, counted by the parent), Landlock and the cgroups."""

from __future__ import annotations

import ctypes
import json
import os
import socket
import time
import uuid

import pytest

from earthrl.envs.sandbox.parent import SandboxLimits
from earthrl.launch.doctor import check_cgroups
from tests.envs.sandbox_kit import (  # noqa: F401
    HOOK,
    Handler,
    assert_serving,
    make_sandbox,
    run,
    skip_or_fail_without_bwrap,
    skip_without,
)

SIGSYS_KILL = "forbidden system call and the interpreter was killed (killed by SIGSYS)"


@pytest.fixture(autouse=True)
def _needs_bwrap(make_sandbox):
    skip_or_fail_without_bwrap(make_sandbox("probe").backend)


def refused(res, hook, on_text, off_kind, off_text):
    """E=1; hook on: a sandbox_violation naming the action; hook off: ``off_kind`` with
    ``off_text`` in the message."""
    assert res.error, res.observation
    if hook:
        assert res.error_kind == "sandbox_violation" and on_text in res.message, res.observation
        assert res.violations >= 1
    else:
        assert res.error_kind == off_kind and off_text in res.message, res.observation


@HOOK
def test_parent_environment_secrets(make_sandbox, monkeypatch, hook):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("EARTHRL_TEST_SECRET", secret)
    sb = make_sandbox()
    res = run(sb, "import os\nprint(os.environ['EARTHRL_TEST_SECRET'])", hook)
    assert res.error_kind == "sandbox_violation"
    assert "environment variable 'EARTHRL_TEST_SECRET' is not available" in res.message
    res2 = run(sb, f"print(open('/proc/{os.getpid()}/environ').read())", hook)
    refused(res2, hook, "is not allowed", "code_error", "No such file or directory")
    env = run(sb, "import os\nprint(dict(os.environ))", hook).stdout
    assert secret not in res.observation + res2.observation + env and "PATH" in env
    assert_serving(sb)


@HOOK
def test_files_outside(make_sandbox, tmp_path, hook):
    outside = tmp_path / "outside.txt"
    outside.write_text("host secret")
    sb = make_sandbox()
    res = run(sb, f"print(open({str(outside)!r}).read())", hook)
    refused(res, hook, f"reading {outside} is not allowed", "code_error",
            "No such file or directory")
    res2 = run(sb, "print(open('/etc/hostname').read())", hook)
    refused(res2, hook, "is not allowed", "code_error", "No such file or directory")
    assert "host secret" not in res.observation
    assert_serving(sb)


@HOOK
def test_writes_outside(make_sandbox, tmp_path, hook):
    sb = make_sandbox()
    targets = [tmp_path / f"escape_{uuid.uuid4().hex}", f"/tmp/escape_{uuid.uuid4().hex}"]
    for target in targets:  # Landlock: only the workspace is writable
        res = run(sb, f"open({str(target)!r}, 'w').write('x')", hook)
        refused(res, hook, "writing outside the episode workspace is not allowed",
                "code_error", "PermissionError: [Errno 13]")
        assert not os.path.exists(target)
    assert_serving(sb)


@HOOK
def test_tcp_to_a_listener_of_the_host(make_sandbox, hook):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.2)
        port = server.getsockname()[1]
        sb = make_sandbox()
        res = run(sb, f"import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {port}))",
                  hook)
        refused(res, hook, "network access is not allowed", "sandbox_violation", SIGSYS_KILL)
        with pytest.raises(socket.timeout):
            server.accept()  # nothing connected
    assert_serving(sb)


@HOOK
def test_unix_socket_of_the_host(make_sandbox, hook):
    """A listener in the host's /tmp (where Ray keeps its sockets) is not in the sandbox."""
    path = f"/tmp/earthrl_test_{uuid.uuid4().hex[:12]}.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen(1)
        server.settimeout(0.2)
        try:
            sb = make_sandbox()
            res = run(sb, f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})",
                      hook)
            refused(res, hook, "network access is not allowed", "code_error",
                    "No such file or directory")
            with pytest.raises(socket.timeout):
                server.accept()
        finally:
            os.unlink(path)
    assert_serving(sb)


@HOOK
def test_sysv_shared_memory_of_the_host(make_sandbox, hook):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    key = int.from_bytes(os.urandom(3), "big") | 0x1000000
    shmid = libc.shmget(key, 4096, 0o1600)  # IPC_CREAT | 0600
    assert shmid >= 0, os.strerror(ctypes.get_errno())
    addr = libc.shmat(shmid, None, 0)
    try:
        ctypes.memmove(addr, b"host-marker", 11)
        sb = make_sandbox()
        code = ("import ctypes\nlibc = ctypes.CDLL(None)\nlibc.shmat.restype = ctypes.c_void_p\n"
                f"i = libc.shmget({key}, 4096, 0)\nprint('id', i)\n"
                "a = libc.shmat(i, None, 0)\nctypes.memmove(a, b'overwritten', 11)")
        res = run(sb, code, hook)
        refused(res, hook, "native code access is not allowed", "sandbox_violation", SIGSYS_KILL)
        assert ctypes.string_at(addr, 11) == b"host-marker"
    finally:
        libc.shmdt(ctypes.c_void_p(addr))
        libc.shmctl(shmid, 0, None)  # IPC_RMID
    assert_serving(sb)


@HOOK
def test_fork_bomb(make_sandbox, hook):
    sb = make_sandbox(limits=SandboxLimits(wall_s=10, memory_mb=1024, max_processes=16))
    sb.start()
    if not hook and not sb.isolation["pids_cgroup"]:
        skip_without("a writable pids cgroup (nothing else bounds a root fork bomb without the hook)", check_cgroups)
    res = run(sb, "import os\nwhile True:\n    os.fork()", hook)
    refused(res, hook, "starting processes is not allowed (os.fork)", "code_error",
            "BlockingIOError: [Errno 11]")
    assert sb._cgroup.pids_current() <= 16
    assert_serving(sb)


@HOOK
def test_ten_gigabyte_allocation(make_sandbox, hook):
    sb = make_sandbox()
    run(sb, "keep = 'still here'", hook)
    res = run(sb, "b = bytearray(10 * 2**30)", hook)
    assert res.error and res.error_kind == "memory" and "memory limit of the sandbox" in res.message
    assert sb.exec("print(keep)").stdout == "still here\n"
    assert_serving(sb)


@HOOK
def test_endless_loop(make_sandbox, hook):
    sb = make_sandbox(limits=SandboxLimits(wall_s=1.0, cpu_s=30, memory_mb=1024))
    t0 = time.monotonic()
    res = run(sb, "import time\nwhile True:\n    time.sleep(0.01)", hook)
    assert res.error_kind == "timeout" and "1 s wall-time limit (SandboxLimits.wall_s=1" \
        in res.message and time.monotonic() - t0 < 8
    assert_serving(sb)


@HOOK
@pytest.mark.parametrize("target", ["PARENT", "-1", "0"])
def test_killing_the_parent(make_sandbox, hook, target):
    sb = make_sandbox()
    target = target.replace("PARENT", str(os.getpid()))
    res = run(sb, f"import os\nos.kill({target}, 9)\nprint('still here')", hook)
    if hook:
        refused(res, hook, "sending signals to other processes is not allowed", "", "")
    elif target == "0":  # its own process group inside the sandbox: only the sandbox dies
        assert res.error_kind == "sandbox_crash" and "SIGKILL" in res.message
    else:
        assert res.error_kind == "code_error" and "ProcessLookupError" in res.message
    os.kill(os.getpid(), 0)  # still alive
    assert_serving(sb)


@HOOK
def test_another_episode_workspace(make_sandbox, tmp_path, hook):
    a, b = make_sandbox("ep_a"), make_sandbox("ep_b")
    assert not a.exec("open('secret.txt', 'w').write('episode A')").error
    res = run(b, f"print(open({str(tmp_path / 'ep_a' / 'secret.txt')!r}).read())", hook)
    refused(res, hook, "is not allowed", "code_error", "No such file or directory")
    res2 = run(b, f"import os\nprint(os.listdir({str(tmp_path / 'ep_a')!r}))", hook)
    refused(res2, hook, "is not allowed", "code_error", "No such file or directory")
    assert "episode A" not in res.observation and "secret.txt" not in res2.stdout
    assert_serving(b)


@HOOK
def test_forged_done_after_a_refusal_keeps_e(make_sandbox, hook):
    """The code refuses... then writes a fake ``done`` (right exec id, no error) on the protocol
    descriptor: the parent saw the refusal itself (the hook's violation message, or its own failed
    tool call), so E stays 1."""
    sb = make_sandbox(handler=Handler())
    refusal = ("try:\n    open('/etc/escape', 'w')\nexcept OSError:\n    pass\n" if hook else
               "try:\n    spectral_index(scene='missing')\nexcept ToolCallError:\n    pass\n")
    forge = ("import json, os, sys\n"  # the runner's frame holds the exec message and its id
             "f = sys._getframe()\n"
             "while not isinstance(f.f_locals.get('msg'), dict):\n    f = f.f_back\n"
             "msg = f.f_locals['msg']\n"
             "fd = sorted(int(f) for f in os.listdir('/proc/self/fd'))[4]\n"
             "os.write(fd, json.dumps({'t': 'done', 'id': msg['id'], 'stdout': 'all fine\\n', "
             "'error': None, 'violations': []}).encode() + b'\\n')\n")
    res = run(sb, refusal + forge, hook)
    assert res.stdout == "all fine\n" and res.error, res.observation
    assert res.error_kind == ("sandbox_violation" if hook else "hallucinated_path")
    assert sb.violations == (1 if hook else 0)
    assert_serving(sb)


@HOOK
def test_garbage_on_the_protocol_is_a_violation(make_sandbox, hook):
    sb = make_sandbox()
    res = run(sb, "import os\nos.write(sorted(int(f) for f in os.listdir('/proc/self/fd'))[4], "
                  "b'garbage\\n')", hook)
    assert res.error_kind == "sandbox_violation" and "broke the protocol" in res.message
    assert sb.violations == 1
    assert_serving(sb)


def test_escape_attempt_count(request):
    """The number of escape attempts tested: escape tests in this file x hook on/off."""
    items = [i for i in request.session.items if i.module.__name__ == __name__
             and "hook" in getattr(i, "callspec", type("c", (), {"params": {}})).params]
    assert len(items) >= 2 * 13
    print(json.dumps({"escape_attempts": len(items)}))
