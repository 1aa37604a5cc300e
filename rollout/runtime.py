"""The rollout runtime shared by ``earthrl train`` and ``earthrl eval``.

One object owns the Ray local cluster, the rollout-engine actor, the EnvPool actors, the
tokenizer and chat codec, and turns a batch of tasks into trajectories with the async
agent loop. The learner (train) and the report (eval) sit on top of it.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from pathlib import Path

from earthrl.envs.core.pool import EnvPool
from earthrl.envs.core.text_embedder import EMBEDDER
from earthrl.envs.data.catalog import catalog, missing_hint
from earthrl.envs.errors import ConfigError
from earthrl.envs.kill_points import KILL_ENV, PAUSE_ENV, kill_point
from earthrl.envs.paths import model_dir
from earthrl.models.lora import adapter_names
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.ray_signals import keep_stop_handlers
from earthrl.rollout.run_log import quiet_loggers, route_ray_workers


def env_kwargs(env) -> dict:
    """RSEnv keyword arguments from the typed ``env`` settings (``earthrl.launch.config_schema.env.EnvConfig``,
    checked by the launcher before anything starts): the action format, mode, toolset, injected errors,
    verifier threshold, observation budget, SOP retrieval (``env.sops``) and the format's options (sandbox limits and
    :class:`~earthrl.envs.sandbox.parent.SandboxSettings`). The other env settings configure the agent loop
    (:class:`~earthrl.rollout.agent_loop.LoopConfig`) and the pool."""
    inject = env.inject_errors
    return {"action_format": env.action_format, "mode": env.mode,
            "toolset": list(env.toolset) if isinstance(env.toolset, (list, tuple)) else env.toolset,
            "inject_errors": ({k: v for k, v in asdict(inject).items() if v is not None} if inject is not None else None),
            "nan_max": float(env.nan_max), "max_obs_chars": int(env.max_obs_chars),
            "format_options": {"limits": dict(env.format_options.limits), "sandbox": env.format_options.sandbox},
            "sops": sop_settings(env.sops) if env.sops.retrieve else None}


def sop_settings(sops) -> dict:
    """The :func:`earthrl.envs.core.sops.retriever` keyword arguments of the typed ``env.sops`` settings (the
    encoder is the fetched ``all-minilm-l6-v2``)."""
    return {"embedder_folder": str(model_dir(EMBEDDER)), "folder": sops.folder, "top_k": int(sops.top_k),
            "threshold": float(sops.threshold)}


def check_task_data(tasks: list[dict], data_root: Path) -> None:
    """Every scene a task names exists under the data root (and its fetched siblings).

    Raises:
        ConfigError: the first task with unknown scenes, naming them and where they were looked for.
    """
    scenes = catalog(Path(data_root))
    for task in tasks:
        missing = [s for s in task["data"] if s not in scenes]
        if missing:
            raise ConfigError(f"task {task['id']}: field data names scenes {missing} that are not under {data_root} "
                              f"or in the user catalogue: {missing_hint(missing)}")


async def _kill_after_first_call(client, point: str, step: int) -> None:
    """Kill-anywhere test hook (:func:`earthrl.envs.kill_points.kill_point`) in the middle of a rollout:
    ``point`` is ``rollout`` for a training step's rollout, ``rollout/<prefix>`` for another (``rollout/eval``,
    ``rollout/heldout``), ``step`` the 1-based step or chunk."""
    import os

    if f"{point}:{step}" not in (os.environ.get(KILL_ENV), os.environ.get(PAUSE_ENV)):
        return
    while client.calls < 1 or client.generated_tokens == 0:
        await asyncio.sleep(0.01)
    kill_point(point, step)


_ABANDONED: list[asyncio.Task] = []


def run_until_stopped(coro):
    """``asyncio.run(coro)``, except on a Ctrl-C / SIGTERM stop (a ``KeyboardInterrupt`` raised in the loop):
    the episodes in flight are abandoned, not cancelled and awaited (their ``finally`` would wait on env
    actors that Ray's shutdown is about to end) and kept from the garbage collector until the process
    exits, and their tasks' reports of it are dropped."""
    loop = asyncio.new_event_loop()
    stopped = False

    def report(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        if not stopped:
            loop.default_exception_handler(context)

    loop.set_exception_handler(report)
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(coro)
    except KeyboardInterrupt:
        stopped = True
        _ABANDONED.extend(asyncio.all_tasks(loop))  # never collected: closing them would call Ray after its shutdown
        raise
    finally:
        if not stopped:  # what asyncio.run does on the way out
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        asyncio.set_event_loop(None)
        loop.close()


def loop_roles(name: str) -> tuple[str, ...]:
    """The roles the agent loop ``name`` (:data:`~earthrl.rollout.agent_registry.AGENT_LOOPS`) declares in its
    function's ``roles`` attribute; () when it declares none or is unknown."""
    from earthrl.rollout.agent_registry import AGENT_LOOPS  # lazy: the built-in loops import torch

    try:
        return tuple(getattr(AGENT_LOOPS.lookup(name, error=ValueError), "roles", ()))
    except ValueError:
        return ()


def run_adapters(agent) -> tuple[str, ...]:
    """The LoRA adapters a run with the ``agent`` settings (``cfg.agent``: ``name``, ``adapters``) trains and serves:
    :func:`~earthrl.models.lora.adapter_names` of its adapters and its loop's roles.

    Raises:
        ValueError: a bad adapter name (names the role and the fix).
    """
    return adapter_names(dict(agent.adapters), loop_roles(str(agent.name)))


class RolloutRuntime:
    """Ray + rollout engine + EnvPool + chat codec for one model.

    Args:
        settings: the job's typed settings (``earthrl.launch.config_schema.roots.JobConfig``: its ``model``,
            ``env``, ``agent`` and ``cluster``), never the Hydra tree.
        model_path: HF folder of the base model.
        data_root: data folder of the task suite.
        workspace_root: where EnvPool episodes get their workspaces.
        lora: ``{"rank", "alpha", …}`` of the adapter the engine will receive, or None (no adapter).
        kv_cache_gib: the vLLM engine's KV cache on CPU (GiB), as the launcher's memory plan derived it
            (``launch/host_memory``); None: the engine's default.
        device: "cpu" or "cuda", ``cluster.device`` as the launcher resolved it
            (:func:`earthrl.models.device.resolve_device`): where the engine computes (on ``cuda`` it gets one
            of Ray's GPUs and, vLLM, sleeps between rollouts: :meth:`rollout`).

    Attributes:
        adapters: the run's LoRA adapters (:func:`earthrl.models.lora.adapter_names` of ``agent.adapters``): with
            several, the engine is told how many (``num_adapters``), each is pushed under its name
            (:meth:`push_lora`) and every request names its role's adapter.
    """

    def __init__(self, settings, model_path: Path, data_root: Path, workspace_root: Path,
                 lora: dict | None, kv_cache_gib: float | None = None, device: str = "cpu") -> None:
        import ray
        from transformers import AutoTokenizer

        # lazy: torch at import (hf_engine); config checks import this module
        from earthrl.rollout.engines import continuous_batching, make_engine, resolve_engine

        cluster, env = settings.cluster, settings.env
        self.env, self.agent = env, settings.agent
        self.adapters = run_adapters(self.agent)
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        self.codec = ChatCodec(self.tokenizer)
        eos = self.tokenizer.eos_token_id
        stop_ids = [self.codec.eos_id] + ([eos] if eos is not None and eos != self.codec.eos_id else [])
        if not ray.is_initialized():
            gpus = None
            if device == "cuda":  # the engine actor asks Ray for one; Ray's own detection is not relied on
                import torch  # lazy: torch at import; config checks import this module

                gpus = torch.cuda.device_count()
            quiet_loggers()  # Ray's banners to the run log
            with keep_stop_handlers():  # Ray's SIGTERM handler would bypass the run's clean stop
                ray.init(num_cpus=int(cluster.num_cpus), num_gpus=gpus, include_dashboard=False, log_to_driver=True,
                         object_store_memory=int(cluster.object_store_memory_mb) * 2**20,
                         configure_logging=False)
            route_ray_workers()  # the actors' output to the run log
        self.engine_name, why = resolve_engine(cluster.engine, str(cluster.vllm.python))
        print(f"cluster.engine={cluster.engine} -> {self.engine_name} ({why})", flush=True)
        engine_options = getattr(cluster, self.engine_name, None)  # cluster.hf / cluster.vllm
        options = asdict(engine_options) if engine_options is not None else {}
        if kv_cache_gib is not None:
            options["kv_cache_gib"] = float(kv_cache_gib)
        self.continuous = continuous_batching(self.engine_name, options)
        if len(self.adapters) > 1:  # one LoRA slot per adapter (vLLM's max_loras)
            options["num_adapters"] = len(self.adapters)
        self._start_engine = lambda: make_engine(
            self.engine_name, options, model_path=str(model_path), stop_ids=stop_ids, lora=lora,
            stop_strings=list(env.stop_strings), dtype=settings.model.dtype, num_threads=int(cluster.torch_threads),
            device=device)
        self.engine = self._start_engine()
        self._lora_state: dict[str | None, dict] = {}
        self.engine_restarts = 0
        timeout = env.step_timeout_s
        self.pool = EnvPool(int(env.num_workers), str(data_root), str(workspace_root), env_kwargs=env_kwargs(env),
                            step_timeout_s=float(timeout) if timeout is not None else None,
                            keep_workspaces=int(env.keep_workspaces_max) if env.keep_workspaces else 0)
        self.system_prompt = self.pool.system_prompt()

    def push_lora(self, state_dict: dict, adapter: str | None = None) -> None:
        """Send LoRA weights (peft state-dict keys) to the engine; blocks until merged. The weights
        are kept so that a restarted engine gets them too (:meth:`restart_engine`).

        Args:
            adapter: the adapter they are (one of :attr:`adapters`); None: the run's one adapter.
        """
        import ray

        ray.get(self._set_lora(self.engine, state_dict, adapter))
        self._lora_state[adapter] = state_dict

    @staticmethod
    def _set_lora(engine, state_dict: dict, adapter: str | None):
        return (engine.set_lora_weights.remote(state_dict) if adapter is None
                else engine.set_lora_weights.remote(state_dict, adapter))

    def restart_engine(self):
        """Replace the (dead) engine actor by a fresh one and push it the last LoRA weights;
        returns the new handle. Called by the batching client when the engine actor died."""
        import ray

        try:
            ray.kill(self.engine, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        self.engine = self._start_engine()
        for adapter, state in self._lora_state.items():
            ray.get(self._set_lora(self.engine, state, adapter))
        self.engine_restarts += 1
        return self.engine

    def rollout(self, tasks: list[dict], group_size: int, step: int, sampling, phrasing: str,
                seed: int, group_prefix: str = "") -> tuple[list, dict]:
        """Sample ``group_size`` trajectories per task.

        Args:
            tasks: TaskSpec dicts.
            step: step index (part of the group keys and of the sampling seed).
            sampling: ``temperature``, ``top_p``, ``max_new_tokens`` (a typed sampling setting).
            phrasing: ``"IF"``/``"AP"``/``"OW"``.
            seed: run seed; the engine seed of the step is derived from it and ``step``.
            group_prefix: prefix of the group keys (keeps eval groups apart from training groups).

        Returns:
            (trajectories grouped by task in order, engine stats of the batching client). Faults
            mark their trajectories (:attr:`~earthrl.rollout.trajectory.Trajectory.failure`); a
            dead engine is restarted with the current weights and the rollout goes on. Afterwards the
            engine sleeps (``sleep()``: vLLM on a GPU frees the card for the learner and wakes at the next
            generate; the other engines do nothing).
        """
        # lazy: torch at import; config checks import this module
        from earthrl.rollout.agent_loop import BatchingEngineClient, LoopConfig, collect_rollouts

        # lazy: torch at import; config checks import this module
        from earthrl.rollout.hf_engine import SamplingParams

        env = self.env
        params = SamplingParams(max_new_tokens=int(sampling.max_new_tokens), temperature=float(sampling.temperature),
                                top_p=float(sampling.top_p), seed=int(seed) * 100003 + step * 1009)
        loop_cfg = LoopConfig(max_turns=int(env.max_turns), max_context_tokens=int(env.max_context_tokens),
                              phrasing=phrasing, agent=str(self.agent.name), options=dict(self.agent.options),
                              adapters=dict(self.agent.adapters),
                              default_adapter=self.adapters[0] if len(self.adapters) == 1 else "shared")

        async def go():
            client = BatchingEngineClient(self.engine, params, restart=self.restart_engine, continuous=self.continuous,
                                          route_adapters=len(self.adapters) > 1)
            # test hook: stop the run once the first batch of this rollout was generated
            point = f"rollout/{group_prefix.split('/')[0]}" if group_prefix else "rollout"
            asyncio.get_running_loop().create_task(_kill_after_first_call(client, point, step + 1))
            trajs = await collect_rollouts(tasks, group_size, step, system=self.system_prompt, codec=self.codec,
                                           tokenizer=self.tokenizer, engine=client, pool=self.pool, cfg=loop_cfg,
                                           group_prefix=group_prefix)
            return trajs, client.stats()

        out = run_until_stopped(go())
        self.sleep_engine()
        return out

    def sleep_engine(self) -> None:
        """The engine's ``sleep()`` after a rollout (the engine contract; vLLM on a GPU frees the card). An engine
        that died since is left to the next rollout, whose batching client restarts it; an engine that
        refuses to sleep raises."""
        import ray  # lazy: Ray at start

        try:
            ray.get(self.engine.sleep.remote())
        except ray.exceptions.RayActorError:
            pass

    @staticmethod
    def shutdown(workspace_root: Path | None = None) -> None:
        """Stop Ray (actors included) and remove the workspaces folder if no episode left anything."""
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if workspace_root is not None and Path(workspace_root).is_dir() and not any(Path(workspace_root).iterdir()):
            Path(workspace_root).rmdir()
