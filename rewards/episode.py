"""The episode record that evaluation metrics are computed from.

An :class:`EpisodeRecord` is the scorer's view of one attempt at one task: the tool calls the
agent made, per-turn bookkeeping (errors, token counts), its answer and whether that answer was
correct. It is built either from an EarthRL rollout (:meth:`EpisodeRecord.from_trajectory`)
or from another system's logged run, e.g. Earth-Agent's prediction files
(:meth:`EpisodeRecord.from_earthbench_prediction`), so both are scored by the same functions in
:mod:`earthrl.rewards.metrics`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from earthrl.rewards.outcome import answer_correct

#: Name of EarthRL's final-answer tool; it ends the episode and is not part of the workflow
#: compared with the reference (TaskSpec.reference excludes it too).
ANSWER_TOOL = "answer"

#: Call error kinds that SimCRAFT's Hal.Rate counts: a call to a tool that does not exist, or
#: a reference to a path the artifact registry never produced.
HALLUCINATION_KINDS = frozenset({"unknown_tool", "hallucinated_path"})


@dataclass
class EpisodeRecord:
    """One scored episode.

    Attributes:
        task_id: TaskSpec id, e.g. ``"earthbench/190"``.
        calls: tool calls in order, each ``{"name": str, "arguments": dict}`` plus, when known,
            ``"error": bool`` and ``"error_kind": str | None`` (the answer call is excluded);
            None when the source logged no calls for this episode (then the call-based
            metrics leave the record out, as Earth-Agent skips a missing prediction).
        turns: one dict per assistant turn: ``{"error": bool, "error_kind": str | None,
            "action_tokens": int, "observation_tokens": int, "context_tokens": int (the turn's own
            context, 0 when it continues the running one), "node": str, "subgoal": dict | None,
            "role": str, "tool_calls": list[dict]}``; empty when the source logged no turns (Earth-Bench
            prediction files).
        answer: the final answer (``{"value", "unit"}`` for EarthRL, the raw answer text for
            Earth-Bench files), or None when the agent never answered.
        correct: outcome check against the task's answer; None when not judged.
        skill: the task's skill id (one of the seven shared skill ids) or ``""``.
        mode: question phrasing the agent saw: ``"IF"``, ``"AP"`` or ``"OW"``.
        action_format: ``"json"``, ``"codeact"``, ``"hierarchical"``, or the source's name.
        faulted: a fault outside the agent ended the episode (``Trajectory.faulted``); such records
            are left out of every metric and counted under ``skipped["faulted"]``.
        agent_stats: the agent loop's counts for the episode (``Trajectory.agent_stats``: commits,
            cross-checks, replans, repairs, retries, …); {} for the flat loop and other sources.
        plan: the tools of the planner's first valid plan without ``answer`` (``Trajectory.plan``), ``[]`` when it
            wrote none; None for loops that do not plan and other sources.
        template: the task's template (``TaskSpec.template``); ``"thinkgeo"`` makes ThinkGeo's metrics follow
            ThinkGeo's rules with ``gt_answer`` (:mod:`earthrl.rewards.metrics.compute`).
        gt_answer: the task's ThinkGeo/GTA answer reference (``AnswerSpec.gt_answer``: whitelist dict or list of
            texts); None for other tasks and for ThinkGeo's image-generation tasks.
    """

    task_id: str
    calls: list[dict] | None = field(default_factory=list)
    turns: list[dict] = field(default_factory=list)
    answer: Any = None
    correct: bool | None = None
    skill: str = ""
    mode: str = "AP"
    action_format: str = "json"
    faulted: bool = False
    agent_stats: dict = field(default_factory=dict)
    plan: list[str] | None = None
    template: str = ""
    gt_answer: Any = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict of the record."""
        return asdict(self)

    @classmethod
    def from_trajectory(cls, traj, task: dict, *, mode: str, action_format: str) -> EpisodeRecord:
        """Record of an EarthRL rollout.

        Args:
            traj: :class:`earthrl.rollout.trajectory.Trajectory`.
            task: the TaskSpec as a dict (``task["answer"]`` is its AnswerSpec dict).
            mode: phrasing used (``"IF"``/``"AP"``/``"OW"``); action_format: action format used.

        Returns:
            The record: ``calls`` are every call the turns ran (``Turn.tool_calls``; a turn
            that logged none but parsed a ``tool_call`` contributes that call), without the
            ``answer`` call; action tokens of a turn = ``len(turn.response_ids)``, observation
            tokens = ``len(turn.observation_ids)``; ``correct`` is the outcome check
            (:func:`earthrl.rewards.outcome.answer_correct`) of ``traj.answer`` against
            ``task["answer"]``.
        """
        calls, turns = [], []
        for turn in traj.played:  # node-level candidate calls ran nothing: not part of the episode
            turn_calls = [dict(c) for c in turn.tool_calls]
            if not turn_calls and turn.tool_call is not None:
                turn_calls = [{**turn.tool_call, "error": bool(turn.error), "error_kind": turn.error_kind}]
            calls += [_call(c) for c in turn_calls if c.get("name") != ANSWER_TOOL]
            turns.append({"error": bool(turn.error), "error_kind": turn.error_kind,
                          "action_tokens": len(turn.response_ids),
                          "observation_tokens": len(turn.observation_ids),
                          "context_tokens": len(turn.context_ids), "node": turn.node, "subgoal": turn.subgoal,
                          "role": turn.role, "tool_calls": turn_calls})
        answer = traj.answer
        correct = answer_correct(answer, task["answer"]) if task.get("answer") is not None else None
        return cls(task_id=traj.task_id, calls=calls, turns=turns, answer=answer, correct=correct,
                   skill=task.get("skill", ""), mode=mode, action_format=action_format,
                   faulted=bool(traj.faulted), agent_stats=dict(traj.agent_stats),
                   plan=None if traj.plan is None else list(traj.plan), template=task.get("template") or "",
                   gt_answer=(task.get("answer") or {}).get("gt_answer"))

    @classmethod
    def from_earthbench_prediction(cls, task_id: str, tool_calls: list | None, answer_text: str | None,
                                   truth: str | dict | None, *, mode: str, skill: str = "",
                                   known_tools: set[str] | None = None,
                                   lenient: bool = True) -> EpisodeRecord:
        """Record of one Earth-Agent prediction (its ``extracted_tool_calls.json`` entry and
        ``results_summary_polished.json`` answer).

        Args:
            task_id: EarthRL task id, e.g. ``"earthbench/190"``.
            tool_calls: the entry's ``tool_calls``: ``[{"name", "input", "output"}]``, or None
                when the run logged no calls for the task (``calls`` is then None). Calls
                whose ``input`` is not a dict keep it as it is under ``"arguments"`` (it can
                never match a reference argument dict) and get ``error_kind="bad_arguments"``.
            answer_text: the run's ``final_answer`` text (e.g. ``"<Answer>C<Answer>"``) or None.
            truth: the reference choice letter, or the task's AnswerSpec dict (numeric answers
                are then judged by :func:`earthrl.rewards.outcome.answer_correct` on the text
                inside ``<Answer>…<Answer>``), or None: not judged (``correct`` is None).
            mode: ``"IF"`` or ``"AP"``.
            known_tools: names of the tools that exist; a call to another name gets
                ``error_kind="unknown_tool"`` (counted by Hal.Rate). None: no check.
            lenient: Earth-Agent's answer extraction (True) or EarthRL's strict one (False);
                see :func:`extract_choice`.

        Returns:
            The record; ``correct`` compares Earth-Agent's answer extraction
            (:func:`extract_choice`) with ``truth`` (:func:`judge_answer_text`); ``turns`` is
            empty (the files log none).
        """
        calls = None if tool_calls is None else []
        for c in tool_calls or []:
            c = c if isinstance(c, dict) else {"name": str(c)}
            args = c.get("input", c.get("arguments", {}))
            kind = None
            if not isinstance(args, dict):
                kind = "bad_arguments"
            if known_tools is not None and c.get("name") not in known_tools:
                kind = "unknown_tool"
            calls.append({"name": str(c.get("name", "")), "arguments": args,
                          "error": kind is not None, "error_kind": kind})
        correct = judge_answer_text(answer_text, truth, lenient=lenient)
        return cls(task_id=task_id, calls=calls, answer=answer_text, correct=correct, skill=skill,
                   mode=mode, action_format="earth-agent")


def judge_answer_text(text: str | None, truth: str | dict | None, *, lenient: bool = True) -> bool | None:
    """Is an answer text right? ``truth``: a choice letter, an AnswerSpec dict, or None (→ None).

    Choice answers use :func:`extract_choice` (``lenient`` as there); numeric and text
    answers use :func:`earthrl.rewards.outcome.answer_correct` on the text between
    ``<Answer>`` tags (the whole text when there are none).
    """
    if truth is None:
        return None
    if isinstance(truth, dict) and truth.get("kind", "numeric") != "choice":
        m = re.search(r"<Answer>(.*?)</?Answer>", str(text or ""), re.IGNORECASE | re.DOTALL)
        inner = m.group(1) if m else text
        return answer_correct({"value": inner, "unit": ""} if inner else None, truth)
    letter = truth["value"] if isinstance(truth, dict) else truth
    return extract_choice(text, lenient=lenient) == str(letter).strip()


def extract_choice(text: str | None, *, lenient: bool = True) -> str:
    """The choice letter in an answer text.

    Earth-Agent's rule (its end-to-end evaluation; ``lenient=True``), in order: empty →
    ``"FAIL"``; the text contains ``FAIL`` → ``"FAIL"``; ``<Answer>X<Answer>`` or
    ``<Answer>X</Answer>`` (X in A–F, case-insensitive) → X; otherwise the last standalone
    capital letter A–F anywhere in the text; otherwise ``"UNKNOWN"``.

    The last fallback reads letters out of anything: Kimik2_IF's answers to questions 214,
    216, 217 and 219 are HTML error pages ("Error: <!DOCTYPE html …") that it scores as a
    correct "C". EarthRL's strict rule (``lenient=False``) therefore stops after the tags and
    only also accepts a text that is a bare letter (``"C"``, ``"(C)"``, ``"C."``).
    """
    if not text:
        return "FAIL"
    text = str(text)
    if "FAIL" in text:
        return "FAIL"
    for pattern in (r"<Answer>([A-F])<Answer>", r"<Answer>([A-F])</Answer>"):
        m = re.search(pattern, text, re.IGNORECASE)
        if m:
            return m.group(1).upper()
    if not lenient:
        m = re.fullmatch(r"\s*\(?([A-Fa-f])[).]?\s*", text)
        return m.group(1).upper() if m else "UNKNOWN"
    letters = re.findall(r"\b([A-F])\b", text)
    return letters[-1].upper() if letters else "UNKNOWN"


def _call(c: dict) -> dict:
    out = {"name": c.get("name", ""), "arguments": c.get("arguments", {})}
    if "error" in c:
        out["error"] = bool(c["error"])
    if "error_kind" in c:
        out["error_kind"] = c["error_kind"]
    return out
