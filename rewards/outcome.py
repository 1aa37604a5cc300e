"""Outcome reward: does the agent's final answer match the task's reference answer?"""

from __future__ import annotations

import math
import re

from earthrl.envs.tools.registry import TOOLS
from earthrl.rewards.answer_rules import answer_score
from earthrl.rewards.registry import REWARDS

_UNIT_ALIASES = {"%": "percent", "percent": "percent", "pct": "percent", "km2": "km²", "km^2": "km²",
                 "km²": "km²", "m2": "m²", "m^2": "m²", "m²": "m²", "k": "K", "kelvin": "K", "": ""}


def _unit(u: str | None) -> str:
    u = (u or "").strip()
    return _UNIT_ALIASES.get(u.lower(), _UNIT_ALIASES.get(u, u))


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    m = re.search(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", str(value))
    return float(m.group()) if m else None


def answer_correct(answer: dict | None, reference: dict) -> bool:
    """Check a final answer against a TaskSpec answer.

    Args:
        answer: ``{"value", "unit"}`` from the ``answer`` action, or None (no answer).
        reference: the task's answer: ``{"kind": "numeric", "value", "unit", "tolerance"}``
            (absolute tolerance in the answer's unit), or ``{"kind": "choice", "value": "B"}``,
            or ``{"kind": "text", "value"}`` (case- and space-insensitive equality; with a ``gt_answer``,
            ThinkGeo's rule, :func:`~earthrl.rewards.metrics.thinkgeo.answer_score` = 1). A choice is read
            as Earth-Agent's evaluation writes it, ``<Answer>B<Answer>`` (or ``</Answer>``), else as the
            first letter of the value (``"B"``, ``"(B)"``, ``"B. 10"``).

    Returns:
        True when the value matches. For numeric answers the unit must match when both
        sides give one (aliases: % = percent, km2 = km²); a missing unit is accepted.
    """
    if not answer:
        return False
    kind = reference.get("kind", "numeric")
    value = answer.get("value")
    if kind == "numeric":
        got = _number(value)
        if got is None or not math.isfinite(got):
            return False
        ref_unit, got_unit = _unit(reference.get("unit")), _unit(answer.get("unit"))
        if ref_unit and got_unit and ref_unit != got_unit:
            return False
        return abs(got - float(reference["value"])) <= float(reference.get("tolerance", 0.0)) + 1e-12
    if kind == "choice":
        tagged = re.search(r"<Answer>\s*\(?([A-Za-z])\)?\s*</?Answer>", str(value), re.IGNORECASE)
        letter = tagged.group(1).upper() if tagged else str(value).strip().strip("()").upper()[:1]
        return letter == str(reference["value"]).strip().upper()
    if reference.get("gt_answer") is not None:  # ThinkGeo / GTA: whitelist and blacklist, or reference texts
        return answer_score(str(value) if value is not None else None, reference["gt_answer"]) >= 1.0
    return " ".join(str(value).lower().split()) == " ".join(str(reference["value"]).lower().split())


@REWARDS.register("outcome")
def outcome_reward(trajectory, task: dict, *, correct: float = 1.0, incorrect: float = 0.0,
                   no_answer: float = 0.0, error_turn: float = 0.0) -> float:
    """Outcome reward of all seeds' GRPO baselines: ``correct`` if the answer matches
    (:func:`answer_correct`), else ``incorrect`` (``no_answer`` when the agent never answered),
    plus ``error_turn`` per turn with E = 1 (0 by default; RS-Claw-Evolution's μ is the MEFR
    variant of this term). Pure: sets nothing on the trajectory.

    Args:
        trajectory: :class:`earthrl.rollout.trajectory.Trajectory`.
        task: the TaskSpec as a dict.
    """
    if answer_correct(trajectory.answer, task["answer"]):
        base = correct
    else:
        base = incorrect if trajectory.answer else no_answer
    return base + error_turn * trajectory.num_error_turns


# ---------------------------------------------------------------- reference workflow helpers
def reference_steps(task: dict, *, drop: tuple[str, ...] = ("answer",)) -> list[dict]:
    """The task's reference tool calls ``[{"name", "arguments"}]`` in order, without ``drop`` tools.

    Raises:
        KeyError: the task has no ``reference`` field (a TaskSpec dict always has one).
    """
    steps = []
    for call in task["reference"]:
        call = call if isinstance(call, dict) else call.model_dump()
        if call["name"] not in drop:
            steps.append({"name": call["name"], "arguments": dict(call.get("arguments") or {})})
    return steps


def tool_family(name: str | None) -> str | None:
    """HiRS family ("SPA"|"PRA"|"SAA") of an EarthRL tool, or None for a tool that does not exist."""
    tool = TOOLS.get(name) if name else None
    return tool.family if tool is not None else None


_FULL_NUMBER = re.compile(r"\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*")


def _is_number(x) -> bool:
    return (isinstance(x, (int, float)) and not isinstance(x, bool)) or (
        isinstance(x, str) and _FULL_NUMBER.fullmatch(x) is not None)


def value_match(got, ref, *, rel_tol: float = 1e-2, abs_tol: float = 1e-6) -> bool:
    """One argument value against its reference value.

    Numbers (or strings that parse as numbers on both sides) match within
    ``abs_tol + rel_tol·|ref|``; other strings match case- and space-insensitively; lists match
    element-wise with equal length; dicts match when every key matches; booleans match only
    booleans.
    """
    if isinstance(ref, dict):
        return isinstance(got, dict) and set(got) == set(ref) and all(
            value_match(got[k], ref[k], rel_tol=rel_tol, abs_tol=abs_tol) for k in ref)
    if isinstance(ref, (list, tuple)):
        return isinstance(got, (list, tuple)) and len(got) == len(ref) and all(
            value_match(g, r, rel_tol=rel_tol, abs_tol=abs_tol) for g, r in zip(got, ref))
    if isinstance(ref, bool) or isinstance(got, bool):
        return isinstance(ref, bool) and isinstance(got, bool) and got == ref
    if _is_number(got) and _is_number(ref):
        a, b = float(got), float(ref)
        return abs(a - b) <= abs_tol + rel_tol * abs(b)
    return " ".join(str(got).lower().split()) == " ".join(str(ref).lower().split())


def argument_match(arguments: dict | None, reference: dict, *, rel_tol: float = 1e-2,
                   abs_tol: float = 1e-6) -> tuple[float, float]:
    """How well a call's arguments match a reference step's arguments.

    Args:
        arguments: the model's ``arguments`` dict (None counts as empty).
        reference: the reference step's ``arguments``.
        rel_tol, abs_tol: numeric tolerance, see :func:`value_match`.

    Returns:
        ``(key_share, value_share)`` ∈ [0, 1]²: the share of reference keys present in
        ``arguments``, and the share whose value matches (HiRS-Agent's R̂_args is ``value_share``).
        A reference without arguments gives ``(1.0, 1.0)``.
    """
    if not reference:
        return 1.0, 1.0
    arguments = arguments if isinstance(arguments, dict) else {}
    present = [k for k in reference if k in arguments]
    hits = sum(value_match(arguments[k], reference[k], rel_tol=rel_tol, abs_tol=abs_tol) for k in present)
    return len(present) / len(reference), hits / len(reference)
