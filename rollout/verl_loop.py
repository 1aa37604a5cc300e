"""EarthRL's agent loop as a registered verl agent loop (``backend=verl``).

verl 0.9.1's contract (``verl/experimental/agent_loop/agent_loop.py``): an :class:`AgentLoopBase`
subclass registered by name, ``async def run(self, sampling_params, **kwargs) -> AgentLoopOutput``,
generation through ``self.server_manager.generate(request_id, *, prompt_ids, sampling_params)``
which returns a ``TokenOutput`` (``token_ids``, ``log_probs``, ``stop_reason``).

Nothing of the multi-turn logic is repeated here: :class:`EarthRLAgentLoop` runs
:func:`earthrl.rollout.agent_loop.run_episode` (the local backend's episode, faults included) with
:class:`ServerManagerEngine` in place of the batching engine client, and converts the trajectory
with :func:`to_agent_loop_output`:

- ``response_ids`` = every turn's generated ids followed by its observation ids (token-in/token-out);
- ``response_mask`` 1 on generated ids only; ``response_logprobs`` the engine's, 0.0 on observations;
- all three cut at ``actor_rollout_ref.rollout.response_length`` (verl pads to it and cannot take more);
- a trajectory hit by a fault (env, timeout, engine, internal error) keeps its ids but gets an all-zero
  mask: it is left out of the loss, as on the local backend;
- ``extra_fields``: ``earthrl_turns`` (per assistant turn: ``role``, ``error``, ``error_kind``,
  ``step`` (index among the turns of the same role), ``span`` ([start, end) in response coordinates,
  None when cut off), ``group`` = ``"<uid>/<role>/<step>"``, the composite id of HiRS's
  (task, step) grouping where verl only knows ``uid``, and ``anchor``, the anchor state at the
  turn's start for GiGPO's step groups), ``earthrl_group`` (the trajectory's group,
  the ``uid``), ``earthrl_failure``, ``earthrl_trajectory`` (``Trajectory.to_dict()``, read by the
  reward function :func:`earthrl.algorithms.verl_reward.compute_score`), ``earthrl_task`` and
  ``earthrl_algorithm`` (the ``algorithm`` config, so that the reward function scores as the local
  backend does).

The loop's settings are the ``earthrl`` section of the verl config (written by
:func:`earthrl.launch.verl_config.compose_verl_config`): ``data_root``, ``workspace_root``,
``env`` (``env_kwargs``), ``num_workers``, ``step_timeout_s``, ``phrasing``, ``max_turns``,
``max_new_tokens``, ``stop_strings``, ``algorithm``. A dataset row carries the task as JSON in
``extra_info.earthrl_task``.
"""

from __future__ import annotations

import json
import time
import uuid

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from earthrl.envs.core.pool import EnvPool
from earthrl.envs.sandbox.parent import SandboxSettings
from earthrl.rollout.agent_loop import EngineFailure, LoopConfig, run_episode
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.trajectory import Trajectory

AGENT_NAME = "earthrl"
"""The name rows give in ``agent_name`` (and ``actor_rollout_ref.rollout.agent.default_agent_loop``)."""


class ServerManagerEngine:
    """The engine side of :func:`~earthrl.rollout.agent_loop.run_episode` on verl's server manager.

    Args:
        server_manager: verl's ``LLMServerClient`` (or anything with its async ``generate``).
        request_id: sticky-session id of the episode (all its turns go to the same server, whose
            prefix cache then holds the episode's history).
        sampling_params: verl's per-request sampling dict (``temperature``, ``top_p``, …).
        max_new_tokens: cap of one turn (``max_tokens``).
        stop_strings: texts that end a turn (the action format's closing tag), kept in the output.
        stop_ids: ids that end a turn; a turn of ``max_new_tokens`` ids not ending in one is ``"length"``.
    """

    def __init__(self, server_manager, request_id: str, sampling_params: dict, max_new_tokens: int,
                 stop_strings: list[str], stop_ids: list[int]) -> None:
        self.server = server_manager
        self.request_id = request_id
        self.params = {**sampling_params, "logprobs": True, "max_tokens": int(max_new_tokens)}
        if stop_strings:
            self.params.update(stop=list(stop_strings), include_stop_str_in_output=True)
        self.max_new_tokens = int(max_new_tokens)
        self.stop_ids = set(stop_ids)
        self.generate_s = 0.0
        self.calls = 0

    def episode_started(self) -> None:
        """Nothing to count: verl's server manager batches across requests itself."""

    def episode_finished(self) -> None:
        """See :meth:`episode_started`."""

    async def generate(self, prompt_ids: list[int], key: tuple[int, int] = (0, 0), adapter: str | None = None) -> dict:
        """One turn: ``{"response_ids", "logprobs", "finish_reason"}`` as the EarthRL engines return it.
        ``key`` (episode index, turn) is the agent loop's seed key; verl's server seeds its requests itself.
        ``adapter`` (the turn's role adapter, the agent loops' keyword) is not sent: a verl run has one adapter
        (several are refused before the run starts, ``launch.job_inputs.check_agent``).

        Raises:
            EngineFailure: the server raised, aborted the request, or returned no logprobs (verl only
                returns them with ``actor_rollout_ref.rollout.calculate_log_probs=true``).
        """
        t0 = time.perf_counter()
        self.calls += 1
        try:
            out = await self.server.generate(self.request_id, prompt_ids=list(prompt_ids), sampling_params=self.params)
        except Exception as exc:  # noqa: BLE001 - the episode fails, the batch goes on
            raise EngineFailure(f"verl server generate failed: {type(exc).__name__}: {exc}") from exc
        finally:
            self.generate_s += time.perf_counter() - t0
        if getattr(out, "stop_reason", None) == "aborted":
            raise EngineFailure("verl server aborted the request")
        ids, lps = list(out.token_ids), out.log_probs
        if lps is None or len(lps) != len(ids):
            raise EngineFailure("the server returned no per-token logprobs: set "
                                "actor_rollout_ref.rollout.calculate_log_probs=true")
        cut = len(ids) >= self.max_new_tokens and (not ids or ids[-1] not in self.stop_ids)
        return {"response_ids": ids, "logprobs": [float(x) for x in lps], "finish_reason": "length" if cut else "stop"}


def turn_records(traj: Trajectory, uid: str, response_length: int) -> list[dict]:
    """Per-turn role / error / step / span / composite group / anchor of a trajectory (see module doc)."""
    seen: dict[str, int] = {}
    records, offset = [], len(traj.prompt_ids)
    for (start, end), turn in zip(traj.turn_spans(), traj.turns):
        step = seen.get(turn.role, 0)
        seen[turn.role] = step + 1
        s, e = start - offset, min(end - offset, response_length)
        records.append({"role": turn.role, "error": bool(turn.error), "error_kind": turn.error_kind, "step": step,
                        "span": [s, e] if e > s else None, "group": f"{uid}/{turn.role}/{step}",
                        "anchor": turn.anchor})
    return records


def to_agent_loop_output(traj: Trajectory, *, uid: str, response_length: int, task: dict | None = None,
                         algorithm: dict | None = None, generate_s: float = 0.0, env_s: float = 0.0) -> AgentLoopOutput:
    """A trajectory as verl's :class:`AgentLoopOutput` (see module doc for every field).

    Args:
        uid: verl's group id of the row (the task's prompt uid).
        response_length: ``actor_rollout_ref.rollout.response_length``; longer responses are cut.
        task, algorithm: copied into ``extra_fields`` for the reward function.
        generate_s: seconds spent in the server (``metrics.generate_sequences``).
        env_s: the episode's other seconds, environment steps mostly (``metrics.tool_calls``).
    """
    if len(traj.sequence_bounds()) > 1:
        raise ValueError("a trajectory with turns of their own context (Turn.context_ids) is more than one "
                         "sequence, which one verl row cannot hold; train this agent loop on the local backend "
                         "(cluster.backend=local)")
    n = len(traj.prompt_ids)
    ids, mask, lps = (x[n:][:response_length] for x in (traj.token_ids(), traj.response_mask(), traj.rollout_logprobs()))
    if traj.failure is not None:
        mask = [0] * len(mask)
    observations = sum(bool(t.observation_ids) for t in traj.turns)
    extra = {"earthrl_turns": turn_records(traj, uid, response_length), "earthrl_group": uid,
             "earthrl_failure": traj.failure, "earthrl_assistant_turns": traj.num_turns,
             "earthrl_trajectory": traj.to_dict(), "earthrl_task": task, "earthrl_algorithm": algorithm}
    return AgentLoopOutput(prompt_ids=list(traj.prompt_ids), response_ids=ids, response_mask=mask,
                           response_logprobs=lps, num_turns=1 + traj.num_turns + observations,
                           metrics=AgentLoopMetrics(generate_sequences=generate_s, tool_calls=env_s),
                           extra_fields=extra)


def _typed_env(env: dict) -> dict:
    """The env keyword arguments as ``env_kwargs`` made them: the sandbox settings, which crossed verl's
    config as a mapping, become :class:`~earthrl.envs.sandbox.parent.SandboxSettings` again."""
    options = dict(env.get("format_options") or {})
    if isinstance(options.get("sandbox"), dict):
        options["sandbox"] = SandboxSettings(**options["sandbox"])
        env = {**env, "format_options": options}
    return env


def _plain(value):
    """An OmegaConf node (or numpy scalar) as plain Python."""
    from omegaconf import OmegaConf  # lazy: only when the config is an OmegaConf node

    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    return value.item() if hasattr(value, "item") and not isinstance(value, (list, dict, str)) else value


@register(AGENT_NAME)
class EarthRLAgentLoop(AgentLoopBase):
    """EarthRL's multi-turn RS-tool episode as a verl agent loop (module doc).

    One :class:`~earthrl.envs.core.pool.EnvPool` per process (verl's ``AgentLoopWorker`` actor) is
    kept in :attr:`pools` with its system prompt, keyed by its settings; tests put an in-process pool there.
    """

    pools: dict[str, object] = {}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.earthrl = _plain(self.config.get("earthrl")) or {}
        if not self.earthrl:
            raise ValueError("the verl config has no `earthrl` section: start verl through `earthrl train backend=verl`")
        self.codec = ChatCodec(self.tokenizer)
        eos = self.tokenizer.eos_token_id
        self.stop_ids = [self.codec.eos_id] + ([eos] if eos is not None and eos != self.codec.eos_id else [])
        self.pool, self.system_prompt = self.pool_for(self.earthrl)

    @classmethod
    def pool_for(cls, settings: dict) -> tuple[object, str]:
        """``(EnvPool, system prompt)`` of the process for these settings (started on first use)."""
        key = json.dumps({k: settings.get(k) for k in ("data_root", "workspace_root", "env", "num_workers")},
                         sort_keys=True, default=str)
        if key not in cls.pools:
            timeout = settings.get("step_timeout_s")
            pool = EnvPool(int(settings["num_workers"]), str(settings["data_root"]),
                           str(settings["workspace_root"]), env_kwargs=_typed_env(settings.get("env") or {}),
                           step_timeout_s=float(timeout) if timeout is not None else None)
            cls.pools[key] = (pool, pool.system_prompt())
        return cls.pools[key]

    async def run(self, sampling_params: dict, **kwargs) -> AgentLoopOutput:
        """Play the row's task (``extra_info.earthrl_task``, JSON) and return its :class:`AgentLoopOutput`.

        Raises:
            ValueError: the row carries no EarthRL task (the dataset was not written by EarthRL).
        """
        info = _plain(kwargs.get("extra_info")) or {}
        if "earthrl_task" not in info:
            raise ValueError("dataset row has no extra_info.earthrl_task: write the data with "
                             "earthrl.launch.verl_config.write_verl_dataset")
        task = json.loads(info["earthrl_task"]) if isinstance(info["earthrl_task"], str) else info["earthrl_task"]
        uid = str(_plain(kwargs.get("uid", task["id"])))
        s = self.earthrl
        rollout = self.rollout_config
        engine = ServerManagerEngine(self.server_manager, uuid.uuid4().hex, dict(sampling_params),
                                     int(s["max_new_tokens"]), list(s["stop_strings"]), self.stop_ids)
        cfg = LoopConfig(max_turns=int(s["max_turns"]), phrasing=str(s["phrasing"]),
                         max_context_tokens=int(rollout.prompt_length) + int(rollout.response_length),
                         agent="react", options={}, adapters={})  # verl rows hold one sequence: the flat loop
        t0 = time.perf_counter()
        traj = await run_episode(task, uid, system=self.system_prompt, codec=self.codec, tokenizer=self.tokenizer,
                                 engine=engine, pool=self.pool, cfg=cfg)
        return to_agent_loop_output(traj, uid=uid, response_length=int(rollout.response_length), task=task,
                                    algorithm=s.get("algorithm"), generate_s=engine.generate_s,
                                    env_s=max(time.perf_counter() - t0 - engine.generate_s, 0.0))
