"""Outcome reward: does the agent's final answer match the task's reference answer?"""

from __future__ import annotations

import math
import re

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
            or ``{"kind": "text", "value"}`` (case- and space-insensitive equality).

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
        return str(value).strip().strip("()").upper()[:1] == str(reference["value"]).strip().upper()
    return " ".join(str(value).lower().split()) == " ".join(str(reference["value"]).lower().split())
