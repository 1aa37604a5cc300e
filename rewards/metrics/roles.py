"""Metrics per role of multi-role agent loops (HiRS-Agent's manager and specialists, Earth-Agent-Pro's planner
and executor): turns, tokens and error turns per role, the loops' own counts (commits, cross-checks,
replans, repairs, retries) and HiRS-Agent's routing accuracy.

Routing accuracy (HiRS-Agent, "Architecture": the manager routes each sub-goal to the SPA, PRA or SAA
family): the share of the manager's routes whose family is the family of a tool in the task's reference
workflow. Every value is a mean per non-faulted trajectory, or a share over turns or routes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from earthrl.envs.tools.registry import TOOLS
from earthrl.rewards.episode import EpisodeRecord


def reference_families(reference: Sequence[dict]) -> set[str]:
    """The HiRS families (``"SPA"``/``"PRA"``/``"SAA"``) of the registered tools of a reference workflow."""
    return {TOOLS[c["name"]].family for c in reference if c["name"] in TOOLS}


def role_metrics(records: Sequence[EpisodeRecord], references: Mapping[str, Sequence[dict]]) -> dict:
    """Per-role and agent-loop metrics of ``records`` (faulted ones left out).

    Args:
        records: scored episodes (:class:`EpisodeRecord` with ``turns``).
        references: task id -> its reference calls (``{"name", "arguments"}``).

    Returns:
        ``{"by_role": {role: {"turns", "action_tokens", "context_tokens": means per trajectory,
        "error_turn_rate": share of the role's turns with E = 1}}, "agent_stats": {count: mean per trajectory},
        "routing_accuracy": share of routes to a family the task needs, or None without routes}``; ``by_role``
        has one role ``"agent"`` for the flat loop.
    """
    recs = [r for r in records if not r.faulted and r.turns]
    n = max(len(recs), 1)
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    stats: dict[str, float] = defaultdict(float)
    routes = good_routes = 0
    for r in recs:
        needed = reference_families(references.get(r.task_id, []))
        for t in r.turns:
            role = sums[t.get("role", "agent")]
            role["turns"] += 1
            role["action_tokens"] += t.get("action_tokens", 0)
            role["context_tokens"] += t.get("context_tokens", 0)
            role["errors"] += bool(t.get("error"))
            goal = t.get("subgoal")
            if t.get("role") == "manager" and goal and not t.get("error"):
                routes += 1
                good_routes += goal.get("family") in needed
        for key, value in r.agent_stats.items():
            stats[key] += float(value)
    by_role = {role: {"turns": v["turns"] / n, "action_tokens": v["action_tokens"] / n,
                      "context_tokens": v["context_tokens"] / n, "error_turn_rate": v["errors"] / v["turns"]}
               for role, v in sorted(sums.items())}
    return {"by_role": by_role, "agent_stats": {k: v / n for k, v in sorted(stats.items())},
            "routing_accuracy": good_routes / routes if routes else None}


def roles_markdown(metrics: dict) -> list[str]:
    """Report lines of :func:`role_metrics` (nothing for a flat loop without counts or routes)."""
    if set(metrics["by_role"]) <= {"agent"} and not metrics["agent_stats"] and metrics["routing_accuracy"] is None:
        return []
    lines = ["", "## By role (means per trajectory)", "", "| role | turns | action tokens | context tokens | error turns |",
             "|---|---|---|---|---|"]
    lines += [f"| {role} | {m['turns']:.2f} | {m['action_tokens']:.1f} | {m['context_tokens']:.1f} | "
              f"{100 * m['error_turn_rate']:.1f}% |" for role, m in metrics["by_role"].items()]
    if metrics["routing_accuracy"] is not None:
        lines += ["", f"Routing accuracy (routes to a family the task needs): {100 * metrics['routing_accuracy']:.1f}%"]
    if metrics["agent_stats"]:
        lines += ["", "## Agent loop (means per trajectory)", "", "| count | mean |", "|---|---|",
                  *[f"| {k} | {v:.2f} |" for k, v in metrics["agent_stats"].items()]]
    return lines
