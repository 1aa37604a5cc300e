"""The planner's and the executor's contexts in Earth-Agent-Pro's planner–executor loop, rendered from the
structured memory S_k = (W_k, M_k) (the paper's "Workflow-Centered Structured Memory"). Pure: text in, text out.

- The planner first sees the question and the skill tree's templates, and binds one (retrieval and binding);
  then, in a fresh context, the question and only the bound skill's tools (the others pruned), and writes the
  workflow skeleton; for a suffix repair, the bound skill, the verified prefix with its results, the failed node
  and the diagnosis of its failure.
- The executor sees only its node's tool, the question, the workflow and the verified evidence M_k: tool,
  validated arguments, observation and the artifact it produced. Failed attempts never reach M_k, so no
  executor context holds another node's error text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from earthrl.envs.formats.prompts import FINISH, system_prompt
from earthrl.rollout.agents.plan import ANSWER, NODES_HINT, SKILL_HINT, SUFFIX_HINT, Node, Workflow

SKILL_SYSTEM = ("You are the planner of a remote-sensing workflow. First bind the one skill of the list that fits "
                f"the task. {SKILL_HINT}")
PLANNER_SYSTEM = (
    "You are the planner of a remote-sensing workflow. Write the workflow skeleton: the tool nodes in order and "
    "which earlier nodes each one needs. Write no paths, scene ids or argument values: an executor fills every "
    f"node's arguments from the verified results.\n{NODES_HINT}\n"
    "One node a line: its id, one of the tools listed, and after <- the ids of the earlier nodes whose results it "
    "uses. The last node calls answer.")
EXECUTOR_CLOSING = "Call this tool once, with arguments taken from the task and the verified evidence."


@dataclass(frozen=True)
class Evidence:
    """One entry of M_k: the verified result of node ``node``: its ``tool``, validated ``arguments``, the
    ``observation`` and the ``artifact`` it registered ("" when none; the provenance later nodes refer to)."""

    node: str
    tool: str
    arguments: dict
    observation: str
    artifact: str = ""


def cut(text: str, n: int) -> str:
    """``text`` on one line, at most ``n`` characters (an ellipsis marks a cut)."""
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: max(n - 1, 0)] + "…"


def evidence_lines(memory: Sequence[Evidence], chars: int) -> list[str]:
    """One line per M_k entry: ``- n1 tool({args}) -> observation [artifact a]``; ``["- none"]`` when empty."""
    return [f"- {e.node} {e.tool}({json.dumps(e.arguments, sort_keys=True)}) -> {cut(e.observation, chars)}"
            + (f" [artifact {e.artifact}]" if e.artifact else "") for e in memory] or ["- none"]


def skeleton(nodes: Sequence[Node]) -> str:
    """The nodes on one line: ``n1 spectral_index; n2 raster_stats <- n1; n3 answer <- n2``."""
    return "; ".join(f"{n.id} {n.tool}" + (f" <- {', '.join(n.needs)}" if n.needs else "") for n in nodes)


def skill_view(task_text: str, catalogue: Mapping[str, tuple[str, Sequence[str]]]) -> str:
    """The planner's first context: the task (question and data) and the skill templates to bind one of.

    Args:
        task_text: the env's first user message (question in the run's phrasing, data manifest).
        catalogue: skill id -> (description, the tools a plan binding it may use).
    """
    lines = [task_text, "", "Skills (id: description):"]
    lines += [f"- {sid}: {desc}" for sid, (desc, _) in catalogue.items()]
    return "\n".join(lines)


def plan_view(task_text: str, skill: str, tools: Sequence[str]) -> str:
    """The planner's context for the skeleton: the task and the bound ``skill``'s ``tools`` only."""
    return "\n".join([task_text, "", f"Bound skill: {skill}", f"Tools: {', '.join(tools)}"])


def repair_view(task_text: str, wf: Workflow, keep: int, tools: Sequence[str], memory: Sequence[Evidence],
                diagnosis: str, chars: int) -> str:
    """The planner's context for a suffix repair (Earth-Agent-Pro, "Suffix Repair").

    Args:
        task_text: the env's first user message.
        wf: the workflow; ``wf.nodes[keep]`` is the node that failed, ``wf.nodes[:keep]`` the verified prefix.
        keep: how many nodes are verified.
        tools: the bound skill's tools (with ``answer``).
        memory: M_k, the verified prefix's evidence.
        diagnosis: why the node failed (its last attempt's error), cut to ``chars``.
        chars: characters kept of each observation and of the diagnosis.
    """
    failed = wf.nodes[keep]
    verified = ", ".join(n.id for n in wf.nodes[:keep]) or "none"
    return "\n".join([
        task_text, "", f"Bound skill: {wf.skill}; tools: {', '.join(tools)}",
        "Verified nodes (kept with their artifacts):", *evidence_lines(memory, chars),
        f"Failed: node {failed.id} ({failed.tool}) after repeated attempts: {cut(diagnosis, chars)}",
        f"Replaced suffix: {skeleton(wf.nodes[keep:])}",
        f"Write a new suffix: the nodes that replace {failed.id} and the nodes after it, ending with answer; "
        f"they may need the verified nodes ({verified}), whose ids they may not reuse.",
        SUFFIX_HINT])


def executor_system(schema: dict, node: Node) -> str:
    """The executor's system prompt: only ``node``'s tool (its OpenAI function ``schema``); "finish with the
    answer tool" only on the answer node."""
    return system_prompt([schema], FINISH if node.tool == ANSWER else EXECUTOR_CLOSING)


def executor_view(task_text: str, wf: Workflow, k: int, memory: Sequence[Evidence], chars: int) -> str:
    """The executor's context for node ``wf.nodes[k]``: the task, the workflow, M_k and the node to fill."""
    node = wf.nodes[k]
    uses = f", using the results of {', '.join(node.needs)}" if node.needs else ""
    now = (f"Now: node {node.id}, the answer: call answer with the value from the evidence." if node.tool == ANSWER
           else f"Now: node {node.id}: call {node.tool}{uses}.")
    return "\n".join([task_text, "", f"Workflow (skill {wf.skill}): {skeleton(wf.nodes)}",
                      "Verified evidence:", *evidence_lines(memory, chars), now])
