"""Trajectories: what one agent episode produced, token by token and turn by turn.

Token-in/token-out: the ids of a trajectory are
``prompt_ids + response_ids[0] + observation_ids[0] + response_ids[1] + …`` exactly as
the engine saw and produced them; nothing is re-tokenised from text.

Agent loops whose roles see contexts of their own (a planner and an executor, a manager and its
specialists) give such a turn the whole prompt it was generated from (:attr:`Turn.context_ids`); the
ids are then ``… + context_ids[k] + response_ids[k] + observation_ids[k] + …``, and
:meth:`Trajectory.sequence_bounds` cuts them into the sequences the learner scores, one per context,
so that every response token is conditioned on exactly what the engine conditioned it on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Turn:
    """One assistant turn and the environment's reply.

    Attributes:
        response_ids: token ids the engine generated (end-of-turn token included if emitted).
        response_logprobs: log π_rollout of each response token (nats), same length.
        observation_ids: the chat template's delta that carries the env observation
            (and the next generation prompt); empty on the last turn.
        error: E(a_t, o_t) = 1 when the action raised (RS-Claw-Evolution §III-A).
        error_kind: "parse_error", "unknown_tool", "schema_error", … or None.
        tool_call: {"name", "arguments"} of the parsed action, or None.
        finish_reason: "stop" (end-of-turn token) or "length" (max_new_tokens hit).
        role: ``"agent"`` (json/codeact formats), or ``"manager"``/``"specialist"`` in the
            hierarchical format (HiRS-Agent VG-HRL: one backbone, role prompts).
        subgoal: the manager's routing ``{"family": "SPA"|"PRA"|"SAA", "subgoal": str}`` or None.
        tool_calls: every tool call the turn ran, in order, each
            ``{"name", "arguments", "error": bool, "error_kind"}`` (a codeact turn may run several).
        verdict: step verifier's ``"pass"``/``"uncertain"``/``"fail"`` (HiRS step verification), or None.
        verdict_reasons: why the verifier decided so.
        anchor: the environment's anchor state when the turn started (16 hex digits: the task and the
            set of its artifacts by lineage, :mod:`earthrl.envs.core.anchor`); turns of different
            episodes with equal anchors form GiGPO's step groups. "" when unknown (records written
            before anchors existed).
        context_ids: the whole prompt the turn was generated from, when the turn starts a fresh context
            of its role instead of continuing the running sequence (then the previous turn's
            ``observation_ids`` are empty); [] for a turn that continues it (every turn of the flat loop).
        node: the workflow node or step the turn works on (``"plan"``, ``"n2"``, …); "" when the agent
            loop has none.
        adapter: the LoRA adapter the turn was generated with (``agent.adapters`` of its role); "" when
            the policy has one unnamed adapter.
        candidate: 0 for a turn the episode played; k ≥ 1 for the k-th further call sampled from the same
            node state as a played turn (Earth-Agent-Pro's node-level GRPO, ``agent.options.node_candidates``):
            generated, checked and scored, never run. Such turns follow every played turn in
            :attr:`Trajectory.turns`.
        node_state: the key shared by the G calls sampled from one node state, the played one included
            (``"<node>@<turn index of the played call>"``); "" when the loop sampled one call there.
    """

    response_ids: list[int]
    response_logprobs: list[float]
    observation_ids: list[int] = field(default_factory=list)
    response_text: str = ""
    observation: str = ""
    error: bool = False
    error_kind: str | None = None
    tool_call: dict | None = None
    finish_reason: str = "stop"
    role: str = "agent"
    subgoal: dict | None = None
    tool_calls: list[dict] = field(default_factory=list)
    verdict: str | None = None
    verdict_reasons: list[str] = field(default_factory=list)
    anchor: str = ""
    context_ids: list[int] = field(default_factory=list)
    node: str = ""
    adapter: str = ""
    candidate: int = 0
    node_state: str = ""


# fields that records written before the scoring stage existed carry; read back, they are dropped
LEGACY_SCORE_FIELDS = ("reward", "correct", "turn_rewards")
# fields of older records under their former names; read back, they take the current one
RENAMED_FIELDS = {"env_failure": "faulted"}

# faults that are not the agent's doing (Trajectory.failure), in the order the step line lists them
FAILURE_KINDS = ("env_failure", "env_timeout", "engine_failure", "internal_error")


@dataclass
class Trajectory:
    """One episode of one task: the rollout unit that GRPO groups.

    Attributes:
        task_id: id of the TaskSpec.
        group: key of the GRPO group (the G samples of one task in one step).
        prompt_ids: system + first user message + generation prompt, as token ids.
        turns: the assistant turns in order.
        answer: {"value", "unit"} from the final ``answer`` action, or None.
        faulted: a fault outside the agent ended the episode (an env actor's death, a step timeout, an
            engine fault or an internal error), so the trajectory is excluded from the loss, from the
            rewards' groups and from agent error counts. One flag for every kind of fault; :attr:`failure`
            says which.
        failure: the kind of fault, set with :meth:`mark_failed`: ``"env_failure"`` (an env
            actor died or lost the episode), ``"env_timeout"`` (a step did not return within
            ``env.step_timeout_s``; its worker was replaced), ``"engine_failure"`` (the rollout
            engine died or raised mid-generation) or ``"internal_error"`` (an exception that is a
            bug of EarthRL; :attr:`internal_error` holds its traceback); None when no fault hit.
        internal_error: traceback text of an ``internal_error`` (logged to
            ``internal_errors.jsonl`` of the run folder), else None.
        failure_detail: the message of the fault that ended the episode (an engine failure's reason, e.g.
            ``"generation failed: RuntimeError: vLLM engine: …"``; an env failure's or timeout's), else None.
        failure_turn: index of the turn the fault hit (0-based; ``num_turns`` when it hit
            between turns or before the first), or None.
        episode_id: the EnvPool episode id (workspace folder name), "" when not run through a pool.
        record: the environment's episode record (:meth:`earthrl.envs.core.env.RSEnv.episode_record`):
            ``{"artifacts": [{"name", "tool", "parents"}], "skills_opened": [...],
            "docs_opened": [...]}`` — what MEFR's progress terms are computed from.
        agent_stats: counts the agent loop reports for the episode (e.g. a planner–executor's
            ``{"commits", "retries", "repairs", ...}``); {} for the flat loop.
        plan: the tools of the first valid plan a planning loop wrote, in order, ``answer`` left out (a
            planner–executor's skeleton); ``[]`` when its planner wrote no valid plan; None for a loop that does
            not plan.
    """

    task_id: str
    group: str
    prompt_ids: list[int]
    turns: list[Turn] = field(default_factory=list)
    answer: dict | None = None
    faulted: bool = False
    failure: str | None = None
    internal_error: str | None = None
    failure_detail: str | None = None
    failure_turn: int | None = None
    episode_id: str = ""
    record: dict = field(default_factory=dict)
    agent_stats: dict = field(default_factory=dict)
    plan: list[str] | None = None

    def mark_failed(self, kind: str, traceback_text: str | None = None, turn: int | None = None,
                    detail: str | None = None) -> None:
        """Mark the trajectory as hit by a fault of ``kind`` (one of :data:`FAILURE_KINDS`): it is
        then excluded from the loss like every faulted trajectory (:attr:`faulted` is set). ``detail``:
        the fault's message (:attr:`failure_detail`).

        Raises:
            ValueError: an unknown kind (names the known ones).
        """
        if kind not in FAILURE_KINDS:
            raise ValueError(f"failure kind {kind!r}: use one of {', '.join(FAILURE_KINDS)}")
        if self.failure is None:  # the first fault is the cause; later ones follow from it
            self.failure, self.internal_error, self.failure_turn = kind, traceback_text, turn
            self.failure_detail = detail
        self.faulted = True

    def turn_spans(self) -> list[tuple[int, int]]:
        """``[start, end)`` of each turn's response tokens in :meth:`token_ids` order."""
        spans, pos = [], len(self.prompt_ids)
        for t in self.turns:
            pos += len(t.context_ids)
            spans.append((pos, pos + len(t.response_ids)))
            pos += len(t.response_ids) + len(t.observation_ids)
        return spans

    def sequence_bounds(self) -> list[tuple[int, int]]:
        """``[start, end)`` over :meth:`token_ids` of each sequence the learner scores: one from the start,
        then a new one at every turn with :attr:`Turn.context_ids` (module doc). One span for the flat loop;
        empty sequences (no prompt before a first turn that brings its own context) are left out."""
        bounds, start, pos = [], 0, len(self.prompt_ids)
        for t in self.turns:
            if t.context_ids:
                bounds.append((start, pos))
                start = pos
            pos += len(t.context_ids) + len(t.response_ids) + len(t.observation_ids)
        bounds.append((start, pos))
        return [(a, b) for a, b in bounds if b > a]

    def sequence_adapters(self) -> list[str]:
        """The LoRA adapter of each sequence of :meth:`sequence_bounds` (aligned with it): the
        :attr:`Turn.adapter` its turns were generated with, "" for a sequence without turns or whose turns name
        none. The learner scores each sequence under its adapter (one adapter per role on one frozen base).

        Raises:
            ValueError: a sequence whose turns name different adapters (roles sharing one context cannot learn
                on separate adapters; ``agent.adapters`` of such a loop must give its roles one name).
        """
        spans, names, start, pos = [], [set()], 0, len(self.prompt_ids)
        for t in self.turns:
            if t.context_ids:
                spans.append((start, pos))
                start = pos
                names.append(set())
            names[-1].add(t.adapter)
            pos += len(t.context_ids) + len(t.response_ids) + len(t.observation_ids)
        spans.append((start, pos))
        out = []
        for (a, b), used in zip(spans, names):
            if b <= a:
                continue
            if len(used) > 1:
                raise ValueError(f"episode {self.episode_id}: one sequence holds turns of adapters {sorted(used)}; "
                                 "roles that share a context must share an adapter (agent.adapters)")
            out.append(next(iter(used), ""))
        return out

    def _per_token(self, prompt, context, response, observation) -> list:
        out = list(prompt)
        for t in self.turns:
            out += context(t) + response(t) + observation(t)
        return out

    def token_ids(self) -> list[int]:
        """All ids of the episode in order: prompt, then per turn its context (if any), response and
        observation."""
        return self._per_token(self.prompt_ids, lambda t: t.context_ids, lambda t: t.response_ids,
                               lambda t: t.observation_ids)

    def response_mask(self) -> list[int]:
        """1 on model-generated tokens, 0 on prompt, context and observation tokens; same length as token_ids()."""
        return self._per_token([0] * len(self.prompt_ids), lambda t: [0] * len(t.context_ids),
                               lambda t: [1] * len(t.response_ids), lambda t: [0] * len(t.observation_ids))

    def rollout_logprobs(self) -> list[float]:
        """Engine logprobs aligned with token_ids(); 0.0 where the mask is 0."""
        return self._per_token([0.0] * len(self.prompt_ids), lambda t: [0.0] * len(t.context_ids),
                               lambda t: list(t.response_logprobs), lambda t: [0.0] * len(t.observation_ids))

    @property
    def played(self) -> list[Turn]:
        """The turns the episode played, in order: :attr:`turns` without the node-level candidate calls
        (:attr:`Turn.candidate` ≥ 1), which come after them."""
        return [t for t in self.turns if not t.candidate]

    @property
    def num_turns(self) -> int:
        """Assistant turns the episode played (node-level candidate calls not counted)."""
        return len(self.played)

    @property
    def num_error_turns(self) -> int:
        """Played turns with E = 1."""
        return sum(t.error for t in self.played)

    @property
    def generated_tokens(self) -> int:
        """Tokens the model generated over all turns."""
        return sum(len(t.response_ids) for t in self.turns)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable record (for JSONL dumps of rollouts)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        """Inverse of :meth:`to_dict` (reads recorded trajectories back).

        Raises:
            ValueError: a field that a Trajectory or Turn does not have, or a missing required one.
        """
        data = dict(data)
        for legacy in LEGACY_SCORE_FIELDS:  # scores live in rewards.scoring.Scores now, never on the trajectory
            data.pop(legacy, None)
        for old, new in RENAMED_FIELDS.items():
            if old in data:
                data.setdefault(new, data.pop(old))
        try:
            turns = [Turn(**t) for t in data.pop("turns", [])]
            return cls(**data, turns=turns)
        except TypeError as exc:
            raise ValueError(f"not a trajectory record: {exc}") from None
