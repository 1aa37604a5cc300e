"""EnvPool: a dead worker is re-created and its episodes become env failures; workspaces are
removed at episode end; the pool returns StepResult dicts and episode records."""

from __future__ import annotations

import asyncio
import os

import pytest

from earthrl.envs.core.pool import EnvFailure, EnvPool, EnvWorker
from tests.conftest import InProcessActor

LT = "LT50350322008174PAC01"
TASK = {"id": "t/1", "question": {"IF": "mean NDVI"}, "data": [LT], "reference": [],
        "answer": {"value": 0.7}, "skill": "spectral_index"}
NDVI = '<tool_call>{"name": "spectral_index", "arguments": {"scene": "%s", "index": "NDVI"}}</tool_call>' % LT


class _DeadActor:
    """A Ray actor handle whose process is gone: every call raises RayActorError."""

    def __getattr__(self, name):
        from ray.exceptions import RayActorError

        class _M:
            def remote(self, *args):
                fut = asyncio.get_running_loop().create_future()
                fut.set_exception(RayActorError())
                return fut

        return _M()


def _pool(workers, factory=None):
    pool = EnvPool.__new__(EnvPool)
    pool.workers = workers
    if factory is not None:
        pool._factory, pool._kill, pool.respawns = factory, lambda h: None, 0
    return pool


def test_step_dict_record_and_workspace_removal(data_root, tmp_path):
    worker = EnvWorker(str(data_root), str(tmp_path / "ws"))
    pool = _pool([InProcessActor(worker)])

    async def go():
        await pool.reset("ep/1", TASK, "IF")
        res = await pool.step("ep/1", NDVI)
        ws = worker._workspace("ep/1")
        assert (ws / f"ndvi_{LT}.tif").exists()
        record = await pool.episode_record("ep/1")
        closed = await pool.close("ep/1")
        return res, ws, record, closed

    res, ws, record, closed = asyncio.run(go())
    assert set(res) == {"observation", "done", "error", "error_kind", "tool_call", "answer", "result",
                        "verdict", "verdict_reasons", "tool_calls", "subgoal", "role", "tool_s",
                        "internal_error", "anchor"}
    assert (res["role"], res["verdict"], res["error"]) == ("agent", "pass", False)
    assert record == closed == {"artifacts": [{"name": f"ndvi_{LT}", "tool": "spectral_index", "parents": [LT]}],
                                "skills_opened": [], "docs_opened": []}
    assert not ws.exists() and worker.live_episodes() == 0


def test_dead_worker_is_recreated_and_its_episodes_fail(data_root, tmp_path):
    made = []

    def factory():
        made.append(EnvWorker(str(data_root), str(tmp_path / "ws")))
        return InProcessActor(made[-1])

    dead = _DeadActor()
    pool = _pool([dead], factory)

    async def go():
        with pytest.raises(EnvFailure, match="step of episode ep/1 failed in the environment"):
            await pool.step("ep/1", NDVI)
        assert pool.workers[0] is not dead and pool.respawns == 1
        with pytest.raises(EnvFailure, match="not hosted here"):  # the episode is gone with its actor
            await pool.step("ep/1", NDVI)
        assert pool.respawns == 1  # a live worker answering "not hosted" is not re-created
        assert await pool.close("ep/1") == {}
        await pool.reset("ep/2", TASK, "IF")
        return await pool.step("ep/2", NDVI)

    res = asyncio.run(go())
    assert not res["error"] and len(made) == 1


def test_system_prompt_follows_the_action_format(data_root, tmp_path):
    json_w = EnvWorker(str(data_root), str(tmp_path / "a"))
    hier_w = EnvWorker(str(data_root), str(tmp_path / "b"), {"action_format": "hierarchical"})
    assert "<tool_call>" in json_w.system_prompt() and "<route>" not in json_w.system_prompt()
    assert "<route>" in hier_w.system_prompt()
    assert not (tmp_path / "a" / "_schema_probe").exists()


class _CrashingWorker(EnvWorker):
    """Kills its own process on a step whose action says so."""

    def step(self, episode_id, action_text):
        if action_text == "crash":
            os._exit(1)
        return super().step(episode_id, action_text)


@pytest.mark.slow
def test_real_ray_actor_crash_restarts_and_marks_env_failure(data_root, tmp_path):
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        pool = EnvPool.__new__(EnvPool)
        actor = ray.remote(num_cpus=0, max_restarts=2, max_task_retries=0)(_CrashingWorker)
        pool._factory = lambda: actor.remote(str(data_root), str(tmp_path / "ws"), None)
        pool._kill = lambda h: ray.kill(h, no_restart=True)
        pool.workers, pool.respawns = [pool._factory()], 0

        async def go():
            await pool.reset("ep/1", TASK, "IF")
            with pytest.raises(EnvFailure):
                await pool.step("ep/1", "crash")
            with pytest.raises(EnvFailure):
                await pool.step("ep/1", NDVI)
            await pool.close("ep/1")
            await pool.reset("ep/2", TASK, "IF")
            return await pool.step("ep/2", NDVI)

        res = asyncio.run(go())
        assert not res["error"] and res["verdict"] == "pass"
        assert not (tmp_path / "ws" / "ep_1").exists()
    finally:
        ray.shutdown()
