"""`earthrl bench env` measurement: CodeAct sandbox start-up and per-exec overhead."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from earthrl.envs.sandbox.parent import Sandbox, sandbox_backend
from earthrl.envs.tools.registry import Args, Tool, ToolResult


class _NoopArgs(Args):
    value: int


NOOP = Tool("noop", lambda ctx, args: ToolResult(""), _NoopArgs, "Does nothing.",
            "Data & Preprocessing", "SPA", (), ("any",), "metadata")


def bench_sandbox(n: int = 50) -> dict:
    """Start one :class:`~earthrl.envs.sandbox.parent.Sandbox` (no tools) and run ``n`` trivial execs
    (``x = 1``), then one exec that calls a tool bound to a no-op handler ``n`` times.

    Returns:
        ``{"startup_s": seconds from constructor to ready interpreter, "exec_median_ms": median
        round trip of a trivial exec, "exec_p90_ms", "tool_call_ms": mean cost of one tool call
        through the pipe, "backend" ("bwrap", "kernel", "weaker"), "seccomp", "netns",
        "pids_cgroup", "landlock": isolation layers in force (Landlock ABI, 0 = none), "n": n}``.

    Raises:
        ValueError: ``n`` < 1.
        SandboxUnavailable: the machine cannot isolate the code (see ``sandbox_backend``).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    sandbox_backend()  # one-time probe per process, not part of a sandbox's start-up
    with tempfile.TemporaryDirectory(prefix="earthrl_bench_sandbox_") as tmp:
        t0 = time.perf_counter()
        sb = Sandbox(Path(tmp) / "ws", tool_handler=lambda name, kw: {"text": "", "data": kw},
                     tools={"noop": NOOP})
        sb.start()
        startup = time.perf_counter() - t0
        layers = {k: sb.isolation[k]
                  for k in ("backend", "seccomp", "netns", "pids_cgroup", "landlock")}
        try:
            times = []
            for _ in range(n):
                t = time.perf_counter()
                sb.exec("x = 1")
                times.append(time.perf_counter() - t)
            t = time.perf_counter()
            res = sb.exec(f"for i in range({n}):\n    noop(value=i)")
            tool_s = (time.perf_counter() - t) / n
            assert len(res.tool_calls) == n and not res.error, res.observation
        finally:
            sb.close()
    times.sort()
    return {"startup_s": round(startup, 4),
            "exec_median_ms": round(statistics.median(times) * 1e3, 3),
            "exec_p90_ms": round(times[int(0.9 * (n - 1))] * 1e3, 3),
            "tool_call_ms": round(tool_s * 1e3, 3), **layers, "n": n}
