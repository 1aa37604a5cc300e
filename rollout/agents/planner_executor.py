"""Earth-Agent-Pro's planner–executor loop (Earth-Agent-Pro, "Skill-Guided Workflow Planning",
"Workflow-Centered Structured Memory", "Suffix Repair"): ``agent=planner_executor``.

The **planner** retrieves and binds one skill template of the skill tree (:mod:`earthrl.envs.core.skills`: the
tools it allows, their order and argument ranges) in a first turn, then — in a fresh context that lists only the
bound skill's tools, the others pruned — writes a workflow skeleton W_k: nodes with a tool and the nodes they
need, no paths and no values (:mod:`.plan`). Binding opens the skill in the environment (``open_skill``, no model
turn): its tools become callable and its order and range rules are checked.

The **executor** then runs the nodes in order, each in a fresh context of its own (:mod:`.contexts`): only the
node's tool, the question, the workflow and the verified evidence M_k (tool, validated arguments, observation,
artifact). It writes one ``<tool_call>`` of the node's tool (a call of another tool does not run). A call that
ran without error and whose verdict is not ``fail`` is committed to M_k. A failed attempt is retried inside its
node: its error text goes back into that node's context only and never enters M_k. After
``1 + max_node_retries`` failed attempts the node has failed, and **suffix repair** keeps the verified prefix and
its artifacts (nothing of it runs again) and asks the planner, in a fresh context with the diagnosis, for a new
suffix that replaces the failed node and the nodes after it; the old suffix goes to W_k's revision archive.

A planner output that is not a valid plan is an observation to the planner (``Error (invalid_plan): …`` naming
what to change), which may write it again ``max_plan_retries`` times in the same context. The episode ends
unanswered, cleanly, when a plan or a repair stays invalid, when ``max_repairs`` repairs are spent, or when the
budget is: ``env.max_turns`` counts planner and executor turns together, and no context may pass
``env.max_context_tokens``.

Every turn records its role (``planner``/``executor``), node (``skill``, ``plan``, ``repair1``, …, or the workflow
node's id)
and its role's adapter; a turn that starts a context carries it in
:attr:`~earthrl.rollout.trajectory.Turn.context_ids` (token-in/token-out per context).

**Node-level GRPO** (the paper's executor training, "通过在同节点下采样多组候选参数计算相对优势": candidate
arguments sampled at the same node, their advantages relative to each other): with ``node_candidates`` G > 1,
the first attempt at each node samples G calls from the one node state — the identical prompt tokens — and plays
the first; the G − 1 others are checked as the environment checks a json action (parse, tool name, argument
schema: :func:`~earthrl.envs.formats.parsers.parse_json_action`) and never run, so nothing they do reaches the
workspace or M_k. They are kept as turns after the played ones (:attr:`~earthrl.rollout.trajectory.Turn.candidate`
≥ 1, all G sharing :attr:`~earthrl.rollout.trajectory.Turn.node_state`), scored by the executor reward like the
played call, and the ``executor_node`` estimator normalises the G rewards among themselves. Metrics, the turn
budget and the outcome count played turns only.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from earthrl.envs.core.skills import SKILL_IDS, SKILLS, skill_tools
from earthrl.envs.formats.parsers import ActionError, extract_call, parse_json_action
from earthrl.envs.tools.registry import TOOLS, openai_schema
from earthrl.rollout.agent_loop import LoopConfig, new_trajectory, note_cut, play, turn_from
from earthrl.rollout.agent_registry import AGENT_LOOPS
from earthrl.rollout.agents.contexts import (
    PLANNER_SYSTEM,
    SKILL_SYSTEM,
    Evidence,
    executor_system,
    executor_view,
    plan_view,
    repair_view,
    skeleton,
    skill_view,
)
from earthrl.rollout.agents.plan import ANSWER, Node, PlanError, Workflow, parse_plan, parse_skill
from earthrl.rollout.trajectory import Trajectory

STATS = ("skills_bound", "plans", "plan_errors", "repairs", "nodes_run", "commits", "retries", "failed_nodes", "wrong_tool_calls",
         "node_candidates")
MAX_NODE_CANDIDATES = 8
SEED_STRIDE = 100  # candidate j of turn t is the engine's request (episode, t + SEED_STRIDE·j): a seed of its own


@dataclass
class PlannerExecutorOptions:
    """``agent.options`` of ``agent=planner_executor`` (module doc).

    Attributes:
        max_node_retries: in-node retries after a node's first failed attempt (a node gets 1 + this many).
        max_repairs: suffix repairs per episode; a node that fails after them ends the episode unanswered.
        max_plan_retries: invalid planner outputs answered with the error and written again, per skill binding,
            plan or repair.
        memory_chars: characters of each observation (and of a repair's diagnosis) shown in contexts.
        node_candidates: G, the calls sampled from each node's first state (node-level GRPO, module doc); 1 samples
            one (evaluation, and training with other estimators); at most :data:`MAX_NODE_CANDIDATES`.
    """

    max_node_retries: int = 2
    max_repairs: int = 2
    max_plan_retries: int = 2
    memory_chars: int = 300
    node_candidates: int = 1

    def check(self) -> None:
        """Raises: ValueError naming the bad option and what it accepts."""
        for key in ("max_node_retries", "max_repairs", "max_plan_retries", "memory_chars"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{key}={value}: use a whole number ≥ 0")
        g = self.node_candidates
        if not isinstance(g, int) or isinstance(g, bool) or not 1 <= g <= MAX_NODE_CANDIDATES:
            raise ValueError(f"node_candidates={self.node_candidates}: use 1 (one call per node) to "
                             f"{MAX_NODE_CANDIDATES} (G calls sampled from each node state)")


def skill_catalogue() -> dict[str, tuple[str, list[str]]]:
    """Skill id -> (description, the tools a plan binding it may use: its registered tools and ``answer``)."""
    return {sid: (SKILLS[sid].description, [*dict.fromkeys([*skill_tools(sid, TOOLS), ANSWER])])
            for sid in SKILL_IDS}


def _local(observation: str, kind: str | None = None, call: dict | None = None) -> dict:
    """The step result of a turn the loop answers itself, without the environment (a plan, a refused call)."""
    return {"observation": observation, "error": kind is not None, "error_kind": kind, "tool_call": call,
            "done": False, "answer": None}


def candidate_check(text: str, node: Node) -> dict:
    """The step result of a node-level candidate call that is not run: the json format's parse, tool and argument
    checks (``parse_error``, ``unknown_tool``, ``schema_error`` with the environment's message), then the node's
    tool (``wrong_node_tool``, as for a played call); a call that passes them has no error."""
    try:
        call = parse_json_action(text).to_dict()
    except ActionError as exc:
        return _local(f"Error ({exc.kind}): {exc.message}", exc.kind)
    if call["name"] != node.tool:
        return _local(f"Error (wrong_node_tool): node {node.id} calls {node.tool}, not {call['name']}", "wrong_node_tool",
                      call)
    return _local("candidate call: valid, not run (node-level GRPO)", None, call)


def _call_text(name: str, arguments: dict) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@AGENT_LOOPS.register("planner_executor")
async def run_episode(task: dict, group: str, *, system: str, codec, tokenizer, engine, pool, cfg: LoopConfig,
                      index: int = 0) -> Trajectory:
    """Play one task with Earth-Agent-Pro's planner and executor (module doc); the contract of
    :func:`earthrl.rollout.agent_loop.run_episode`. ``system`` (the env's json prompt with every tool) is not used:
    the planner and each node's executor get prompts of their own. Never raises.

    ``traj.agent_stats``: ``skills_bound`` (0 or 1), ``plans`` (valid plans and suffixes), ``plan_errors`` (invalid planner turns: skill or
    plan), ``repairs``,
    ``nodes_run``, ``commits`` (entries of M_k), ``retries`` (in-node retries), ``retries_per_node``
    (retries / nodes run), ``failed_nodes``, ``wrong_tool_calls`` (executor calls of another node's tool) and
    ``node_candidates`` (candidate calls sampled besides the played ones). ``traj.plan``: the first valid plan's
    tools without ``answer`` (``[]`` when none), what the plan metrics ``plan_psr``/``plan_tsa`` score.
    """
    opts: PlannerExecutorOptions = cfg.options_as(PlannerExecutorOptions)
    traj = new_trajectory(task, group)
    eid = traj.episode_id
    stats: dict = dict.fromkeys(STATS, 0)
    traj.agent_stats = stats
    traj.plan = []  # the first valid plan's tools (SimCRAFT's plan metrics on the planner's output)
    catalogue = skill_catalogue()
    allowed = {sid: tools for sid, (_, tools) in catalogue.items()}
    chars = opts.memory_chars
    candidates: list = []  # node-level candidate calls (module doc), kept after the played turns
    node_of: dict[str, Node] = {}  # the workflow node each executor turn works on, by id

    async def attempts(sys_text: str, user: str, role: str, node: str, tries: int,
                       act: Callable[[str], Awaitable[tuple[dict, object]]]) -> tuple[str, object]:
        """Up to ``tries`` turns of ``role`` in one fresh context, each failed attempt's observation appended to it.

        ``act(text) -> (step result, value)`` judges a turn; a value that is not None ends it. Returns
        ``("ok", value)``, ``("failed", the last step result)``, or ``("stop", None)`` when the budget or a fault
        ended the episode.
        """
        ids = codec.prompt_ids(sys_text, user)
        fresh = True
        for attempt in range(tries):
            if traj.num_turns >= cfg.max_turns or len(ids) > cfg.max_context_tokens:
                return "stop", None
            g = opts.node_candidates if role == "executor" and fresh else 1  # node-level GRPO: G calls, one state
            t = traj.num_turns
            outs = await asyncio.gather(*(engine.generate(ids, (index, t + SEED_STRIDE * j), adapter=cfg.adapter(role))
                                          for j in range(g)))
            out = outs[0]
            text = tokenizer.decode(out["response_ids"], skip_special_tokens=True)
            res, value = await act(text)
            ctx = ids if fresh else []
            if not traj.turns:
                traj.prompt_ids, ctx = ids, []
            # the json env names every turn's author "agent"; the loop knows the role (and so the adapter)
            state = f"{node}@{t}" if g > 1 else ""
            note_cut(out, res)  # before the copy below: the next observation carries the note too
            turn = turn_from(out, text, {**res, "role": None}, role, cfg, context_ids=ctx, node=node, node_state=state)
            traj.turns.append(turn)
            for j, other in enumerate(outs[1:], 1):
                other_text = tokenizer.decode(other["response_ids"], skip_special_tokens=True)
                candidates.append(turn_from(other, other_text, candidate_check(other_text, node_of[node]), role, cfg,
                                            context_ids=list(ids), node=node, candidate=j, node_state=state))
            stats["node_candidates"] += g - 1
            if res.get("internal_error"):
                traj.mark_failed("internal_error", res["internal_error"], turn=traj.num_turns - 1)
                return "stop", None
            if value is not None:
                return "ok", value
            if attempt + 1 == tries:
                return "failed", res
            obs_ids = codec.observation_ids(res["observation"], out["response_ids"])
            if len(ids) + len(out["response_ids"]) + len(obs_ids) > cfg.max_context_tokens:
                return "stop", None
            turn.observation_ids = obs_ids
            ids = ids + out["response_ids"] + obs_ids
            fresh = False
            if role == "executor":
                stats["retries"] += 1
        return "stop", None

    def plan_act(bound: str | None, verified: list[str]):
        async def act(text: str) -> tuple[dict, object]:
            try:
                plan = parse_plan(text, allowed, bound=bound, verified=verified)
            except PlanError as exc:
                stats["plan_errors"] += 1
                return _local(f"Error (invalid_plan): {exc}", "invalid_plan"), None
            stats["plans"] += 1
            return _local(f"plan accepted: {skeleton(plan.nodes)}"), plan
        return act

    async def skill_act(text: str) -> tuple[dict, object]:
        try:
            skill = parse_skill(text, allowed)
        except PlanError as exc:
            stats["plan_errors"] += 1
            return _local(f"Error (invalid_plan): {exc}", "invalid_plan"), None
        stats["skills_bound"] += 1
        return _local(f"skill {skill} bound; tools: {', '.join(allowed[skill])}"), skill

    def node_act(node: Node):
        async def act(text: str) -> tuple[dict, object]:
            try:
                call = extract_call(text)
            except ActionError:
                call = None  # the environment answers the parse error in its own words
            if call is not None and call["name"] != node.tool:
                stats["wrong_tool_calls"] += 1
                return _local(f"Error (wrong_node_tool): node {node.id} calls {node.tool}, not {call['name']}; "
                              f"call {node.tool}.", "wrong_node_tool", call), None
            res = await pool.step(eid, text)
            if res["error"] or res.get("internal_error"):
                return res, None
            if res.get("verdict") == "fail":  # it ran, but the verifier refused it: a failed attempt
                reasons = "; ".join(res.get("verdict_reasons") or []) or "the verifier failed the result"
                return {**res, "observation": f"{res['observation']}\nNot verified: {reasons}"}, None
            if res["done"]:
                traj.answer = res["answer"]
            call = res["tool_call"] or {"name": node.tool, "arguments": {}}
            artifact = (res.get("result") or {}).get("artifact", "")
            return res, Evidence(node.id, call["name"], dict(call.get("arguments") or {}), res["observation"],
                                 artifact if isinstance(artifact, str) else "")
        return act

    async def turns() -> None:
        task_text = await pool.reset(eid, task, cfg.phrasing)
        tries = 1 + opts.max_plan_retries
        status, skill = await attempts(SKILL_SYSTEM, skill_view(task_text, catalogue), "planner", "skill", tries,
                                       skill_act)
        if status != "ok":
            return
        bound = await pool.step(eid, _call_text("open_skill", {"skill": skill}))  # binding: the skill's tools
        if bound.get("internal_error"):
            traj.mark_failed("internal_error", bound["internal_error"], turn=traj.num_turns)
            return
        status, plan = await attempts(PLANNER_SYSTEM, plan_view(task_text, skill, allowed[skill]), "planner", "plan",
                                      tries, plan_act(skill, []))
        if status != "ok":
            return
        traj.plan = [n.tool for n in plan.nodes if n.tool != ANSWER]
        wf = Workflow(plan.skill, list(plan.nodes))
        memory: list[Evidence] = []
        k = 0
        while k < len(wf.nodes):
            node = wf.nodes[k]
            node_of[node.id] = node
            stats["nodes_run"] += 1
            status, got = await attempts(executor_system(openai_schema(TOOLS[node.tool]), node),
                                         executor_view(task_text, wf, k, memory, chars), "executor", node.id,
                                         1 + opts.max_node_retries, node_act(node))
            if status == "stop":
                return
            if status == "ok":
                memory.append(got)
                stats["commits"] += 1
                if traj.answer is not None:
                    return
                k += 1
                continue
            stats["failed_nodes"] += 1
            if stats["repairs"] >= opts.max_repairs:
                return
            verified = [n.id for n in wf.nodes[:k]]
            view = repair_view(task_text, wf, k, allowed[wf.skill], memory, got["observation"], chars)
            status, suffix = await attempts(PLANNER_SYSTEM, view, "planner", f"repair{stats['repairs'] + 1}",
                                            tries, plan_act(wf.skill, verified))
            if status != "ok":
                return
            wf.repair(k, suffix)
            stats["repairs"] += 1

    await play(traj, turns, engine=engine, pool=pool)
    traj.turns += candidates
    stats["retries_per_node"] = stats["retries"] / max(stats["nodes_run"], 1)
    return traj


run_episode.action_formats = ("json",)
run_episode.options_schema = PlannerExecutorOptions
