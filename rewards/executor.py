"""Earth-Agent-Pro executor reward (node-level GRPO of the executor adapter).

The article (§ "执行器 GRPO") gives three tiers: broken format (JSON that does not parse) −2,
schema violation −1, otherwise a positive reward graded by how well the keys and values match the
reference state. EarthRL defines, for the k-th executor turn against the k-th reference step:

- ``error_kind == "parse_error"`` → ``format_penalty`` (−2);
- ``error_kind in ("schema_error", "unknown_tool")`` → ``schema_penalty`` (−1);
- otherwise ``w_keys·K + w_values·V`` ∈ [0, 1], K = share of the reference argument keys present,
  V = share whose value matches (numbers within ``rel_tol``); both 0 when the turn called a
  different tool than the reference step, or when there is no reference step at this position.

A runtime error of a well-formed, schema-valid call (a tool exception) is still graded by the
match: its arguments were legal, and the exception is the environment's state, not the format.

In a planner–executor trajectory (``agent=planner_executor``: turns with role ``executor``) the turns do not
line up with the reference steps (a plan turn, retries, repairs): each executor turn is graded against the
reference steps of the tool it called, the best match among them (none: 0), and the planner's turns get 0.
A call of another tool than its workflow node's (``wrong_node_tool``: it does not run) gets 0, as a call of
another tool than the reference step does.
"""

from __future__ import annotations

from earthrl.rewards.outcome import argument_match, reference_steps
from earthrl.rewards.registry import TURN_REWARDS

SCHEMA_KINDS = ("schema_error", "unknown_tool")


def executor_call_reward(turn, reference: dict | None, *, format_penalty: float = -2.0,
                         schema_penalty: float = -1.0, w_keys: float = 0.5, w_values: float = 0.5,
                         rel_tol: float = 1e-2) -> float:
    """Tiered reward of one executor turn (Earth-Agent-Pro executor GRPO); see module doc."""
    if turn.error_kind == "parse_error":
        return format_penalty
    if turn.error_kind in SCHEMA_KINDS:
        return schema_penalty
    call = turn.tool_call or {}
    if reference is None or turn.error_kind == "wrong_node_tool" or call.get("name") != reference["name"]:
        return 0.0
    keys, values = argument_match(call.get("arguments"), reference["arguments"], rel_tol=rel_tol)
    return w_keys * keys + w_values * values


@TURN_REWARDS.register("executor_tiered")
def executor_rewards(trajectory, task: dict, **kwargs) -> list[float]:
    """Per-turn executor rewards, the k-th turn against the k-th reference step (a planner–executor
    trajectory: each executor turn against its tool's reference steps, module doc); pure (sets nothing).
    ``kwargs`` go to :func:`executor_call_reward`.

    Returns:
        list[float] of length ``trajectory.num_turns``.
    """
    steps = reference_steps(task)
    if any(t.role == "executor" for t in trajectory.turns):  # by tool, not by position (module doc)
        return [max(executor_call_reward(t, s, **kwargs)
                    for s in [s for s in steps if s["name"] == (t.tool_call or {}).get("name")] or [None])
                if t.role == "executor" else 0.0 for t in trajectory.turns]
    return [executor_call_reward(t, steps[k] if k < len(steps) else None, **kwargs)
            for k, t in enumerate(trajectory.turns)]
