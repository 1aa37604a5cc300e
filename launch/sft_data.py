"""The SFT trajectory sources as one call, :func:`build_records` (``earthrl sft`` and ``earthrl sft-data
build`` both use it): oracle and failure-aware trajectories played in a real
:class:`~earthrl.envs.core.env.RSEnv` of the config's ``env`` group, teacher rollouts from a rollout engine
(agent loop) or an OpenAI-compatible endpoint, and the teacher loop's hint-guided re-explorations
(:mod:`earthrl.rollout.sft_teacher_loop`); answers judged with the rewards' check
(:func:`earthrl.rewards.outcome.answer_correct`), only correct trajectories returned.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from omegaconf import DictConfig

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.errors import ConfigError
from earthrl.launch.compute import job_device
from earthrl.launch.config_schema import to_settings
from earthrl.launch.config_schema.algorithm import SamplingConfig
from earthrl.launch.job_inputs import data_root
from earthrl.launch.sft_teacher_chat import TEACHER_ENGINES, teacher_chat
from earthrl.rewards.outcome import answer_correct
from earthrl.rollout.runtime import env_kwargs
from earthrl.rollout.sft_data import SOURCES, SFTTrajectory, build_oracle
from earthrl.rollout.sft_expert import SOURCE as EXPERT
from earthrl.rollout.sft_expert import build_expert
from earthrl.rollout.sft_failures import build_failure
from earthrl.rollout.sft_planner import build_planner
from earthrl.rollout.sft_simcraft import build_simcraft
from earthrl.rollout.sft_teacher import build_endpoint, from_trajectory, openai_chat
from earthrl.rollout.sft_teacher_loop import SOURCE as LOOP
from earthrl.rollout.sft_teacher_loop import build_teacher_loop
from earthrl.rollout.simcraft_roles import ChatEngine


def make_env(cfg: DictConfig, root: Path, workspace: Path) -> RSEnv:
    """The RSEnv of the config's ``env`` group (what the agent loop's EnvPool workers build)."""
    return RSEnv(root, workspace, **env_kwargs(to_settings(cfg.env)))


def build_records(source: str, cfg: DictConfig, tasks: list[dict], *, seed: int = 0, phrasing: str = "IF",
                  teacher: dict | None = None, user_mode: str = "both",
                  on_reject=None) -> tuple[list[SFTTrajectory], dict]:
    """SFT trajectories of ``source`` (``oracle`` | ``failure`` | ``teacher`` | ``teacher_loop`` | ``planner`` |
    ``expert_tuning`` | ``simcraft``) over ``tasks`` (``teacher_loop``: hint-guided re-explorations of the teacher's
    failed episodes, :func:`~earthrl.rollout.sft_teacher_loop.build_teacher_loop`; ``planner``: Earth-Agent-Pro's
    planner and executor turns, :func:`~earthrl.rollout.sft_planner.build_planner`; ``expert_tuning``: the 80%
    training half of HiRS Expert-tuning's items; ``simcraft``: SimCRAFT's synthesised, mock-validated episodes in the
    user modes of ``user_mode``, :func:`~earthrl.rollout.sft_simcraft.build_simcraft`, the roles played by the
    scripted engine or, with ``teacher={"engine": "openai", …}``, by the endpoint; ``on_reject(task, mode,
    rejection)`` sees each rejected candidate).

    Args:
        cfg: a composed config with ``env``, ``tasks`` (and, for an engine teacher, ``model``, ``cluster``).
        teacher: ``{"engine", "model", "base_url", "api_key", "samples", "temperature", "max_new_tokens"}``
            for ``source="teacher"``, with ``"attempts"`` (hinted re-explorations per task) for ``teacher_loop``
            (:func:`~earthrl.launch.sft_teacher_chat.teacher_chat`; turns per episode: ``env.max_turns``).

    Raises:
        ConfigError: an unknown source or teacher engine; ``planner`` in another action format than json.
    """
    if source not in SOURCES:
        raise ConfigError(f"source {source!r}: use one of {', '.join(SOURCES)}")
    if source == EXPERT:  # plain chat items, no environment (the held-out half: build_expert)
        recs, _, counts = build_expert(tasks, seed=seed)
        return recs, counts
    if source in ("planner", "simcraft") and cfg.env.action_format != "json":
        raise ConfigError(f"source {source} with env.action_format={cfg.env.action_format}: its records hold json "
                          "calls; use env=json (--format json)")
    root = data_root(cfg)
    with tempfile.TemporaryDirectory(prefix="earthrl-sft-data-") as ws:  # the episodes' workspaces, removed after
        return _build_in(Path(ws), source, cfg, tasks, root, seed, phrasing, teacher, user_mode, on_reject)


def _build_in(ws: Path, source, cfg, tasks, root, seed, phrasing, teacher, user_mode, on_reject):
    """:func:`build_records` for the sources that play episodes in an env, its workspaces under ``ws``."""
    if source == "simcraft":
        return _simcraft(cfg, tasks, root, ws, teacher, user_mode, on_reject)
    if source == "teacher" and (teacher or {}).get("engine") in ("hf", "vllm"):
        return _engine_teacher(cfg, tasks, root, ws, teacher, phrasing)
    env = make_env(cfg, root, ws / "ws")
    try:
        if source == "oracle":
            return build_oracle(env, tasks, answer_correct, phrasing)
        if source == "planner":
            return build_planner(env, tasks, answer_correct, phrasing)
        if source == "failure":
            return build_failure(env, tasks, answer_correct, phrasing, seed=seed)
        t = teacher or {}
        if source == "teacher" and t.get("engine") != "openai":
            raise ConfigError(f"teacher engine {t.get('engine')!r}: use one of {', '.join(TEACHER_ENGINES)}")
        chat, close = teacher_chat(cfg, t)
        try:
            play = dict(phrasing=phrasing, max_turns=int(cfg.env.max_turns), stop_strings=tuple(cfg.env.stop_strings))
            if source == LOOP:
                return build_teacher_loop(env, tasks, chat, answer_correct, attempts=int(t.get("attempts", 2)),
                                          on_task=_loop_progress(len(tasks)), **play)
            return build_endpoint(env, tasks, chat, answer_correct, samples=int(t.get("samples", 1)), **play)
        finally:
            close()
    finally:
        env.close()


def counts_text(counts: dict) -> str:
    """A data builder's counts as one line, nested counts flattened: ``kept 9, rejected slot_leak 0, hints
    dependency 8``."""
    parts = []
    for k, v in counts.items():
        parts += [f"{k} {sub} {n}" for sub, n in v.items()] if isinstance(v, dict) else [f"{k} {v}"]
    return ", ".join(parts)


def _loop_progress(total: int):
    """One line per task of the teacher loop (each task is minutes of generation on a CPU)."""
    def on_task(done: int, task: dict, outcome: str, episodes: int) -> None:
        print(f"teacher loop: task {done}/{total} {task.get('id', '?')}: {outcome} after {episodes} "
              f"episode{'s' if episodes != 1 else ''}", flush=True)
    return on_task


def _simcraft(cfg, tasks, root, ws, teacher, user_mode, on_reject):
    """SimCRAFT synthesis in a mock env of the config's ``env`` group (``env.mode`` forced to ``mock``)."""
    t = teacher or {}
    if t.get("engine") not in (None, "openai"):
        raise ConfigError(f"--source simcraft --engine {t['engine']}: the roles are played by the scripted engine or an "
                          "OpenAI-compatible endpoint (--engine openai; serve a local model with `earthrl serve`)")
    engine = None
    if t.get("engine") == "openai":
        engine = ChatEngine(openai_chat(t["base_url"], t["model"], temperature=float(t.get("temperature", 0.0)),
                                        max_tokens=int(t.get("max_new_tokens", 512)), api_key=t.get("api_key") or "EMPTY"))
    env = RSEnv(root, ws / "ws", **{**env_kwargs(to_settings(cfg.env)), "mode": "mock"})
    try:
        return build_simcraft(env, tasks, answer_correct, stop_strings=tuple(cfg.env.stop_strings), mode=user_mode, engine=engine, on_reject=on_reject)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    finally:
        env.close()


def _engine_teacher(cfg, tasks, root, ws, teacher, phrasing):
    """Teacher rollouts through the agent loop with a registered engine (``hf`` / ``vllm``)."""
    from earthrl.launch.host_memory import job_budget  # lazy: torch and the engines
    from earthrl.launch.job_inputs import model_path  # lazy: only the engine teacher needs the model folder
    from earthrl.rollout.runtime import RolloutRuntime  # lazy: Ray at start

    path = model_path(cfg)
    sampling = SamplingConfig(temperature=float(teacher["temperature"]), top_p=1.0,
                              max_new_tokens=int(teacher["max_new_tokens"]))
    memory = job_budget(cfg, path, len(tasks) * int(teacher.get("samples", 1)), learner=False)
    runtime = RolloutRuntime(to_settings(cfg), path, root, ws / "workspaces", lora=None,
                             kv_cache_gib=memory.kv if memory is not None else None, device=job_device(cfg)[0])
    env = make_env(cfg, root, ws / "ws")
    try:
        trajs, _ = runtime.rollout(tasks, int(teacher.get("samples", 1)), 0, sampling, phrasing, int(cfg.seed),
                                   group_prefix="teacher/")
        by_id = {t["id"]: t for t in tasks}
        users = {t["id"]: env.reset(TaskSpec.model_validate(t), phrasing) for t in tasks}
        recs = [from_trajectory(tr, by_id[tr.task_id], system=runtime.system_prompt, user=users[tr.task_id],
                                action_format=str(cfg.env.action_format), phrasing=phrasing, judge=answer_correct)
                for tr in trajs if not tr.faulted]
    finally:
        env.close()
        RolloutRuntime.shutdown(ws / "workspaces")
    kept = [r for r in recs if r.correct]
    return kept, {"episodes": len(trajs), "kept": len(kept), "incorrect": len(recs) - len(kept),
                  "faults": len(trajs) - len(recs)}
