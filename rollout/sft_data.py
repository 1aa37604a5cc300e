"""SFT trajectories as text: the record every builder writes, and the oracle builder.

A record is one episode as the agent saw it (system prompt, first user message, then per turn the
assistant's action text, the env's real observation, E and the error kind) plus the final answer
and whether it is correct. Records are action-format specific (the actions are written in the
format the env was built with: ``json``, ``codeact`` or ``hierarchical``) and tokenizer independent:
:mod:`earthrl.rollout.sft_tokens` turns one into the ids and labels of a given model.

The oracle builder plays each task's reference workflow through a real
:class:`~earthrl.envs.core.env.RSEnv` — the scripted policy's actions
(:func:`~earthrl.envs.core.reference_actions.scripted_actions` for json,
:func:`~earthrl.envs.core.reference_actions.codeact_action` for codeact, the json calls routed
manager → specialist for hierarchical) — and keeps the observations the
env returns and the answer its ``answer`` tool records, judged by the caller's checker
(:func:`earthrl.rewards.outcome.answer_correct` from the launcher; rollout sits below rewards).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.reference_actions import codeact_action, scripted_actions
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.tools.registry import TOOLS

Judge = Callable[[dict | None, dict], bool]
"""``judge(answer, truth) -> bool``: the env's recorded ``{"value", "unit"}`` against the task's answer dict."""

SOURCES = ("oracle", "failure", "teacher", "teacher_loop", "planner", "expert_tuning", "simcraft")

CLARIFY_ROLE = "clarify"
"""Role of an assistant turn that asks the user (SimCRAFT's clarification agent): its ``observation`` is the user's
reply, rendered as a user message rather than a tool response (:mod:`earthrl.rollout.sft_tokens`), and no env ran it."""


@dataclass
class SFTTurn:
    """One assistant turn of a text trajectory.

    Attributes:
        action: the assistant's text (what the model would generate, without the end-of-turn token).
        observation: the env's observation for it (``StepResult.observation``, real, truncated as the env does).
        error: E(a, o) of the turn (``StepResult.error``).
        error_kind: ``StepResult.error_kind``.
        role: ``"agent"``, or ``"manager"``/``"specialist"`` in the hierarchical format, or :data:`CLARIFY_ROLE`.
        hint: the hint derived from the previous error that this turn's action carries (failure-aware
            recovery turns), else None.
    """

    action: str
    observation: str
    error: bool = False
    error_kind: str | None = None
    role: str = "agent"
    hint: str | None = None


@dataclass
class SFTTrajectory:
    """One episode for supervised training (see module doc). ``correct`` is the judge's verdict on
    ``answer``; ``source`` one of :data:`SOURCES`; ``user_mode`` SimCRAFT's ``"expert"`` or ``"novice"`` request
    (``simcraft`` records), else None."""

    task_id: str
    source: str
    action_format: str
    phrasing: str
    system: str
    user: str
    turns: list[SFTTurn] = field(default_factory=list)
    answer: dict | None = None
    correct: bool = False
    user_mode: str | None = None

    @property
    def num_error_turns(self) -> int:
        """Turns with E = 1."""
        return sum(t.error for t in self.turns)

    def to_dict(self) -> dict:
        """JSON-serialisable record (one JSONL line)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> SFTTrajectory:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: a missing or unknown field (names it).
        """
        data = dict(data)
        try:
            turns = [SFTTurn(**t) for t in data.pop("turns", [])]
            return cls(**data, turns=turns)
        except TypeError as exc:
            raise ValueError(f"not an SFT trajectory record: {exc}") from None


def write_jsonl(trajs: Iterable[SFTTrajectory], path: Path) -> int:
    """Write ``trajs`` one per line to ``path`` (its folder is created; written to a temporary
    file and renamed, so a killed build leaves no half file). Returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    n = 0
    with tmp.open("w") as f:
        for t in trajs:
            f.write(json.dumps(t.to_dict()) + "\n")
            n += 1
    tmp.replace(path)
    return n


def read_jsonl(path: Path) -> list[SFTTrajectory]:
    """Read records written by :func:`write_jsonl`.

    Raises:
        ValueError: a line that is not JSON or not a record (names the file and line).
    """
    out = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(SFTTrajectory.from_dict(json.loads(line)))
        except ValueError as exc:
            raise ValueError(f"{path}:{i}: {exc}") from None
    return out


# ----------------------------------------------------------------------- actions per format


def route_action(call: dict, subgoal: str | None = None) -> str:
    """A hierarchical manager turn routing ``call`` to its tool's HiRS family."""
    family = TOOLS[call["name"]].family
    goal = subgoal or f"run {call['name']} with {json.dumps(call['arguments'])}"
    return "<route>" + json.dumps({"family": family, "subgoal": goal}) + "</route>"


def reference_calls(task: dict) -> list[dict]:
    """The reference calls and the answer call of ``task`` (``{"name", "arguments"}`` each)."""
    answer = {"name": "answer", "arguments": {"value": task["answer"]["value"], "unit": task["answer"].get("unit", "")}}
    return [{"name": c["name"], "arguments": c["arguments"]} for c in task["reference"]] + [answer]


def call_text(call: dict) -> str:
    """One json-format action: the scripted policy's ``<tool_call>`` text of ``call``."""
    return scripted_actions({"reference": [call], "answer": {"value": 0}}, "json")[0]


def oracle_actions(task: dict, action_format: str) -> list[tuple[str, str]]:
    """``(role, action text)`` of the reference workflow and the answer in ``action_format``.

    Raises:
        ValueError: an action format without an oracle rendering (names the ones there are).
    """
    if action_format == "json":
        return [("agent", a) for a in scripted_actions(task, "json")]
    if action_format == "codeact":
        return [("agent", codeact_action(task))]
    if action_format == "hierarchical":
        calls = reference_calls(task)
        out = [t for c in calls[:-1] for t in (("manager", route_action(c)), ("specialist", call_text(c)))]
        return out + [("manager", call_text(calls[-1]))]
    raise ValueError(f"action_format={action_format!r}: SFT trajectories are built for json, codeact, hierarchical")


# ------------------------------------------------------------------------------- playing


def start(env: RSEnv, task: dict, phrasing: str, source: str) -> SFTTrajectory:
    """Reset ``env`` on ``task`` and return the empty record (system prompt and first user message)."""
    user = env.reset(TaskSpec.model_validate(task), phrasing)
    return SFTTrajectory(task_id=task["id"], source=source, action_format=env.format.name, phrasing=phrasing,
                         system=env.system_prompt(), user=user)


def step(env: RSEnv, traj: SFTTrajectory, action: str, role: str = "agent", hint: str | None = None):
    """Run ``action`` through ``env``, append the turn with the env's real observation; returns the
    :class:`~earthrl.envs.core.env.StepResult`."""
    res = env.step(action)
    traj.turns.append(SFTTurn(action=action, observation=res.observation, error=bool(res.error),
                              error_kind=res.error_kind, role=res.role or role, hint=hint))
    if res.done:
        traj.answer = res.answer
    return res


def finish(traj: SFTTrajectory, task: dict, judge: Judge) -> SFTTrajectory:
    """Judge the recorded answer against the task's (sets ``correct``); returns ``traj``."""
    traj.correct = bool(traj.answer is not None and judge(traj.answer, task["answer"]))
    return traj


def oracle_trajectory(env: RSEnv, task: dict, judge: Judge, phrasing: str = "IF") -> SFTTrajectory:
    """The reference workflow of ``task`` played through ``env`` (see module doc)."""
    traj = start(env, task, phrasing, "oracle")
    for role, action in oracle_actions(task, env.format.name):
        if step(env, traj, action, role).done:
            break
    return finish(traj, task, judge)


def build_oracle(env: RSEnv, tasks: list[dict], judge: Judge, phrasing: str = "IF",
                 keep_incorrect: bool = False) -> tuple[list[SFTTrajectory], dict]:
    """Oracle trajectories of ``tasks``; only those that end correct unless ``keep_incorrect``.

    Returns:
        (trajectories, counts ``{"tasks", "kept", "incorrect", "with_errors"}``).
    """
    out, counts = [], {"tasks": len(tasks), "kept": 0, "incorrect": 0, "with_errors": 0}
    for task in tasks:
        traj = oracle_trajectory(env, task, judge, phrasing)
        counts["with_errors"] += traj.num_error_turns > 0
        if not traj.correct:
            counts["incorrect"] += 1
            if not keep_incorrect:
                continue
        out.append(traj)
    counts["kept"] = len(out)
    return out, counts
