"""Earth-Agent-Pro's planner SFT data (Earth-Agent-Pro, training of the planner: sequence-level SFT on workflow
skeletons): skeleton synthesis from reference workflows, and the planner's and executor's turns of
``agent=planner_executor`` as text records (:class:`~earthrl.rollout.sft_data.SFTTrajectory`).

**Skeleton.** A task's reference workflow is played through a real :class:`~earthrl.envs.core.env.RSEnv`; its
skeleton (:func:`reference_skeleton`) keeps the node ids, the tools and the dependencies — node k needs node j when
one of k's arguments names the artifact j's call produced — and drops every path, scene id and argument value; an
``answer`` node needing the last call ends it. The target text is :func:`~earthrl.rollout.agents.plan.format_plan`,
the line form :func:`~earthrl.rollout.agents.plan.parse_plan` reads (one piece of code for both), and every
skeleton is parsed back under its bound skill before it is kept.

**Instances.** Earth-Agent-Pro grows 248 expert workflows into 2,480 trajectories by keeping each workflow's
immutable skeleton and replacing its mutable instance state (area, dates, product source). The earthrl-mini suite's
tasks are built that way already: a template is a skeleton, each task an instance of it (scene or date, index,
band, threshold, statistic; :mod:`earthrl.envs.suites.earthrl_mini`), executed to get its answer. So the planner
data of the train split is one record set per task, and tasks sharing a skeleton are its instances
(:func:`build_planner` counts both).

**Records** (one per context the loop opens, each built by the loop's own prompt code,
:mod:`earthrl.rollout.agents.contexts`): the skill-binding turn (``SKILL_SYSTEM``, ``skill_view``; target
``<plan>skill: <task skill></plan>``), the skeleton turn (``PLANNER_SYSTEM``, ``plan_view`` of the bound skill's
tools; target the skeleton), and one executor turn per node (``executor_system`` with the node's tool schema,
``executor_view`` with the workflow and the verified evidence M_k of the nodes before it; target the reference's
json call, observation the env's).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.tools.registry import TOOLS, openai_schema
from earthrl.rollout.agents.contexts import (
    PLANNER_SYSTEM,
    SKILL_SYSTEM,
    Evidence,
    executor_system,
    executor_view,
    plan_view,
    skill_view,
)
from earthrl.rollout.agents.plan import ANSWER, Node, PlanError, Workflow, format_plan, format_skill, parse_plan
from earthrl.rollout.agents.planner_executor import PlannerExecutorOptions, skill_catalogue
from earthrl.rollout.sft_data import Judge, SFTTrajectory, SFTTurn, call_text, reference_calls

PLANNER_COUNTS = ("tasks", "kept", "skeletons", "planner_records", "executor_records", "incorrect", "step_errors",
                  "outside_skill")


def _strings(value) -> Iterable[str]:
    """Every string inside an argument value (lists and dicts walked)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def reference_skeleton(calls: list[dict], artifacts: list[str]) -> tuple[Node, ...]:
    """The skeleton of an executed reference workflow: nodes ``n1 … nk`` with the calls' tools, node k needing
    the earlier nodes whose artifact one of its arguments names, then ``n(k+1) answer`` needing ``nk``.

    Args:
        calls: the reference calls in order (``{"name", "arguments"}``, the answer call excluded), k ≥ 1.
        artifacts: the artifact each call registered, in the same order ("" for none).

    Raises:
        ValueError: no calls, or ``artifacts`` of another length.
    """
    if not calls or len(artifacts) != len(calls):
        raise ValueError(f"reference_skeleton: {len(calls)} calls and {len(artifacts)} artifacts; give ≥ 1 call "
                         "and one artifact entry per call")
    nodes = []
    for k, call in enumerate(calls):
        named = set(_strings(call["arguments"]))
        needs = tuple(f"n{j + 1}" for j in range(k) if artifacts[j] and artifacts[j] in named)
        nodes.append(Node(f"n{k + 1}", call["name"], needs))
    return (*nodes, Node(f"n{len(calls) + 1}", ANSWER, (f"n{len(calls)}",)))


def spread(tasks: list[dict], n: int | None) -> list[dict]:
    """The first ``n`` tasks taken round-robin over their tool sequences (one instance of every workflow before a
    second of any), so that a few tasks cover every skeleton; all tasks, in that order, for ``n`` None."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for t in tasks:
        groups[tuple(c["name"] for c in t["reference"])].append(t)
    out, rows = [], list(groups.values())
    for i in range(max((len(r) for r in rows), default=0)):
        out += [r[i] for r in rows if i < len(r)]
    return out[:n] if n else out


def _record(task: dict, phrasing: str, system: str, user: str, turn: SFTTurn) -> SFTTrajectory:
    return SFTTrajectory(task_id=task["id"], source="planner", action_format="json", phrasing=phrasing,
                         system=system, user=user, turns=[turn])


def planner_records(env: RSEnv, task: dict, judge: Judge, phrasing: str = "IF",
                    memory_chars: int = PlannerExecutorOptions.memory_chars) -> tuple[list[SFTTrajectory], str]:
    """The planner and executor records of one task (module doc), played in ``env`` (a json-format RSEnv).

    Returns:
        (records, status): the records and ``"kept"``, or no records and why: ``"step_errors"`` (a reference call
        failed or its verifier said fail), ``"incorrect"`` (the answer is judged wrong), ``"outside_skill"`` (the
        skeleton does not parse under the task's skill, e.g. a tool the skill does not allow).
    """
    task_text = env.reset(TaskSpec.model_validate(task), phrasing)
    catalogue = skill_catalogue()
    skill = task["skill"]
    env.step(call_text({"name": "open_skill", "arguments": {"skill": skill}}))  # the loop's binding
    calls = reference_calls(task)
    results = []
    for call in calls:
        res = env.step(call_text(call))
        if res.error or res.verdict == "fail":
            return [], "step_errors"
        results.append(res)
    if not judge(results[-1].answer, task["answer"]):
        return [], "incorrect"
    artifacts = [str((r.result or {}).get("artifact") or "") for r in results[:-1]]
    nodes = reference_skeleton(calls[:-1], artifacts)
    tools = catalogue[skill][1] if skill in catalogue else []
    target = format_plan(nodes)
    try:
        parsed = parse_plan(target, {skill: tools}, bound=skill)
    except PlanError:
        return [], "outside_skill"
    if parsed.nodes != nodes:  # the loop would run another order than the reference's
        return [], "outside_skill"
    out = [_record(task, phrasing, SKILL_SYSTEM, skill_view(task_text, catalogue),
                   SFTTurn(format_skill(skill), f"skill {skill} bound; tools: {', '.join(tools)}", role="planner")),
           _record(task, phrasing, PLANNER_SYSTEM, plan_view(task_text, skill, tools),
                   SFTTurn(target, "", role="planner"))]
    wf, memory = Workflow(skill, list(nodes)), []
    for k, (node, call, res) in enumerate(zip(nodes, calls, results)):
        out.append(_record(task, phrasing, executor_system(openai_schema(TOOLS[node.tool]), node),
                           executor_view(task_text, wf, k, memory, memory_chars),
                           SFTTurn(call_text(call), res.observation, role="executor")))
        done = res.tool_call or call
        memory.append(Evidence(node.id, done["name"], dict(done.get("arguments") or {}), res.observation,
                               artifacts[k] if k < len(artifacts) else ""))
    out[-1].answer = results[-1].answer
    for r in out:
        r.correct = True
    return out, "kept"


def build_planner(env: RSEnv, tasks: list[dict], judge: Judge, phrasing: str = "IF",
                  memory_chars: int = PlannerExecutorOptions.memory_chars) -> tuple[list[SFTTrajectory], dict]:
    """Planner and executor records of ``tasks`` (:func:`planner_records`).

    Returns:
        (records, counts of :data:`PLANNER_COUNTS`): ``kept`` tasks, ``skeletons`` (distinct skeleton targets among
        them: the kept tasks are their instances), records per role, and the tasks left out by reason.
    """
    counts = dict.fromkeys(PLANNER_COUNTS, 0)
    counts["tasks"] = len(tasks)
    out, targets = [], set()
    for task in tasks:
        recs, status = planner_records(env, task, judge, phrasing, memory_chars)
        counts[status] += 1
        if recs:
            targets.add(recs[1].turns[0].action)
            counts["planner_records"] += 2
            counts["executor_records"] += len(recs) - 2
            out += recs
    counts["skeletons"] = len(targets)
    return out, counts
