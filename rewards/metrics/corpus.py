"""SimCRAFT's planning metrics of an SFT corpus (§4.3): PSR, TSA, AEM, Hal.Rate and Fmt.Err of text records.

A record (:class:`~earthrl.rollout.sft_data.SFTTrajectory`, json action format) becomes an
:class:`~earthrl.rewards.episode.EpisodeRecord` (:func:`episode_of`): each action turn's ``<tool_call>`` is parsed
(:func:`~earthrl.envs.formats.parsers.extract_call`) into a call carrying the turn's ``error``/``error_kind``, the
``answer`` call left out; an action that does not parse contributes no call and keeps its turn's ``error_kind``
(``parse_error`` when the env said so). Clarification turns are a dialogue with the user, not actions: they enter
neither calls nor turns. A ``Plan: a -> b -> answer`` line in the first action (SimCRAFT's planning agent,
:mod:`earthrl.rollout.sft_simcraft`) is the record's ``plan`` (so ``plan_psr``/``plan_tsa`` score it too).

:func:`score_corpus` then runs the registered metric functions (:data:`~earthrl.rewards.metrics.compute.METRICS`,
:mod:`earthrl.rewards.metrics.agent`) against the tasks' reference workflows, on the tasks the corpus covers, overall
and per user mode (``expert`` / ``novice``; other sources group by phrasing).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from earthrl.envs.formats.parsers import ActionError, extract_call
from earthrl.rewards.episode import ANSWER_TOOL, EpisodeRecord
from earthrl.rewards.metrics.compute import breakdown, compute_all, references_of
from earthrl.rollout.sft_data import CLARIFY_ROLE, SOURCES, SFTTrajectory

CORPUS_METRICS = ("psr", "tsa", "aem", "plan_psr", "plan_tsa", "hal_rate", "fmt_err")
"""The metrics :func:`score_corpus` reports (SimCRAFT §4.3; ``plan_*`` where the records hold a plan)."""

_PLAN = re.compile(r"^\s*Plan:\s*(.+)$", re.MULTILINE)


def plan_of(action: str) -> list[str] | None:
    """The tool names of a ``Plan: a -> b -> answer`` line in ``action`` (``answer`` left out); None without one."""
    m = _PLAN.search(action)
    if m is None:
        return None
    return [n.strip() for n in m.group(1).split("->") if n.strip() and n.strip() != ANSWER_TOOL]


def episode_of(rec: SFTTrajectory) -> EpisodeRecord:
    """The scorer's view of one json-format record (module doc).

    Raises:
        ValueError: a record in another action format (names it).
    """
    if rec.action_format != "json":
        raise ValueError(f"record {rec.task_id}: action_format {rec.action_format!r}; corpus metrics read json "
                         "records (one <tool_call> a turn)")
    calls, turns = [], []
    acts = [t for t in rec.turns if t.role != CLARIFY_ROLE]
    for t in acts:
        turns.append({"error": bool(t.error), "error_kind": t.error_kind, "role": t.role})
        try:
            call = extract_call(t.action)
        except ActionError:
            continue
        if call["name"] != ANSWER_TOOL:
            calls.append({**call, "error": bool(t.error), "error_kind": t.error_kind})
    return EpisodeRecord(task_id=rec.task_id, calls=calls, turns=turns, answer=rec.answer, correct=rec.correct,
                         mode=rec.user_mode or rec.phrasing, action_format=rec.action_format,
                         plan=plan_of(acts[0].action) if acts else None)


NOT_EPISODES = {"planner": "one per context of the planner-executor loop", "expert_tuning": "question-answer items"}
"""Record sources whose records are not whole episodes, so no tool-sequence metric applies to them."""


def score_corpus(records: Sequence[SFTTrajectory], tasks: Sequence[dict], *, n_resamples: int = 1000,
                 seed: int = 0) -> dict[str, dict]:
    """:data:`CORPUS_METRICS` of ``records`` against the reference calls of ``tasks`` (TaskSpec dicts).

    Returns:
        ``{"all": compute_all result, <mode>: …}`` (:func:`~earthrl.rewards.metrics.compute.compute_all`), scored on
        the tasks the records cover; the per-mode entries only when the corpus holds more than one mode.

    Raises:
        ValueError: no record; a record that is no episode (``planner``: one record per loop context,
            ``expert_tuning``: chat items); a record of a task that ``tasks`` lacks (names it), or of another
            action format.
    """
    if not records:
        raise ValueError("the corpus holds no record: build one with `earthrl sft-data build`")
    not_episodes = sorted({r.source for r in records} & set(NOT_EPISODES))
    if not_episodes:
        episodes = ", ".join(s for s in SOURCES if s not in NOT_EPISODES)
        raise ValueError(f"{not_episodes[0]} records are {NOT_EPISODES[not_episodes[0]]}, not episodes: score a corpus "
                         f"of whole episodes ({episodes})")
    refs = references_of(tasks)
    unknown = sorted({r.task_id for r in records} - set(refs))
    if unknown:
        raise ValueError(f"{len(unknown)} records name tasks outside the given suite (first: {unknown[0]}); pass the "
                         "suite the corpus was built from (--tasks)")
    eps = [episode_of(r) for r in records]
    ids = list(dict.fromkeys(e.task_id for e in eps))
    kw = dict(metrics=CORPUS_METRICS, n_resamples=n_resamples, seed=seed)
    out = {"all": compute_all(eps, refs, task_ids=ids, **kw)}
    if len({e.mode for e in eps}) > 1:
        out.update(breakdown(eps, refs, by="mode", **kw))
    return out
