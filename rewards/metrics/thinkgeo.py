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

__all__ = ["IMAGE_TOOLS", "answer_score", "exact_similarity", "image_answer_score", "score_thinkgeo",
           "step_counts", "steps_from_calls"]

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


def score_thinkgeo(episodes, similarity: Callable[[str, str], float] = exact_similarity) -> dict[str, float]:
    """ThinkGeo's five numbers over episodes, as fractions (ThinkGeo prints them ×100).

    Args:
        episodes: iterable of ``(pred_steps, ref_steps, gt_answer)``; ``gt_answer`` as in
            ThinkGeoBench.json (None for image-generation tasks). The predicted answer is the
            ``content`` of the last predicted step when it is an ``"answer"`` step.

    Returns:
        ``{"inst", "tool", "arg", "ans", "ans_i"}``; NaN where a denominator is 0.
    """
    inst = tool = arg = inst_den = tool_den = 0
    ans, n_ans, ans_i, n_all = 0.0, 0, 0.0, 0
    for pred, ref, gt in episodes:
        c = step_counts(pred, ref)
        inst, tool, arg = inst + c["inst_align"], tool + c["tool_acc"], arg + c["arg_acc"]
        inst_den += c["ref_tool_steps"] + bool(gt)
        tool_den += c["ref_tool_steps"]
        n_all += 1
        if not gt:
            ans_i += image_answer_score(pred, ref, similarity)
            continue
        last = pred[-1] if pred else {}
        score = answer_score(last.get("content") if last.get("type") == "answer" else None, gt, similarity)
        ans, ans_i, n_ans = ans + score, ans_i + score, n_ans + 1
    div = lambda a, b: a / b if b else float("nan")  # noqa: E731
    return {"inst": div(inst, inst_den), "tool": div(tool, tool_den), "arg": div(arg, tool_den),
            "ans": div(ans, n_ans), "ans_i": div(ans_i, n_all)}
