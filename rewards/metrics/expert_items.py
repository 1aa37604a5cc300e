"""Scoring of Expert-tuning's held-out Workflow MCQ and Workflow Order answers (HiRS-Agent §Training,
RS-EXPERT-BENCHMARK's in-domain part).

An MCQ answer is right when the first option letter it states (:func:`parse_letter`) is the key; an
ordering answer is right when the option letters it states, in the order stated
(:func:`parse_order`), are exactly the key's (exact match: one misplaced step makes it wrong).
Accuracy is the share of right answers with a percentile-bootstrap 95% interval over items
(:func:`earthrl.rewards.metrics.bootstrap.bootstrap_ci`, 1000 resamples).
"""

from __future__ import annotations

import re

import numpy as np

from earthrl.rewards.metrics.bootstrap import bootstrap_ci

LETTERS = "ABCDEFGHIJ"
_LEAD = re.compile(r"^\W*(?:the\s+)?(?:answer|option)?\s*(?:is)?\s*[:\-]?\s*\(?([A-J])\b\)?")
_STANDALONE = re.compile(r"(?<![A-Za-z])([A-J])(?![A-Za-z])")


def parse_letter(text: str, n_options: int) -> str | None:
    """The option letter ``text`` answers with: a letter at its start (``"B"``, ``"(B)"``, ``"B) ndvi"``,
    ``"Answer: B"``), else its first standalone letter among the first ``n_options``; None when there is none."""
    allowed = LETTERS[:n_options]
    m = _LEAD.match(text.strip())
    if m and m.group(1) in allowed:
        return m.group(1)
    for cand in _STANDALONE.findall(text):
        if cand in allowed:
            return cand
    return None


def parse_order(text: str, n_options: int) -> list[str]:
    """The standalone option letters (among the first ``n_options``) of ``text`` in the order stated, each
    once (``"D, C, A, B"`` → ``["D", "C", "A", "B"]``)."""
    allowed = LETTERS[:n_options]
    return list(dict.fromkeys(c for c in _STANDALONE.findall(text) if c in allowed))


def score_answer(kind: str, text: str, key: str, n_options: int) -> bool:
    """Whether ``text`` answers an item of ``kind`` (``"mcq"`` | ``"order"``) with key ``key`` (``"B"``;
    ``"D, C, A, B"``) right.

    Raises:
        ValueError: another kind.
    """
    if kind == "mcq":
        return parse_letter(text, n_options) == key.strip()
    if kind == "order":
        return parse_order(text, n_options) == [k.strip() for k in key.split(",")]
    raise ValueError(f"item kind {kind!r}: use mcq or order")


def accuracy(correct: list[bool], seed: int = 0) -> dict:
    """``{"n", "accuracy", "ci95": [low, high]}`` of per-item verdicts (NaN accuracy for no items)."""
    values = np.asarray(correct, dtype=float)
    low, high = bootstrap_ci(values, seed=seed)
    return {"n": len(values), "accuracy": float(values.mean()) if len(values) else float("nan"),
            "ci95": [low, high]}
