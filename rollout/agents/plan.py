"""Earth-Agent-Pro's workflow skeleton W_k (the paper's "Skill-Guided Workflow Planning" and "Suffix Repair"):
parsing and checking the planner's output, and the workflow with its revision archive. Pure: no model, no
environment.

The planner first binds one skill of the skill tree (:mod:`earthrl.envs.core.skills`; :func:`parse_skill`:
``<plan>skill: spectral_index</plan>``), then writes the plan, one node a line
(``<id> <tool> <- <the ids of the nodes it needs>``)::

    <plan>
    n1 spectral_index
    n2 raster_stats <- n1
    n3 answer <- n2
    </plan>

or the same as JSON, ``<plan>{"nodes": [{"id": "n1", "tool": "spectral_index", "needs": []}, …]}</plan>``; a plan
that binds its skill itself starts with a ``skill: <id>`` line (JSON: ``"skill"``). The line form is what the
planner is shown: 26 Qwen2.5 tokens for the plan above against 72 as JSON (a turn is cut at ``max_new_tokens``, 128
by default), and nothing to escape.

Every node names a tool of the bound skill (or ``answer``) and the nodes whose results it uses (its needs). A node
holds no paths and no values: the executor fills its arguments from the verified evidence. A suffix repair's plan
has the same form; its needs may name the verified prefix's nodes.

Whatever is wrong with a plan is a :class:`PlanError` whose message tells the planner what to change; the agent
loop shows it to the planner as an observation (never a crash).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from earthrl.envs.formats.parsers import ActionError, first_json_object, strip_fence, tag_body

NODE_KEYS = ("id", "tool", "needs")
ANSWER = "answer"
MAX_NODES = 16
"""Most nodes one plan or suffix may have."""
SKILL_HINT = "Write <plan>skill: <skill id></plan>"
PLAN_HINT = "Write the plan as\n<plan>\nskill: <skill id>\nn1 <tool>\nn2 <tool> <- n1\nn3 answer <- n2\n</plan>"
NODES_HINT = "Write the plan as\n<plan>\nn1 <tool>\nn2 <tool> <- n1\nn3 answer <- n2\n</plan>"
SUFFIX_HINT = "Write the new suffix as\n<plan>\nn4 <tool> <- n1\nn5 answer <- n4\n</plan>"
PLAN_STOP = "</plan>"
"""The string that ends a planner turn (the loop's ``env.stop_strings`` hold it: the engine stops there)."""
_SKILL_LINE = re.compile(r"^skill(?:\s*[:=]\s*|\s+)(.*?)\s*$", re.IGNORECASE)
_LIST_MARK = re.compile(r"^(?:[-*•]|\d+[.)])\s+")


class PlanError(ValueError):
    """The planner's output is not a valid plan; the message says what to change (shown to the planner)."""


@dataclass(frozen=True)
class Node:
    """One workflow node: ``id`` (unique in the workflow), the ``tool`` it calls, the ids of the nodes it ``needs``."""

    id: str
    tool: str
    needs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """A checked plan: the bound ``skill`` and the ``nodes`` in execution order (dependencies first, ``answer`` last)."""

    skill: str
    nodes: tuple[Node, ...]


def format_skill(skill: str) -> str:
    """The skill-binding turn :func:`parse_skill` reads: ``<plan>skill: <skill></plan>``."""
    return f"<plan>skill: {skill}{PLAN_STOP}"


def format_plan(nodes: Sequence[Node], skill: str | None = None) -> str:
    """The line form of a plan (module doc) that :func:`parse_plan` reads back to ``nodes``: ``<plan>``, a
    ``skill: <id>`` line when ``skill`` is given, one ``<id> <tool> <- <needs>`` line per node, ``</plan>``.
    Holds only ids and tool names (no paths, no values)."""
    lines = [f"skill: {skill}"] if skill else []
    lines += [f"{n.id} {n.tool}" + (f" <- {', '.join(n.needs)}" if n.needs else "") for n in nodes]
    return "<plan>\n" + "\n".join(lines) + "\n" + PLAN_STOP


def parse_skill(text: str, skills: Collection[str]) -> str:
    """The skill the planner binds in ``text`` (``<plan>skill: <id></plan>``; the tags, the ``skill:`` prefix and
    surrounding words optional, the first skill id named counts).

    Raises:
        PlanError: no skill id of ``skills`` in the text (the message lists them).
    """
    body = strip_fence(tag_body(text, "plan") or text)
    named = [w for w in re.findall(r"[A-Za-z_]+", body) if w in skills]
    if not named:
        raise PlanError(f"no skill bound: name one of {', '.join(skills)}. {SKILL_HINT}")
    return named[0]


def parse_plan(text: str, skills: Mapping[str, Collection[str]], *, bound: str | None = None,
               verified: Sequence[str] = ()) -> Plan:
    """The plan in the planner's ``text``, checked and in execution order.

    Args:
        text: the planner's turn: ``<plan>…</plan>`` in the line or the JSON form (module doc; the tags, or a fenced
            block, optional).
        skills: skill id -> the tools a plan that binds it may use (the loop adds ``answer``).
        bound: the skill a suffix repair keeps (the skill may then be left out, and must equal it when given);
            None for the first plan, which must bind one.
        verified: the verified prefix's node ids (a suffix's needs may name them, its ids may not reuse them).

    Returns:
        :class:`Plan`; its nodes in a topological order that keeps the written order where the dependencies
        allow, with the one ``answer`` node last.

    Raises:
        PlanError: neither form, no or an unknown skill, no nodes or more than :data:`MAX_NODES`, a node with more
            than an id, a tool and needs (paths or values), a missing or repeated id, a tool outside the skill, needs
            naming no node (e.g. argument names), a dependency cycle, not exactly one ``answer`` node, or a node that
            needs ``answer``.
    """
    hint = (SUFFIX_HINT if verified else NODES_HINT) if bound else PLAN_HINT
    body = strip_fence(tag_body(text, "plan") or text)
    as_json = body.lstrip().startswith("{") or '"nodes"' in body  # else node lines, maybe with values in braces
    obj = _json_plan(body, hint) if as_json else _line_plan(body, hint)
    skill = _skill(obj, skills, bound, hint)
    raw = obj.get("nodes")
    if not isinstance(raw, list) or not raw:
        raise PlanError(f"the plan has no nodes. {hint}")
    if len(raw) > MAX_NODES:
        raise PlanError(f"the plan has {len(raw)} nodes; write at most {MAX_NODES}")
    allowed = set(skills[skill]) | {ANSWER}
    nodes = [_node(i, n, allowed, skill, skills) for i, n in enumerate(raw)]
    _check_ids(nodes, verified)
    known = {n.id for n in nodes} | set(verified)
    for n in nodes:
        bad = [d for d in n.needs if d not in known]
        if bad:
            raise PlanError(f"node {n.id} needs {', '.join(map(repr, bad))}, which is not a node id: a node needs the "
                            f"ids of the nodes whose results it uses (here: {', '.join(sorted(known))}), never "
                            "argument names or values")
    answers = [n.id for n in nodes if n.tool == ANSWER]
    if len(answers) != 1:
        raise PlanError(f"the plan has {len(answers)} answer nodes; end it with exactly one node whose tool is answer")
    users = [n.id for n in nodes if answers[0] in n.needs]
    if users:
        raise PlanError(f"node {users[0]} needs the answer node {answers[0]}; answer is the last node")
    return Plan(skill, _ordered(nodes))


def _json_plan(body: str, hint: str) -> dict:
    try:
        return first_json_object(body)
    except ActionError as exc:
        raise PlanError(f"the plan is not a JSON object ({exc.message.split('. ')[0]}). {hint}") from None


def _line_plan(body: str, hint: str) -> dict:
    """The line form as the JSON form's dict: ``{"skill"?, "nodes": [{"id", "tool", "needs"}]}``."""
    obj: dict = {"nodes": []}
    for line in body.splitlines():
        line = _LIST_MARK.sub("", line.strip().strip("`"))
        if not line:
            continue
        if m := _SKILL_LINE.match(line):
            obj["skill"] = m.group(1)
            continue
        head, _, needs = line.partition("<-")
        words = head.replace(",", " ").split()
        if len(words) != 2:
            raise PlanError(f"the line {line[:80]!r} is not a node: write `<id> <tool> <- <ids it needs>`, one node a "
                            "line, with no paths or values (the executor fills the arguments). " + hint)
        obj["nodes"].append({"id": words[0].rstrip(":"), "tool": words[1], "needs": needs.replace(",", " ").split()})
    return obj


def _skill(obj: dict, skills: Mapping[str, Collection[str]], bound: str | None, hint: str) -> str:
    skill = obj.get("skill", bound)
    if bound is not None and skill != bound:
        raise PlanError(f"the skill {bound} is bound; leave the skill out and write the nodes")
    if not isinstance(skill, str) or not skill:
        raise PlanError(f"the plan binds no skill: give one of {', '.join(skills)}. {hint}")
    if skill not in skills:
        raise PlanError(f"no skill {skill!r}; bind one of {', '.join(skills)}")
    return skill


def _node(i: int, raw, allowed: set[str], skill: str, skills: Collection[str]) -> Node:
    if not isinstance(raw, dict):
        raise PlanError(f'node {i + 1} is not an object; write {{"id": "n{i + 1}", "tool": "<tool>", "needs": []}}')
    extra = [k for k in raw if k not in NODE_KEYS]
    label = raw.get("id", i + 1)
    if extra:
        raise PlanError(f"node {label} has {', '.join(map(repr, extra))}: a node is only an id, a tool and the "
                        "nodes it needs, with no paths or values; the executor fills the arguments")
    node_id, tool, needs = raw.get("id"), raw.get("tool"), raw.get("needs", [])
    if not isinstance(node_id, str) or not node_id.strip():
        raise PlanError(f'node {i + 1} has no "id" string (e.g. "n{i + 1}")')
    if isinstance(tool, str) and tool in skills and tool not in allowed:
        raise PlanError(f"node {node_id} calls the skill {tool}, not a tool: the bound skill is {skill}, and a node "
                        f"calls one of its tools: {', '.join(sorted(allowed))}")
    if not isinstance(tool, str) or tool not in allowed:
        raise PlanError(f"node {node_id} calls {tool!r}, which is not a tool of skill {skill}; use one of "
                        f"{', '.join(sorted(allowed))}")
    if not isinstance(needs, list) or not all(isinstance(d, str) for d in needs):
        raise PlanError(f'node {node_id}: "needs" is a list of node ids (e.g. ["n1"]), or [] for none')
    return Node(node_id.strip(), tool, tuple(dict.fromkeys(d.strip() for d in needs)))


def _check_ids(nodes: list[Node], verified: Sequence[str]) -> None:
    seen: set[str] = set()
    for n in nodes:
        if n.id in verified:
            raise PlanError(f"node id {n.id} is a verified node's; give the new nodes new ids "
                            f"(verified: {', '.join(verified)})")
        if n.id in seen:
            raise PlanError(f"node id {n.id} is used twice; give every node its own id")
        seen.add(n.id)


def _ordered(nodes: list[Node]) -> tuple[Node, ...]:
    """Kahn's order, the earliest written ready node first, ``answer`` only when nothing else is left.

    Raises:
        PlanError: a dependency cycle (names its nodes).
    """
    local = {n.id for n in nodes}  # a suffix's needs may name the verified prefix: those ran already
    left, out, done = list(nodes), [], set()
    while left:
        ready = [n for n in left if (n.tool != ANSWER or len(left) == 1)
                 and all(d in done or d not in local for d in n.needs)]
        if not ready:
            raise PlanError(f"the nodes {', '.join(_cycle(left))} need each other in a cycle; a node needs only "
                            "nodes that run before it")
        out.append(ready[0])
        done.add(ready[0].id)
        left.remove(ready[0])
    return tuple(out)


def _cycle(left: list[Node]) -> list[str]:
    """The ids on one dependency cycle among ``left`` (nodes none of which is ready: each needs one of them)."""
    by_id = {n.id: n for n in left if n.tool != ANSWER}
    path, node = [], next(iter(by_id.values()))
    while node.id not in path:
        path.append(node.id)
        node = by_id[next(d for d in node.needs if d in by_id)]
    return path[path.index(node.id):]


@dataclass
class Workflow:
    """W_k: the bound ``skill``, the active ``nodes`` in execution order, and the revision ``archive`` (the
    suffixes that repairs replaced, oldest first)."""

    skill: str
    nodes: list[Node]
    archive: list[tuple[Node, ...]] = field(default_factory=list)

    def repair(self, keep: int, suffix: Plan) -> None:
        """Suffix repair: keep the first ``keep`` nodes (the verified prefix), archive the rest, append ``suffix``.

        Raises:
            ValueError: ``keep`` outside ``[0, len(nodes)]``, or ``suffix`` binds another skill (a bug of the caller:
                :func:`parse_plan` with ``bound`` refuses that).
        """
        if not 0 <= keep <= len(self.nodes) or suffix.skill != self.skill:
            raise ValueError(f"repair(keep={keep}, skill={suffix.skill}) of a {len(self.nodes)}-node {self.skill} "
                             "workflow")
        self.archive.append(tuple(self.nodes[keep:]))
        self.nodes = self.nodes[:keep] + list(suffix.nodes)
