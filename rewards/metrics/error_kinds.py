"""Error kinds of erroneous turns, per tool: the counts behind the evaluation report's ``error_kinds`` section
and the training run's ``error_kinds_by_tool.png``.

An erroneous turn (E = 1, the error indicator of RS-Claw-Evolution's EIR) carries an error kind
(``parse_error``, ``schema_error``, ``unknown_tool``, ``hallucinated_path``, ``tool_error``, ``off_record``,
``timeout``, …, named by the environment). :func:`turn_errors` reads one turn's errors as ``(tool, kind)``
pairs; :func:`count_by_tool` adds them up; :func:`error_kinds` is the report's section over episodes.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

NO_CALL = "(no call)"
"""The tool name of an erroneous turn that called no tool (a parse failure)."""


def turn_errors(turn: dict) -> list[tuple[str, str]]:
    """``(tool, error kind)`` of each error of one turn (a ``rollouts.jsonl`` turn or an
    :class:`~earthrl.rewards.episode.EpisodeRecord` turn): each failed call of the turn's ``tool_calls``
    (CodeAct runs several), else the turn's own error with its ``tool_call``'s name (:data:`NO_CALL` when it
    parsed no call); [] for a turn without error. A kind the turn does not name is ``"error"``."""
    if not turn.get("error"):
        return []
    failed = [(c.get("name") or NO_CALL, c.get("error_kind") or "error") for c in turn.get("tool_calls") or []
              if c.get("error")]
    if failed:
        return failed
    call = turn.get("tool_call") if isinstance(turn.get("tool_call"), dict) else {}
    return [(call.get("name") or NO_CALL, turn.get("error_kind") or "error")]


def count_by_tool(turns: Iterable[dict]) -> dict[str, dict[str, int]]:
    """``{tool: {error kind: errors}}`` over ``turns`` (:func:`turn_errors` of each), tools and kinds sorted."""
    errors: dict[str, Counter] = defaultdict(Counter)
    for turn in turns:
        for tool, kind in turn_errors(turn):
            errors[tool][kind] += 1
    return {tool: dict(sorted(c.items())) for tool, c in sorted(errors.items())}


def error_kinds(episodes: list[list[dict]], faults: dict[str, int] | None = None) -> dict:
    """The report's ``error_kinds`` section over ``episodes`` (each a list of turns; faulted episodes left out
    by the caller, as from every metric).

    Args:
        episodes: the turns of each episode scored.
        faults: episodes ended by a fault outside the agent, per fault kind (``env_timeout``,
            ``internal_error``, …; ``Trajectory.failure``), reported beside the agent's own errors.

    Returns:
        ``{"episodes": n, "by_kind": {kind: {"count": errors, "per_episode": errors / n, "episodes": episodes
        with at least one}}, "by_tool": {tool: {kind: errors}}, "faults": {fault kind: episodes}}``; kinds
        sorted by count, then name. With ``n = 0`` ``by_kind`` and ``by_tool`` are empty.
    """
    total: Counter = Counter()
    hit: Counter = Counter()
    for turns in episodes:
        kinds = Counter(kind for turn in turns for _, kind in turn_errors(turn))
        total.update(kinds)
        hit.update(kinds.keys())
    n = len(episodes)
    order = sorted(total, key=lambda k: (-total[k], k))
    return {"episodes": n,
            "by_kind": {k: {"count": total[k], "per_episode": total[k] / n, "episodes": hit[k]} for k in order},
            "by_tool": count_by_tool(t for turns in episodes for t in turns),
            "faults": dict(sorted((faults or {}).items()))}


def error_kinds_markdown(section: dict) -> list[str]:
    """Markdown lines of :func:`error_kinds`' section (nothing when no turn erred and no episode faulted)."""
    if not section.get("by_kind") and not section.get("faults"):
        return []
    lines = ["", f"## Error kinds ({section['episodes']} episodes)", ""]
    if section["by_kind"]:
        kinds = list(section["by_kind"])
        lines += ["| error kind | errors | per episode | episodes with it |", "|---|---|---|---|",
                  *[f"| {k} | {v['count']} | {v['per_episode']:.3f} | {v['episodes']} |"
                    for k, v in section["by_kind"].items()],
                  "", "Errors per tool:", "", "| tool | " + " | ".join(kinds) + " |", "|" + "---|" * (len(kinds) + 1),
                  *[f"| {tool} | " + " | ".join(str(c.get(k, 0)) for k in kinds) + " |"
                    for tool, c in section["by_tool"].items()]]
    if section.get("faults"):
        lines += ["", "Episodes ended by a fault outside the agent (out of every metric): "
                  + ", ".join(f"{k} {v}" for k, v in section["faults"].items())]
    return lines
