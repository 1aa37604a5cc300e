"""Async, token-in/token-out multi-turn agent loop with the json action format.

One coroutine per episode: generate → parse/act in the EnvPool → append the
observation's template delta → generate … until the ``answer`` action, ``max_turns``
or the context budget. Generation requests of all live episodes are batched into one
engine call by :class:`BatchingEngineClient`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from dataclasses import dataclass

from earthrl.envs.pool import EnvFailure
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.hf_engine import SamplingParams
from earthrl.rollout.trajectory import Trajectory, Turn


class BatchingEngineClient:
    """Collects concurrent ``generate`` requests into batched engine calls.

    A batch is sent once every live episode is waiting for generation, or ``max_wait_s``
    after the first request of the batch, so that fast environment steps do not split a
    turn's batch in two engine calls.

    Args:
        engine: Ray actor handle of :class:`earthrl.rollout.hf_engine.HFEngine`.
        params: sampling settings; call k of this client samples with seed ``params.seed + k``,
            so a step's rollouts do not depend on what the engine did before (exact resume).
        max_batch: largest batch per engine call.
        max_wait_s: longest wait for stragglers before a partial batch is sent.
    """

    def __init__(self, engine, params: SamplingParams, max_batch: int = 64, max_wait_s: float = 2.0) -> None:
        self.engine = engine
        self.params = params
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.active = 0
        self.pending: list[tuple[list[int], asyncio.Future]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.calls = 0
        self.generate_seconds = 0.0
        self.generated_tokens = 0
        self.prompt_tokens = 0
        self.batch_sizes: list[int] = []

    def episode_started(self) -> None:
        self.active += 1

    def episode_finished(self) -> None:
        self.active -= 1
        self._wake.set()

    def stats(self) -> dict[str, float]:
        """Engine usage of this client: calls, mean batch size, prompt and generated tokens, seconds."""
        return {"engine_calls": float(self.calls),
                "mean_batch": sum(self.batch_sizes) / max(len(self.batch_sizes), 1),
                "prompt_tokens": float(self.prompt_tokens), "generated_tokens": float(self.generated_tokens),
                "generate_s": self.generate_seconds}

    async def generate(self, prompt_ids: list[int]) -> dict:
        """Queue one request; resolves to the engine's result dict for it."""
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((prompt_ids, fut))
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._dispatch())
        return await fut

    async def _dispatch(self) -> None:
        while self.pending:
            first = time.monotonic()
            while len(self.pending) < min(self.active, self.max_batch):
                remaining = self.max_wait_s - (time.monotonic() - first)
                if remaining <= 0:
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), remaining)
                except asyncio.TimeoutError:
                    break
            batch, self.pending = self.pending[: self.max_batch], self.pending[self.max_batch:]
            t0 = time.perf_counter()
            params = dataclasses.replace(self.params, seed=self.params.seed + self.calls)
            self.calls += 1
            try:
                results = await self.engine.generate.remote([p for p, _ in batch], params)
            except Exception as exc:  # engine failure reaches every waiting episode
                for _, fut in batch:
                    fut.set_exception(exc)
                continue
            self.generate_seconds += time.perf_counter() - t0
            self.batch_sizes.append(len(batch))
            self.prompt_tokens += sum(len(p) for p, _ in batch)
            for (_, fut), res in zip(batch, results):
                self.generated_tokens += len(res["response_ids"])
                fut.set_result(res)


# StepResult fields copied onto the Turn when the environment sets them (hierarchical role,
# routed sub-goal, every tool call of a codeact turn, the step verifier's verdict)
TURN_FIELDS_FROM_ENV = ("role", "subgoal", "tool_calls", "verdict", "verdict_reasons")


@dataclass(frozen=True)
class LoopConfig:
    """Agent-loop limits.

    Attributes:
        max_turns: assistant turns per episode before it is cut (no answer = incorrect).
        max_context_tokens: an episode stops when its ids exceed this many tokens.
        phrasing: task phrasing shown to the agent: "IF" (steps given) or "AP" (goal only).
    """

    max_turns: int = 4
    max_context_tokens: int = 3072
    phrasing: str = "IF"


async def run_episode(task: dict, group: str, *, system: str, codec: ChatCodec, tokenizer,
                      engine: BatchingEngineClient, pool, cfg: LoopConfig) -> Trajectory:
    """Play one task to its end and return the trajectory (never raises for agent errors).

    Args:
        task: a TaskSpec as a dict (``model_dump()``).
        group: GRPO group key.
        system: system prompt text (tool schemas included).
        codec: chat-template codec of the model's tokenizer.
        tokenizer: the model's tokenizer (decodes responses into action text).
        engine: batching client of the rollout engine.
        pool: :class:`earthrl.envs.pool.EnvPool`.
        cfg: :class:`LoopConfig`.
    """
    episode_id = f"{task['id']}-{uuid.uuid4().hex[:8]}"
    traj = Trajectory(task_id=task["id"], group=group, prompt_ids=[])
    engine.episode_started()
    try:
        user = await pool.reset(episode_id, task, cfg.phrasing)
        traj.prompt_ids = codec.prompt_ids(system, user)
        ids = list(traj.prompt_ids)
        for t in range(cfg.max_turns):
            out = await engine.generate(ids)
            text = tokenizer.decode(out["response_ids"], skip_special_tokens=True)
            res = await pool.step(episode_id, text)
            turn = Turn(response_ids=out["response_ids"], response_logprobs=out["logprobs"],
                        response_text=text, observation=res["observation"], error=bool(res["error"]),
                        error_kind=res["error_kind"], tool_call=res["tool_call"], finish_reason=out["finish_reason"],
                        **{k: res[k] for k in TURN_FIELDS_FROM_ENV if res.get(k) is not None})
            traj.turns.append(turn)
            if res["done"]:
                traj.answer = res["answer"]
                break
            if t + 1 == cfg.max_turns:
                break
            obs_ids = codec.observation_ids(res["observation"], out["response_ids"])
            if len(ids) + len(out["response_ids"]) + len(obs_ids) > cfg.max_context_tokens:
                break
            turn.observation_ids = obs_ids
            ids += out["response_ids"] + obs_ids
        traj.record = await pool.episode_record(episode_id)
    except EnvFailure:
        traj.env_failure = True
    finally:
        engine.episode_finished()
        await pool.close(episode_id)
    return traj


async def collect_rollouts(tasks: list[dict], group_size: int, step: int, group_prefix: str = "",
                           **kwargs) -> list[Trajectory]:
    """Run ``group_size`` episodes of every task concurrently.

    Returns:
        len(tasks) * group_size trajectories, grouped by task in order; group keys are
        ``"<group_prefix><step>/<task id>"``.
    """
    coros = [run_episode(task, f"{group_prefix}{step}/{task['id']}", **kwargs)
             for task in tasks for _ in range(group_size)]
    return list(await asyncio.gather(*coros))
