"""ThinkGeo's answer rule (GTA's, which ThinkGeo inherits): a final answer text against a ``gt_answer``.

Used by the outcome check (:func:`earthrl.rewards.outcome.answer_correct`, for a text answer with a
``gt_answer``) and by ThinkGeo's Ans./Ans_I (:mod:`earthrl.rewards.metrics.thinkgeo`). The rule is
``ThinkGeoBenchEvaluator.iscorrect`` / ``simscore`` of ThinkGeo's evaluator (mbzuai-oryx/ThinkGeo,
``opencompass/datasets/ThinkGeo_bench.py``); its open answers are scored with sentence-embedding cosine
similarity there, with exact equality of the normalised strings here by default (a caller may pass
another ``similarity``).
"""

from __future__ import annotations

import re
from collections.abc import Callable


def exact_similarity(pred: str, ref: str) -> float:
    """1.0 when the two strings are equal after lower-casing and collapsing whitespace, else 0.0."""
    norm = lambda s: " ".join(str(s).lower().split())  # noqa: E731
    return float(norm(pred) == norm(ref))


def answer_score(pred: str | None, gt_answer, similarity: Callable[[str, str], float] = exact_similarity) -> float:
    """Score of a final answer text against a ThinkGeo ``gt_answer`` (whitelist dict or list of texts).

    Returns 0.0 for a missing answer; see the module docstring for the rule.
    """
    if not pred:
        return 0.0
    text = str(pred).lower()
    if isinstance(gt_answer, dict):
        def hit(group) -> bool:
            aliases = [group] if isinstance(group, str) else list(group)
            pattern = r"\b(?:" + "|".join(re.escape(str(a).lower()) for a in aliases) + r")\b"
            return re.search(pattern, text, re.IGNORECASE) is not None

        ok = all(hit(g) for g in gt_answer.get("whitelist") or [])
        black = gt_answer.get("blacklist") or []
        return float(ok and not any(hit(g) for g in black))
    if isinstance(gt_answer, list):
        return max((float(similarity(str(pred), str(r))) for r in gt_answer), default=0.0)
    return 0.0
