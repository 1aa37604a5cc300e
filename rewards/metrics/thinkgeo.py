"""ThinkGeo's metrics: Inst., Tool., Arg. (step-by-step) and Ans., Ans_I (end-to-end).

HiRS-Agent (§5, ThinkGeo results) reports ThinkGeo as Inst./Tool./Arg. and Ans./Ans_I, the
metrics of ThinkGeo's evaluator (mbzuai-oryx/ThinkGeo, ``ThinkGeoBenchEvaluator``; inherited
from GTA). A *step* is ``{"type": "tool" | "answer", "name", "arguments", "content",
"error": bool}``; predicted and reference steps are compared position by position.

- Inst. (instruction alignment) = Σ positions where the predicted step type equals the
  reference type and the predicted step raised no error / Σ (reference tool steps + tasks
  with a reference answer).
- Tool. = Σ positions where both steps are tool calls with the same name / Σ reference tool steps.
- Arg. = Σ positions where name *and* argument dict match / Σ reference tool steps.
- Ans. = mean answer score over tasks that have a reference answer. A whitelist answer
  ``{"whitelist": [[aliases...], ...], "blacklist": [[...]] | None}`` scores 1 when every
  whitelist group has an alias in the prediction (case-insensitive, whole words) and no
  blacklist alias does; a list of free-text references scores the best similarity.
- Ans_I = Ans. with the image-generation tasks (no textual answer) included: such a task
  scores the product over its reference image tools (``DrawBox``, ``AddText``, ``Plot``) of the
  argument similarity with the agent's error-free call of that tool (0 if it never called it),
  averaged over all tasks.

Deviations (documented, configurable): ThinkGeo scores open answers and image-tool
arguments with sentence-embedding cosine similarity (all-mpnet-base-v2); EarthRL's default
``similarity`` is exact equality of the whitespace/case-normalised strings (1.0 or 0.0), and a
caller may pass an embedding similarity. ThinkGeo's step-by-step protocol predicts each step
given the reference prefix, so both sequences have the same length; for free-running EarthRL
episodes the denominators count *all* reference steps (a step the agent never took is a miss),
not only the zipped ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from earthrl.rewards.answer_rules import answer_score, exact_similarity

__all__ = ["IMAGE_TOOLS", "answer_score", "episode_scores", "exact_similarity", "image_answer_score",
           "score_thinkgeo", "step_counts", "steps_from_calls"]

#: ThinkGeo's image-generating tools (their outputs are judged by their arguments).
IMAGE_TOOLS = ("DrawBox", "AddText", "Plot")


def step_counts(pred: Sequence[dict], ref: Sequence[dict]) -> dict[str, int]:
    """Counts of one episode for Inst., Tool., Arg.

    Returns:
        ``{"inst_align", "tool_acc", "arg_acc", "ref_tool_steps", "ref_answer_steps"}`` where
        the matches are over zipped positions and the ``ref_*`` totals over all reference steps.
    """
    out = {"inst_align": 0, "tool_acc": 0, "arg_acc": 0,
           "ref_tool_steps": sum(s.get("type") == "tool" for s in ref),
           "ref_answer_steps": sum(s.get("type") == "answer" for s in ref)}
    for p, r in zip(pred, ref):
        if p.get("type") == r.get("type") and not p.get("error"):
            out["inst_align"] += 1
        if p.get("type") == r.get("type") == "tool" and p.get("name") == r.get("name"):
            out["tool_acc"] += 1
            if p.get("arguments") == r.get("arguments"):
                out["arg_acc"] += 1
    return out


def image_answer_score(pred: Sequence[dict], ref: Sequence[dict],
                       similarity: Callable[[str, str], float] = exact_similarity) -> float:
    """Ans_I score of an image-generation task (no textual answer); see the module docstring."""
    made = {s.get("name"): s.get("arguments") for s in pred
            if s.get("type") == "tool" and not s.get("error") and s.get("name") in IMAGE_TOOLS}
    score = 1.0
    for r in ref:
        if r.get("type") == "tool" and r.get("name") in IMAGE_TOOLS:
            if r["name"] not in made:
                return 0.0
            score *= float(similarity(json.dumps(r.get("arguments"), sort_keys=True),
                                      json.dumps(made[r["name"]], sort_keys=True)))
    return score


def steps_from_calls(calls: Sequence[dict], answer=None) -> list[dict]:
    """Steps of an episode: one ``"tool"`` step per call, then an ``"answer"`` step if ``answer`` is not None."""
    steps = [{"type": "tool", "name": c.get("name"), "arguments": c.get("arguments"),
              "error": bool(c.get("error"))} for c in calls]
    if answer is not None:
        steps.append({"type": "answer", "content": answer, "error": False})
    return steps


def episode_scores(pred: Sequence[dict], ref: Sequence[dict], gt,
                   similarity: Callable[[str, str], float] = exact_similarity) -> dict[str, tuple[float, int]]:
    """One episode's share of ThinkGeo's five numbers, as ``(numerator, denominator)`` pairs.

    Summing each pair over episodes and dividing gives :func:`score_thinkgeo` (the report's
    bootstrap resamples these pairs over episodes).

    Args:
        pred, ref: predicted and reference steps (:func:`steps_from_calls`); ``ref`` ends with an
            ``"answer"`` step when the task has a textual answer.
        gt: the task's ``gt_answer`` as in ThinkGeoBench.json; None (or empty) for an
            image-generation task. The predicted answer is the ``content`` of the last predicted
            step when it is an ``"answer"`` step.

    Returns:
        ``{"inst", "tool", "arg", "ans", "ans_i"}``: Inst. counts aligned steps over the reference
        tool steps + 1 when the task has an answer; Tool./Arg. over the reference tool steps;
        Ans. ``(score, 1)``, or ``(0.0, 0)`` on an image-generation task (not in Ans.); Ans_I
        ``(score, 1)`` with the image task's score from :func:`image_answer_score`.
    """
    c = step_counts(pred, ref)
    out = {"inst": (c["inst_align"], c["ref_tool_steps"] + bool(gt)), "tool": (c["tool_acc"], c["ref_tool_steps"]),
           "arg": (c["arg_acc"], c["ref_tool_steps"])}
    if not gt:
        return {**out, "ans": (0.0, 0), "ans_i": (image_answer_score(pred, ref, similarity), 1)}
    last = pred[-1] if pred else {}
    score = answer_score(last.get("content") if last.get("type") == "answer" else None, gt, similarity)
    return {**out, "ans": (score, 1), "ans_i": (score, 1)}


def score_thinkgeo(episodes, similarity: Callable[[str, str], float] = exact_similarity) -> dict[str, float]:
    """ThinkGeo's five numbers over episodes, as fractions (ThinkGeo prints them ×100).

    Args:
        episodes: iterable of ``(pred_steps, ref_steps, gt_answer)``; ``gt_answer`` as in
            ThinkGeoBench.json (None for image-generation tasks); see :func:`episode_scores`.

    Returns:
        ``{"inst", "tool", "arg", "ans", "ans_i"}``; NaN where a denominator is 0.
    """
    num = dict.fromkeys(("inst", "tool", "arg", "ans", "ans_i"), 0.0)
    den = dict.fromkeys(num, 0)
    for pred, ref, gt in episodes:
        for key, (n, d) in episode_scores(pred, ref, gt, similarity).items():
            num[key], den[key] = num[key] + n, den[key] + d
    return {k: num[k] / den[k] if den[k] else float("nan") for k in num}
