"""HiRS-Agent VG-HRL rewards (§3, "VG-HRL"): the manager reward and the tiered specialist reward.

Manager (one scalar per trajectory, advantages grouped by task):

    R_mgr = w_route·C_route + w_success·1[correct] − w_length·T / T_max

C_route ∈ [0, 1] is the normalised routing correctness: the k-th manager turn is correct when its
sub-goal family (``turn.subgoal["family"]``) equals the HiRS family of the k-th reference step
(``earthrl.envs.tools.TOOLS[name].family``), divided by max(manager turns, reference steps) so that
both missing and surplus routings lower it. The paper gives the three components but not their
weights; EarthRL's defaults (w_success = 1, w_route = 0.5, w_length = 0.1, T_max = 25) let a
correct answer dominate, give routing a process signal of at most half of it, and keep the length
term a tie-breaker (at most 0.1).

Specialist (one reward per specialist turn, advantages grouped by (task, step index)), tiers:

- Tier 1, hallucinated / out-of-domain tool (unknown tool, no parsable call, or a tool outside the
  family the manager routed to): −1.0
- Tier 2, in-domain but not the reference step's tool: −0.5 + 0.2·R_exec
- Tier 3, the reference step's tool: 0.5 + 0.2·R_exec + 0.3·R̂_args

R_exec = +1 / 0 / −1 for the verifier's pass / uncertain / fail (no verdict: −1 if the turn had
E = 1, else 0). R̂_args = share of the reference step's argument keys whose value matches
(:func:`earthrl.rewards.outcome.argument_match`, numbers within 1 % relative). The k-th specialist
turn is compared with the k-th reference step (none beyond the reference: tier 3 is unreachable).
The routed family is the ``subgoal`` of the latest manager turn before the specialist turn
(or the specialist turn's own ``subgoal`` when it carries one).
"""

from __future__ import annotations

from earthrl.rewards.outcome import answer_correct, argument_match, reference_steps, tool_family
from earthrl.rewards.registry import REWARDS, TURN_REWARDS

EXEC_SCORE = {"pass": 1.0, "uncertain": 0.0, "fail": -1.0}


def routing_correctness(trajectory, task: dict) -> float:
    """C_route ∈ [0, 1]: matched manager routings / max(manager turns, reference steps)."""
    ref_families = [tool_family(s["name"]) for s in reference_steps(task)]
    routed = [(t.subgoal or {}).get("family") for t in trajectory.turns if t.role == "manager"]
    denom = max(len(routed), len(ref_families))
    hits = sum(r is not None and r == f for r, f in zip(routed, ref_families))
    return hits / denom if denom else 0.0


@REWARDS.register("hirs_manager")
def manager_reward(trajectory, task: dict, *, w_route: float = 0.5, w_success: float = 1.0,
                   w_length: float = 0.1, max_turns: int = 25) -> float:
    """HiRS-Agent VG-HRL manager reward (see module doc); pure (sets nothing).

    Args:
        trajectory: a hierarchical-format :class:`~earthrl.rollout.trajectory.Trajectory`.
        task: the TaskSpec as a dict.
        w_route, w_success, w_length: weights of routing, success and length terms.
        max_turns: T_max normalising the length term (all turns, manager and specialist).
    """
    correct = answer_correct(trajectory.answer, task["answer"])
    return (w_route * routing_correctness(trajectory, task) + w_success * float(correct)
            - w_length * trajectory.num_turns / max_turns)


def exec_score(turn) -> float:
    """R_exec ∈ {−1, 0, 1} from the turn's verdict (fail/uncertain/pass); no verdict: −1 if E = 1 else 0."""
    if turn.verdict is None:
        return -1.0 if turn.error else 0.0
    return EXEC_SCORE[turn.verdict]


def specialist_call_reward(turn, routed_family: str | None, reference: dict | None, *,
                           rel_tol: float = 1e-2) -> float:
    """Tiered gating reward of one specialist call (HiRS-Agent VG-HRL, specialist reward).

    Args:
        turn: the specialist :class:`~earthrl.rollout.trajectory.Turn`.
        routed_family: the family the manager routed to ("SPA"|"PRA"|"SAA").
        reference: the reference step ``{"name", "arguments"}`` at this position, or None.
    """
    name = (turn.tool_call or {}).get("name")
    family = tool_family(name)
    if family is None or family != routed_family:
        return -1.0
    r_exec = exec_score(turn)
    if reference is None or name != reference["name"]:
        return -0.5 + 0.2 * r_exec
    _, r_args = argument_match(turn.tool_call.get("arguments"), reference["arguments"], rel_tol=rel_tol)
    return 0.5 + 0.2 * r_exec + 0.3 * r_args


@TURN_REWARDS.register("hirs_specialist")
def specialist_rewards(trajectory, task: dict, *, rel_tol: float = 1e-2) -> list[float]:
    """Per-turn specialist rewards (0.0 on manager/agent turns); pure (sets nothing).

    Returns:
        list[float] of length ``trajectory.num_turns``.
    """
    steps = reference_steps(task)
    out, routed, k = [], None, 0
    for turn in trajectory.turns:
        if turn.role == "manager":
            routed = (turn.subgoal or {}).get("family")
            out.append(0.0)
            continue
        if turn.role != "specialist":
            out.append(0.0)
            continue
        family = (turn.subgoal or {}).get("family") or routed
        out.append(specialist_call_reward(turn, family, steps[k] if k < len(steps) else None, rel_tol=rel_tol))
        k += 1
    return out
