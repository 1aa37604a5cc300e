"""Async, token-in/token-out multi-turn agent loop with the json action format.

One coroutine per episode: generate → parse/act in the EnvPool → append the
observation's template delta → generate … until the ``answer`` action, ``max_turns``
or the context budget. :class:`BatchingEngineClient` sends the generation requests of all
live episodes to the engine: as one lock-step batch per turn, or each at once for an engine
that batches concurrent calls itself (vLLM's continuous batching).

Faults cost only the episodes they hit (never the batch): a dead env actor, a step past
``env.step_timeout_s``, a dead or raising engine, a step result that carries an
``internal_error`` (an EarthRL bug caught by the env) and any exception inside the loop
itself mark the trajectory (:meth:`Trajectory.mark_failed`) and end its episode; the
trajectory is then ``faulted`` and left out of the loss.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from earthrl.envs.core.pool import EnvFailure, EnvTimeout
from earthrl.rollout.agent_registry import AGENT_LOOPS
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.hf_engine import SamplingParams
from earthrl.rollout.trajectory import Trajectory, Turn


class EngineFailure(RuntimeError):
    """The rollout engine died or raised while generating a batch (not the agent's fault)."""


class BatchingEngineClient:
    """Sends the generation requests of concurrent episodes to the engine actor, in one of two ways.

    - lock-step (``continuous=False``, engines that batch only within one call, e.g. the HF engine): a
      batch is sent once every live episode is waiting for generation, or ``max_wait_s`` after the first
      request of the batch, so that fast environment steps do not split a turn's batch in two engine
      calls; the next batch waits until this one is back.
    - continuous (``continuous=True``, engines that batch concurrent calls themselves, vLLM's continuous
      batching; :data:`earthrl.rollout.engines.CONTINUOUS_BATCHING`): each request is sent the moment its
      episode is ready, as its own call, while others are in flight; no turn waits for another episode's
      generation or environment step, and a short response frees its episode to step its environment
      while longer ones still decode.

    Args:
        engine: Ray actor handle of a rollout engine (:mod:`earthrl.rollout.engines`).
        params: sampling settings. Lock-step: call k of this client samples with seed ``params.seed + k``,
            so a step's rollouts do not depend on what the engine did before (exact resume). Continuous:
            the request of episode e's turn t samples with seed ``params.seed + 1000 * e + t``, whatever
            order the requests reach the engine in.
        max_batch: largest batch per engine call (lock-step).
        max_wait_s: longest wait for stragglers before a partial batch is sent (lock-step).
        restart: called (in a thread) when the engine actor died: starts a fresh engine with the
            current weights and returns its handle; None: a dead engine stays dead. The requests
            in flight on the dead engine fail with :class:`EngineFailure` either way.
        continuous: send each request at once (see above).
        route_adapters: the run has several LoRA adapters (one per role, ``agent.adapters``): every engine call
            names each prompt's adapter (``engine.generate(prompts, params, adapters)``, one name per prompt).
            False (one adapter): the engine serves its one adapter and the requests' adapters are not sent.
    """

    def __init__(self, engine, params: SamplingParams, max_batch: int = 64, max_wait_s: float = 2.0,
                 restart: Callable[[], object] | None = None, continuous: bool = False,
                 route_adapters: bool = False) -> None:
        self.engine = engine
        self.restart = restart
        self.continuous = continuous
        self.route_adapters = route_adapters
        self.engine_failures = 0
        self.engine_restarts = 0
        self.params = params
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.active = 0
        self.pending: list[tuple[list[int], asyncio.Future, str | None]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._restarting: asyncio.Lock | None = None
        self._in_flight = 0  # continuous: requests in the engine now
        self._busy_since = 0.0  # continuous: when the engine last went from idle to busy
        self.calls = 0
        self.generate_seconds = 0.0
        self.generated_tokens = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.batch_sizes: list[int] = []

    def episode_started(self) -> None:
        self.active += 1

    def episode_finished(self) -> None:
        self.active -= 1
        self._wake.set()

    def stats(self) -> dict[str, float]:
        """Engine usage of this client: calls, mean batch size (continuous: requests in flight when one was
        sent, itself included), prompt and generated tokens, the prompt tokens the engine's prefix cache served
        (``cached_prompt_tokens``; engines that do not report it count 0), seconds the engine was busy with
        this client's requests, failed calls and engine restarts."""
        return {"engine_calls": float(self.calls), "engine_failures": float(self.engine_failures),
                "engine_restarts": float(self.engine_restarts),
                "mean_batch": sum(self.batch_sizes) / max(len(self.batch_sizes), 1),
                "prompt_tokens": float(self.prompt_tokens), "generated_tokens": float(self.generated_tokens),
                "cached_prompt_tokens": float(self.cached_tokens),
                "generate_s": self.generate_seconds}

    def _count(self, prompt_ids: list[int], res: dict) -> None:
        self.prompt_tokens += len(prompt_ids)
        self.generated_tokens += len(res["response_ids"])
        self.cached_tokens += int(res.get("cached_tokens", 0))

    async def generate(self, prompt_ids: list[int], key: tuple[int, int] = (0, 0), adapter: str | None = None) -> dict:
        """Queue one request; resolves to the engine's result dict for it.

        Args:
            prompt_ids: the episode's whole context so far (token ids).
            key: (episode index in the rollout, turn index): the request's seed in continuous mode.
            adapter: the LoRA adapter of the turn's role (:meth:`LoopConfig.adapter`); sent to the engine when
                ``route_adapters``.

        Raises:
            EngineFailure: the engine died or raised while this request was in it.
        """
        if self.continuous:
            return await self._generate_now(prompt_ids, key, adapter)
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((prompt_ids, fut, adapter))
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._dispatch())
        return await fut

    def _send(self, engine, prompts: list[list[int]], params: SamplingParams, adapters: list[str | None]):
        """The engine call of one batch: with ``route_adapters`` each prompt's adapter goes along."""
        if self.route_adapters:
            return engine.generate.remote(prompts, params, adapters)
        return engine.generate.remote(prompts, params)

    async def _generate_now(self, prompt_ids: list[int], key: tuple[int, int], adapter: str | None = None) -> dict:
        """Continuous mode: one call for this request, sent now; the engine batches it with the others."""
        params = dataclasses.replace(self.params, seed=self.params.seed + 1000 * key[0] + key[1])
        engine = self.engine
        self.calls += 1
        if self._in_flight == 0:
            self._busy_since = time.perf_counter()
        self._in_flight += 1
        self.batch_sizes.append(self._in_flight)
        try:
            results = await self._send(engine, [prompt_ids], params, [adapter])
            if len(results) != 1:
                raise EngineFailure(f"the engine returned {len(results)} results for 1 prompt")
        except Exception as exc:  # this episode fails; the others go on
            raise EngineFailure(f"generation failed: {await self._failure(exc, engine)}") from None
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.generate_seconds += time.perf_counter() - self._busy_since
        self._count(prompt_ids, results[0])
        return results[0]

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
                except TimeoutError:
                    break
            batch, self.pending = self.pending[: self.max_batch], self.pending[self.max_batch:]
            t0 = time.perf_counter()
            params = dataclasses.replace(self.params, seed=self.params.seed + self.calls)
            self.calls += 1
            engine = self.engine
            try:
                results = await self._send(engine, [p for p, _, _ in batch], params, [a for _, _, a in batch])
                if len(results) != len(batch):
                    raise EngineFailure(f"the engine returned {len(results)} results for {len(batch)} prompts")
            except Exception as exc:  # the batch's episodes fail; the others go on
                reason = await self._failure(exc, engine)
                for _, fut, _ in batch:
                    if not fut.done():
                        fut.set_exception(EngineFailure(f"generation failed: {reason}"))
                continue
            self.generate_seconds += time.perf_counter() - t0
            self.batch_sizes.append(len(batch))
            for (prompt, fut, _), res in zip(batch, results):
                self._count(prompt, res)
                fut.set_result(res)

    async def _failure(self, exc: Exception, engine) -> str:
        """Count a failed engine call and restart the engine if its actor died (once per dead handle, however
        many calls were in flight on it); returns the reason for the failed requests."""
        from ray.exceptions import RayActorError

        self.engine_failures += 1
        cause = getattr(exc, "cause", None) or exc  # a Ray task error wraps the engine's own exception
        reason = f"{type(cause).__name__}: {str(cause).strip().splitlines()[0] if str(cause).strip() else ''}"
        if not isinstance(exc, RayActorError) or self.restart is None:
            return reason
        if self._restarting is None:
            self._restarting = asyncio.Lock()
        async with self._restarting:
            if self.engine is not engine:  # another request on the dead engine restarted it already
                return reason + " (engine restarted with the current weights)"
            try:
                self.engine = await asyncio.get_running_loop().run_in_executor(None, self.restart)
                self.engine_restarts += 1
                reason += " (engine restarted with the current weights)"
            except Exception as restart_exc:  # noqa: BLE001 - the next calls fail the same way
                reason += f" (restart failed: {type(restart_exc).__name__}: {restart_exc})"
        return reason


# StepResult fields copied onto the Turn when the environment sets them (hierarchical role,
# routed sub-goal, every tool call of a codeact turn, the step verifier's verdict, the anchor state
# at the turn's start)
TURN_FIELDS_FROM_ENV = ("role", "subgoal", "tool_calls", "verdict", "verdict_reasons", "anchor")


@dataclass(frozen=True)
class LoopConfig:
    """Agent-loop limits and settings of one rollout, built by the caller from the config (``env.max_turns``,
    ``env.max_context_tokens``, the ``agent`` group; the schemas in ``launch/config_schema/`` hold their defaults).

    Attributes:
        max_turns: assistant turns per episode before it is cut (no answer = incorrect); every role's turns count.
        max_context_tokens: an episode stops when its ids (a role's context, in loops with several) exceed
            this many tokens.
        phrasing: task phrasing shown to the agent: "IF" (steps given), "AP" (goal only) or "OW".
        agent: the agent loop (:data:`~earthrl.rollout.agent_registry.AGENT_LOOPS` name, ``agent.name``).
        options: the loop's own options (``agent.options``).
        adapters: role -> LoRA adapter name (``agent.adapters``); see :meth:`adapter`.
        default_adapter: the adapter of a role ``adapters`` does not name: ``"shared"``, or the run's one adapter
            when it has one (so that every turn of a one-adapter run names it).
    """

    max_turns: int
    max_context_tokens: int
    phrasing: str
    agent: str
    options: dict
    adapters: dict
    default_adapter: str = "shared"

    def options_as(self, schema: type):
        """``options`` as the loop's options dataclass ``schema`` (its defaults for the keys not given; the
        launcher checked the keys before the run, ``launch.job_inputs.check_agent``)."""
        return schema(**self.options)

    def adapter(self, role: str) -> str:
        """The adapter that generates ``role``'s turns: ``adapters[role]``, else :attr:`default_adapter`."""
        return str(self.adapters.get(role, self.default_adapter))


def new_trajectory(task: dict, group: str) -> Trajectory:
    """An empty trajectory of ``task`` in ``group`` with a fresh episode id (``<task id>-<8 hex>``)."""
    return Trajectory(task_id=task["id"], group=group, prompt_ids=[], episode_id=f"{task['id']}-{uuid.uuid4().hex[:8]}")


CUT_NOTE = (" Your reply was cut at {n} tokens (this turn's max_new_tokens, sampling.max_new_tokens) before "
            "the call was complete: write a shorter call.")


def note_cut(out: dict, res: dict) -> dict:
    """Tell the agent why its call did not parse when the engine cut it: a ``parse_error`` of a response whose
    ``finish_reason`` is ``"length"`` gets :data:`CUT_NOTE` (with the response's token count) appended to its
    observation, in place (idempotent). Returns ``res``."""
    if out.get("finish_reason") == "length" and res.get("error_kind") == "parse_error":
        note = CUT_NOTE.format(n=len(out.get("response_ids") or []))
        if not str(res.get("observation", "")).endswith(note):
            res["observation"] = f"{res.get('observation', '')}{note}"
    return res


def turn_from(out: dict, text: str, res: dict, role: str, cfg: LoopConfig, **fields) -> Turn:
    """The :class:`Turn` of one engine result ``out`` (decoded as ``text``) and the env's step result ``res``:
    the env's fields of :data:`TURN_FIELDS_FROM_ENV`, the adapter of the turn's role (the env's ``role``
    when it names one, else ``role``) and ``fields`` (``context_ids``, ``node``, …). A parse error of a cut
    response gets :func:`note_cut`'s note in ``res`` (so the next turn's observation carries it too)."""
    note_cut(out, res)
    env_fields = {k: res[k] for k in TURN_FIELDS_FROM_ENV if res.get(k) is not None}
    turn = Turn(response_ids=out["response_ids"], response_logprobs=out["logprobs"], response_text=text,
                observation=res["observation"], error=bool(res["error"]), error_kind=res["error_kind"],
                tool_call=res["tool_call"], finish_reason=out["finish_reason"], **{"role": role, **env_fields, **fields})
    turn.adapter = cfg.adapter(turn.role)
    return turn


async def play(traj: Trajectory, body: Callable[[], Awaitable[None]], *, engine: BatchingEngineClient,
               pool) -> Trajectory:
    """Run an episode's turns (``body``) with the fault handling every agent loop shares, then close it.

    A fault marks the trajectory and ends the episode (module doc): an :class:`EnvTimeout`, an
    :class:`EnvFailure`, an :class:`EngineFailure`, or any other exception (``internal_error`` with its
    traceback). A clean end stores the env's episode record. Never raises.
    """
    engine.episode_started()
    try:
        await body()
        if traj.failure is None:
            traj.record = await pool.episode_record(traj.episode_id)
    except EnvTimeout as exc:
        traj.mark_failed("env_timeout", turn=len(traj.turns), detail=str(exc))
    except EnvFailure as exc:
        traj.mark_failed("env_failure", turn=len(traj.turns), detail=str(exc))
    except EngineFailure as exc:
        traj.mark_failed("engine_failure", turn=len(traj.turns), detail=str(exc))
    except Exception:  # noqa: BLE001 - a bug of EarthRL ends this episode, never the batch
        traj.mark_failed("internal_error", traceback.format_exc(), turn=len(traj.turns))
    finally:
        engine.episode_finished()
        await pool.close(traj.episode_id)
    return traj


@AGENT_LOOPS.register("react")
async def run_episode(task: dict, group: str, *, system: str, codec: ChatCodec, tokenizer,
                      engine: BatchingEngineClient, pool, cfg: LoopConfig, index: int = 0) -> Trajectory:
    """Play one task to its end with the flat loop and return the trajectory. Never raises: agent errors are
    error turns, faults mark the trajectory (:attr:`Trajectory.failure`) and end the episode.

    Args:
        task: a TaskSpec as a dict (``model_dump()``).
        group: GRPO group key.
        system: system prompt text (tool schemas included).
        codec: chat-template codec of the model's tokenizer.
        tokenizer: the model's tokenizer (decodes responses into action text).
        engine: batching client of the rollout engine.
        pool: :class:`earthrl.envs.core.pool.EnvPool`.
        cfg: :class:`LoopConfig`.
        index: the episode's place in its rollout (part of its requests' seeds in continuous mode).
    """
    traj = new_trajectory(task, group)
    episode_id = traj.episode_id

    async def turns() -> None:
        user = await pool.reset(episode_id, task, cfg.phrasing)
        traj.prompt_ids = codec.prompt_ids(system, user)
        ids = list(traj.prompt_ids)
        for t in range(cfg.max_turns):
            out = await engine.generate(ids, (index, t), adapter=cfg.adapter("agent"))
            text = tokenizer.decode(out["response_ids"], skip_special_tokens=True)
            res = await pool.step(episode_id, text)
            turn = turn_from(out, text, res, "agent", cfg)
            traj.turns.append(turn)
            if res.get("internal_error"):  # an EarthRL bug inside the step: the episode is marked
                traj.mark_failed("internal_error", res["internal_error"], turn=t)
                return
            if res["done"]:
                traj.answer = res["answer"]
                return
            if t + 1 == cfg.max_turns:
                return
            obs_ids = codec.observation_ids(res["observation"], out["response_ids"])
            if len(ids) + len(out["response_ids"]) + len(obs_ids) > cfg.max_context_tokens:
                return
            turn.observation_ids = obs_ids
            ids += out["response_ids"] + obs_ids

    return await play(traj, turns, engine=engine, pool=pool)


async def collect_rollouts(tasks: list[dict], group_size: int, step: int, group_prefix: str = "",
                           **kwargs) -> list[Trajectory]:
    """Run ``group_size`` episodes of every task concurrently, with the agent loop ``cfg.agent`` (``kwargs``:
    :func:`run_episode`'s keywords).

    Returns:
        len(tasks) * group_size trajectories, grouped by task in order; group keys are
        ``"<group_prefix><step>/<task id>"``.
    """
    episode = AGENT_LOOPS.lookup(kwargs["cfg"].agent)
    coros = [episode(task, f"{group_prefix}{step}/{task['id']}", index=k * group_size + g, **kwargs)
             for k, task in enumerate(tasks) for g in range(group_size)]
    return list(await asyncio.gather(*coros))
