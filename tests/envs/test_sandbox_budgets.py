"""Budgets of the CodeAct sandbox, measured and enforced by the parent: wall time
with tool time, tool calls, CPU of all threads, frozen between turns, disk quota, output bytes.
Each breach is tried with the audit hook on and switched off by the code."""

from __future__ import annotations

import time

import pytest

from earthrl.envs.sandbox.parent import SandboxLimits
from tests.envs.sandbox_kit import HOOK, Handler, assert_serving, make_sandbox, run  # noqa: F401

LOOP = ("n = 0\nwhile True:\n    try:\n        spectral_index(scene='S2')\n"
        "    except ToolCallError:\n        pass\n    n += 1\n")
SPIN = ("import threading\ndef spin():\n    while True:\n        pass\n"
        "threading.Thread(target=spin, daemon=True).start()\n")


def limits(**kw):
    return SandboxLimits(**{"wall_s": 5.0, "cpu_s": 5, "memory_mb": 1024, **kw})


@HOOK
def test_tool_call_loop_past_the_call_budget(make_sandbox, hook):
    handler = Handler()
    sb = make_sandbox(limits=limits(max_tool_calls=5), handler=handler)
    res = run(sb, LOOP, hook)
    assert res.error_kind == "budget_exceeded", res.observation
    assert "more than 5 tool calls in one exec (SandboxLimits.max_tool_calls=5)" in res.message
    assert len(handler.calls) == 5 and len(res.tool_calls) == 5
    assert_serving(sb)


@HOOK
def test_tool_call_loop_past_the_wall_budget_counts_tool_time(make_sandbox, hook):
    def slow(name, kwargs):
        time.sleep(0.15)
        return {"text": "ok", "data": {}}

    sb = make_sandbox(limits=limits(wall_s=1.0), handler=slow)
    t0 = time.monotonic()
    res = run(sb, LOOP, hook)
    assert res.error_kind == "timeout" and "tool time included" in res.message
    assert "SandboxLimits.wall_s=1" in res.message
    assert 1.0 <= time.monotonic() - t0 < 4 and 3 <= len(res.tool_calls) <= 8
    assert_serving(sb)


def test_episode_tool_call_budget_ends_the_code(make_sandbox):
    handler = Handler()
    sb = make_sandbox(limits=limits(max_tool_calls_episode=3), handler=handler)
    assert not sb.exec("spectral_index(scene='S2')\nspectral_index(scene='S2')").error
    res = sb.exec("spectral_index(scene='S2')\nspectral_index(scene='S2')")
    assert res.error_kind == "budget_exceeded"
    assert "SandboxLimits.max_tool_calls_episode=3" in res.message
    res2 = sb.exec("print(1+1)")
    assert res2.error_kind == "budget_exceeded" and "no more code runs" in res2.message
    assert len(handler.calls) == 3 and sb.usage["tool_calls"] == 3


def test_episode_wall_budget(make_sandbox):
    sb = make_sandbox(limits=limits(wall_s=1.0, episode_wall_s=1.5))
    res = sb.exec("import time\ntime.sleep(5)")
    assert res.error_kind == "timeout" and "SandboxLimits.wall_s=1" in res.message
    res2 = sb.exec("import time\ntime.sleep(5)")
    assert res2.error_kind == "timeout" and "SandboxLimits.episode_wall_s=1.5" in res2.message
    assert sb.usage["wall_s"] >= 1.5
    assert sb.exec("print(1+1)").error_kind == "budget_exceeded"


@HOOK
def test_background_thread_does_not_compute_between_turns(make_sandbox, hook):
    sb = make_sandbox(limits=limits(cpu_s=30))
    first = run(sb, SPIN + "import time\nprint(time.process_time())", hook)
    assert not first.error, first.observation
    time.sleep(1.0)  # a free-running thread would burn about a CPU second here
    second = sb.exec("import time\nprint(time.process_time())")
    burnt = float(second.stdout) - float(first.stdout)
    assert 0 <= burnt < 0.4, burnt
    assert_serving(sb)


@HOOK
def test_background_thread_past_the_cpu_budget(make_sandbox, hook):
    sb = make_sandbox(limits=limits(cpu_s=1, wall_s=10))
    assert not run(sb, SPIN, hook).error
    t0 = time.monotonic()
    res = sb.exec("import time\ntime.sleep(8)")  # the main thread sleeps; the spinner burns CPU
    assert res.error_kind == "timeout" and "CPU" in res.message, res.observation
    assert res.cpu_s >= 1.0 and time.monotonic() - t0 < 7
    assert sb.usage["cpu_s"] >= 1.0


@HOOK
def test_disk_fill_past_the_quota(make_sandbox, tmp_path, hook):
    sb = make_sandbox(limits=limits(workspace_mb=2))
    res = run(sb, "i = 0\nwhile True:\n    open(f'fill_{i}', 'wb').write(b'x' * 2**19)\n    i += 1",
              hook)
    assert res.error_kind == "budget_exceeded", res.observation
    assert "past the 2 MiB disk quota (SandboxLimits.workspace_mb=2)" in res.message
    assert "workspace emptied" in res.message and list((tmp_path / "ws").iterdir()) == []
    assert_serving(sb)


@HOOK
def test_output_past_the_byte_budget(make_sandbox, hook):
    sb = make_sandbox(limits=limits(max_output_bytes=20_000, max_capture_chars=10**6))
    res = run(sb, "print('a' * 50_000)", hook)
    assert res.error_kind == "budget_exceeded" and "SandboxLimits.max_output_bytes=20000" \
        in res.message and res.stdout == ""
    assert_serving(sb)


@pytest.mark.parametrize("field, value", [("wall_s", 0), ("max_tool_calls", -1),
                                          ("workspace_mb", "big")])
def test_bad_limits_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"SandboxLimits.{field} must be a positive number"):
        SandboxLimits(**{field: value})
