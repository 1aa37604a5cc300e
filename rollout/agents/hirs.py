"""HiRS-Agent's verification-driven manager–specialist hierarchy (HiRS-Agent, "Architecture" and
"Verification"): ``agent=hierarchical``.

The **manager** (the Orchestrator Agent) keeps a structured global state s_t = {x, d, g_t, H_t, C_t} —
the instruction, the inputs (the task's scenes), the current sub-goal, the memory of committed results
and of failure and recovery traces, and the dynamic constraints — and sees that state, rendered by field,
as a fresh context each turn (not a shared chat). Each turn it routes one sub-goal to a specialist family
(``<route>{"family": "SPA|PRA|SAA", "subgoal": …}</route>``) or answers. The **specialist** of the routed
family gets a fresh context of its own: its family's tools (the env's role prompt), the sub-goal, the
inputs and the committed evidence; it writes one tool call, which the env runs (the ``hierarchical``
action format: a tool of another family does not run).

After every specialist step the step verifier's verdict (:mod:`earthrl.envs.core.verifier`: schema
validity, routing consistency, physical/spectral range and nodata checks) drives control:

- ``pass`` commits the result to memory;
- ``uncertain`` triggers a cross-check before committing: ``cross_check="alternative"`` asks the
  specialist for a call that checks the result by another tool path (its own turn), ``"rerun"``
  re-executes the same call (no model turn); a cross-check that passes (``rerun``: the same observation)
  commits, any other outcome is a failure;
- ``fail`` (or an error) is recorded in memory as a failure trace, its reasons become constraints, and the
  manager's next context asks it to replan: repair the call (route the same sub-goal again), route to
  another family, or change the sub-goal. More than ``max_replans`` replans end the episode unanswered.

Switches reproduce the paper's ablation rows: ``verify=false`` commits every result that ran whatever its
verdict (an error still goes back to the manager as in a plain hierarchy); ``structured_state=false``
renders the manager's memory as the raw transcript of every turn instead of the structured state.

Every model turn is a fresh context (:attr:`~earthrl.rollout.trajectory.Turn.context_ids`), so a trajectory
is one sequence per turn; ``env.max_turns`` counts manager and specialist turns together.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from earthrl.rollout.agent_loop import LoopConfig, new_trajectory, play, turn_from
from earthrl.rollout.agent_registry import AGENT_LOOPS
from earthrl.rollout.trajectory import Trajectory

CROSS_CHECKS = ("alternative", "rerun")
_REPLAN = ("Replan: repair the call (route the same sub-goal again with the fix), route it to another family, "
           "or change the sub-goal.")


@dataclass
class HiRSOptions:
    """``agent.options`` of ``agent=hierarchical`` (module doc).

    Attributes:
        verify: the verifier's verdict drives control (off: the paper's "w/o verification" row).
        structured_state: the manager sees s_t by field (off: the raw transcript of every turn).
        cross_check: what an ``uncertain`` verdict triggers: ``alternative`` or ``rerun``.
        max_replans: replans (after a failed step or an invalid manager turn) before the episode ends.
        memory_chars: characters of each result kept in memory (longer ones are cut).
    """

    verify: bool = True
    structured_state: bool = True
    cross_check: str = "alternative"
    max_replans: int = 3
    memory_chars: int = 300

    def check(self) -> None:
        """Raises: ValueError naming the bad option and what it accepts."""
        for key in ("verify", "structured_state"):  # a quoted 'false' is a string: refused, never taken as on
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"{key}={getattr(self, key)!r}: use true or false (unquoted)")
        if self.cross_check not in CROSS_CHECKS:
            raise ValueError(f"cross_check={self.cross_check}: use one of {', '.join(CROSS_CHECKS)}")
        for key in ("max_replans", "memory_chars"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{key}={value}: use a whole number ≥ 0")


@dataclass
class Entry:
    """One memory entry of H_t: a step on sub-goal ``goal`` and what came of it (``outcome``: ``committed``,
    ``cross-checked``, ``fail``, ``error``, ``invalid`` for a manager turn the env refused)."""

    goal: int
    family: str
    subgoal: str
    call: str
    outcome: str
    text: str


@dataclass
class GlobalState:
    """s_t = {x: ``instruction``, d: ``inputs``, g_t: ``subgoal``, H_t: ``memory``, C_t: ``constraints``}, plus
    ``pending`` (the failure the manager must replan around, "" when it continues) and ``transcript`` (every
    turn's text and observation, what ``structured_state=false`` shows instead)."""

    instruction: str
    inputs: list[str]
    subgoal: dict | None = None
    memory: list[Entry] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    pending: str = ""
    transcript: list[str] = field(default_factory=list)

    def committed(self) -> list[Entry]:
        """The entries that hold verified (or, ``verify=false``, unverified but run) results."""
        return [e for e in self.memory if e.outcome in ("committed", "cross-checked")]


def _call_text(res: dict) -> str:
    call = res.get("tool_call")
    return f"{call['name']}({json.dumps(call.get('arguments', {}), sort_keys=True)})" if call else "(no call)"


def _cut(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: max(n - 1, 0)] + "…"


def manager_view(state: GlobalState, opts: HiRSOptions) -> str:
    """The manager's user message: s_t by field (``structured_state``) or the raw transcript, then what it
    must decide now."""
    lines = [f"Instruction: {state.instruction}", f"Inputs: {', '.join(state.inputs) or '(none)'}"]
    if opts.structured_state:
        goal = state.subgoal
        lines.append(f"Current sub-goal: {goal['family']}: {goal['subgoal']}" if goal else "Current sub-goal: none yet")
        lines.append("Memory (committed results):")
        lines += [f"- g{e.goal} [{e.family}] {e.call} -> {e.text} ({e.outcome})" for e in state.committed()] or ["- none"]
        failures = [e for e in state.memory if e not in state.committed()]
        if failures:
            lines.append("Failures and recoveries:")
            lines += [f"- g{e.goal} [{e.family}] {e.call} -> {e.outcome}: {e.text}" for e in failures]
        if state.constraints:
            lines.append("Constraints:")
            lines += [f"- {c}" for c in state.constraints]
    else:
        lines.append("Transcript:")
        lines += state.transcript or ["(empty)"]
    lines.append(f"The last step failed: {state.pending} {_REPLAN}" if state.pending
                 else "Route the next sub-goal, or answer when the memory holds the result.")
    return "\n".join(lines)


def specialist_view(state: GlobalState, opts: HiRSOptions, check: str = "") -> str:
    """The specialist's user message: its sub-goal, the inputs, the committed evidence, and (a cross-check)
    the uncertain result it must check by another tool path."""
    goal = state.subgoal or {"subgoal": ""}
    lines = [f"Sub-goal: {goal['subgoal']}", f"Inputs: {', '.join(state.inputs) or '(none)'}",
             "Artifacts and results so far:"]
    lines += [f"- {e.call} -> {e.text}" for e in state.committed()] or ["- none"]
    if check:
        lines.append(f"Cross-check: {check} Call one tool that checks this result by another path.")
    return "\n".join(lines)


@AGENT_LOOPS.register("hierarchical")
async def run_episode(task: dict, group: str, *, system: str, codec, tokenizer, engine, pool, cfg: LoopConfig,
                      index: int = 0) -> Trajectory:
    """Play one task with the HiRS-Agent hierarchy (module doc); the contract of
    :func:`earthrl.rollout.agent_loop.run_episode`. ``system`` is the env's manager prompt (the
    ``hierarchical`` action format's). Never raises.

    ``traj.agent_stats``: ``routes``, ``commits``, ``cross_checks``, ``cross_checks_passed``, ``replans``,
    ``fails`` (failed specialist steps), ``invalid_manager_turns`` and the specialist steps' verdicts
    ``verdict_pass``/``verdict_uncertain``/``verdict_fail``.
    """
    opts: HiRSOptions = cfg.options_as(HiRSOptions)
    traj = new_trajectory(task, group)
    eid = traj.episode_id
    stats = dict.fromkeys(("routes", "commits", "cross_checks", "cross_checks_passed", "replans", "fails",
                           "invalid_manager_turns", "verdict_pass", "verdict_uncertain", "verdict_fail"), 0)
    traj.agent_stats = stats

    async def model_turn(sys_text: str, user: str, role: str, node: str) -> tuple[dict, str, list[int]] | None:
        """Generate one turn from a fresh context; None when the budget (turns, context tokens) is spent."""
        if traj.num_turns >= cfg.max_turns:
            return None
        ctx = codec.prompt_ids(sys_text, user)
        if len(ctx) > cfg.max_context_tokens:
            return None
        out = await engine.generate(ctx, (index, traj.num_turns), adapter=cfg.adapter(role))
        return out, tokenizer.decode(out["response_ids"], skip_special_tokens=True), ctx

    def record(out: dict, text: str, ctx: list[int], res: dict, role: str, node: str):
        if not traj.turns:
            traj.prompt_ids, ctx = ctx, []
        turn = turn_from(out, text, res, role, cfg, context_ids=ctx, node=node)
        traj.turns.append(turn)
        state.transcript.append(f"[{role}] {_cut(text, opts.memory_chars)} => {_cut(res['observation'], opts.memory_chars)}")
        if res.get("internal_error"):
            traj.mark_failed("internal_error", res["internal_error"], turn=traj.num_turns - 1)
        return turn

    def fail(goal: int, res: dict, outcome: str, why: str) -> bool:
        """Record a failed step and ask the manager to replan; False when no replan is left."""
        route = state.subgoal or {"family": "-", "subgoal": ""}
        state.memory.append(Entry(goal, route["family"], route["subgoal"], _call_text(res), outcome, _cut(why, opts.memory_chars)))
        state.constraints += [r for r in res.get("verdict_reasons") or [] if r not in state.constraints]
        state.pending = f"g{goal} {_call_text(res)}: {_cut(why, opts.memory_chars)}."
        stats["replans"] += 1
        return stats["replans"] <= opts.max_replans

    def commit(goal: int, res: dict, outcome: str) -> None:
        route = state.subgoal
        state.memory.append(Entry(goal, route["family"], route["subgoal"], _call_text(res), outcome,
                                  _cut(res["observation"].split("\nManager:")[0], opts.memory_chars)))
        state.pending = ""
        stats["commits"] += 1

    async def cross_check(goal: int, res: dict, role_prompt: str, route_text: str, call_text: str) -> dict | None:
        """The cross-check's step result (None: the budget ended it)."""
        stats["cross_checks"] += 1
        reasons = "; ".join(res.get("verdict_reasons") or []) or "uncertain"
        if opts.cross_check == "rerun":  # the same route and call again, no model turn
            await pool.step(eid, route_text)
            again = await pool.step(eid, call_text)
            same = again["observation"] == res["observation"] and not again["error"] and again.get("verdict") != "fail"
            return {**again, "verdict": "pass" if same else "fail",
                    "verdict_reasons": [] if same else [f"re-execution gave another result ({reasons})"]}
        await pool.step(eid, route_text)  # the env back in the specialist's phase for the checking call
        got = await model_turn(role_prompt, specialist_view(state, opts, f"{_call_text(res)} is uncertain: {reasons}."),
                               "specialist", f"g{goal}/check")
        if got is None:
            return None
        out, text, ctx = got
        checked = await pool.step(eid, text)
        record(out, text, ctx, checked, "specialist", f"g{goal}/check")
        return checked

    async def turns() -> None:
        nonlocal state
        user = await pool.reset(eid, task, cfg.phrasing)
        state = GlobalState(instruction=user, inputs=list(task.get("data", [])))
        goal = 0
        while traj.failure is None:
            got = await model_turn(system, manager_view(state, opts), "manager", f"g{goal + 1}")
            if got is None:
                return
            out, text, ctx = got
            res = await pool.step(eid, text)
            node = "answer" if res["done"] else f"g{goal + 1}"
            record(out, text, ctx, res, "manager", node)
            if traj.failure is not None:
                return
            if res["done"]:
                traj.answer = res["answer"]
                return
            if res["error"] or not res.get("subgoal"):  # an invalid manager turn: it decides again
                stats["invalid_manager_turns"] += 1
                if not fail(goal, res, "invalid", res["observation"]):
                    return
                continue
            goal += 1
            stats["routes"] += 1
            state.subgoal = res["subgoal"]
            role_prompt = res["observation"]
            got = await model_turn(role_prompt, specialist_view(state, opts), "specialist", f"g{goal}")
            if got is None:
                return
            out, call_text, ctx = got
            step = await pool.step(eid, call_text)
            record(out, call_text, ctx, step, "specialist", f"g{goal}")
            if traj.failure is not None:
                return
            verdict = "fail" if step["error"] else step.get("verdict") or "pass"
            stats[f"verdict_{verdict}"] += 1
            if not opts.verify:  # the ablation: every result that ran is committed, an error goes back as is
                if step["error"]:
                    stats["fails"] += 1
                    if not fail(goal, step, "error", step["observation"]):
                        return
                else:
                    commit(goal, step, "committed")
                continue
            if verdict == "uncertain":
                checked = await cross_check(goal, step, role_prompt, text, call_text)
                if checked is None or traj.failure is not None:
                    return
                if not checked["error"] and checked.get("verdict") != "fail" and checked.get("verdict") != "uncertain":
                    stats["cross_checks_passed"] += 1
                    commit(goal, step, "cross-checked")
                    continue
                step, verdict = checked, "fail"
            if verdict == "fail":
                stats["fails"] += 1
                why = step["observation"] if step["error"] else "; ".join(step.get("verdict_reasons") or [])
                if not fail(goal, step, "error" if step["error"] else "fail", why):
                    return
                continue
            commit(goal, step, "committed")

    state = GlobalState(instruction="", inputs=[])
    return await play(traj, turns, engine=engine, pool=pool)


run_episode.action_formats = ("hierarchical",)
run_episode.options_schema = HiRSOptions
run_episode.roles = ("manager", "specialist")  # the roles whose turns it generates (agent.adapters)
