"""Per-episode agent-behaviour metrics: RS-Claw-Evolution's interaction costs and SimCRAFT's
planning metrics.

Every function takes one :class:`~earthrl.rewards.episode.EpisodeRecord` (and, for the
SimCRAFT plan metrics, the task's reference calls) and returns either a per-episode value or a
``(numerator, denominator)`` pair. :mod:`earthrl.rewards.metrics.compute` aggregates the pairs as a
ratio of sums over episodes (micro average: every turn or call weighs the same), the values as
a plain mean over episodes.

RS-Claw-Evolution (§IV, "Evaluation Metrics", Fig. 4):

- EIR (error interaction rate) = Σ error turns / Σ assistant turns, E(a,o) = 1 per turn.
- Avg Turns = mean assistant turns per episode.
- Action tokens = mean model-generated tokens per episode (Σ ``action_tokens`` of its turns);
  Observation tokens = mean environment-returned tokens per episode.

SimCRAFT (§4.3). The paper states that PSR and AEM "use strict matching and are conservative
lower bounds" and that TSA "is invariant to tool ordering and argument values"; its exact
formulas are not given, so EarthRL uses these episode-level definitions (consistent with the
reported ordering AEM ≤ PSR ≤ TSA):

- PSR (plan success rate): 1 iff the predicted tool-name sequence equals the reference
  sequence exactly (same length, same order).
- TSA (tool-set accuracy): 1 iff the *set* of predicted tool names equals the set of
  reference names (order, repeats and arguments ignored).
- AEM (argument exact match): 1 iff PSR holds and every call's argument dict equals the
  reference call's (``==``).
- Plan PSR / plan TSA (``plan_psr``, ``plan_tsa``): PSR and TSA of the planner's output instead of the executed
  calls, for loops that plan (Earth-Agent-Pro's planner–executor): the tool names of the first valid plan
  (``EpisodeRecord.plan``, ``answer`` left out) against the reference names; an episode whose planner wrote no valid
  plan scores 0. A plan holds no argument values by design, so AEM is only defined on the executed calls (``aem``:
  the executor's filling of the plan).
- Hal.Rate = Σ hallucinating calls / Σ calls, a call hallucinating when its ``error_kind`` is
  ``"unknown_tool"`` or ``"hallucinated_path"`` (a tool that does not exist or a path the
  artifact registry never produced).
- Fmt.Err = Σ turns with ``error_kind == "parse_error"`` / Σ assistant turns (the action
  could not be parsed as a call in the episode's action format). Records without turns
  (Earth-Bench files) have no parse information and are left out.
"""

from __future__ import annotations

from collections.abc import Sequence

from earthrl.rewards.episode import HALLUCINATION_KINDS, EpisodeRecord


def error_turns(rec: EpisodeRecord) -> tuple[int, int]:
    """EIR pair (RS-Claw-Evolution): ``(turns with error=True, assistant turns)``."""
    return sum(bool(t.get("error")) for t in rec.turns), len(rec.turns)


def num_turns(rec: EpisodeRecord) -> int:
    """Assistant turns of the episode (RS-Claw-Evolution Avg Turns, per episode)."""
    return len(rec.turns)


def action_tokens(rec: EpisodeRecord) -> int:
    """Model-generated tokens of the episode: Σ ``turn["action_tokens"]`` (RS-Claw-Evolution Fig. 4)."""
    return sum(int(t.get("action_tokens", 0)) for t in rec.turns)


def observation_tokens(rec: EpisodeRecord) -> int:
    """Environment-returned tokens of the episode: Σ ``turn["observation_tokens"]``."""
    return sum(int(t.get("observation_tokens", 0)) for t in rec.turns)


def plan_success(rec: EpisodeRecord, ref: Sequence[dict]) -> float:
    """SimCRAFT PSR for one episode: 1.0 iff predicted names == reference names, in order."""
    return float([c.get("name") for c in rec.calls] == [c.get("name") for c in ref])


def tool_set_accuracy(rec: EpisodeRecord, ref: Sequence[dict]) -> float:
    """SimCRAFT TSA for one episode: 1.0 iff the set of predicted names == the set of reference names."""
    return float({c.get("name") for c in rec.calls} == {c.get("name") for c in ref})


def argument_exact_match(rec: EpisodeRecord, ref: Sequence[dict]) -> float:
    """SimCRAFT AEM for one episode: 1.0 iff PSR holds and every argument dict equals the reference's."""
    if not plan_success(rec, ref):
        return 0.0
    return float(all(p.get("arguments") == r.get("arguments") for p, r in zip(rec.calls, ref)))


def plan_success_of_plan(rec: EpisodeRecord, ref: Sequence[dict]) -> float:
    """SimCRAFT PSR of the planner's output: 1.0 iff ``rec.plan`` == the reference names, in order (0.0 without a
    valid plan)."""
    return float(list(rec.plan or []) == [c.get("name") for c in ref])


def tool_set_accuracy_of_plan(rec: EpisodeRecord, ref: Sequence[dict]) -> float:
    """SimCRAFT TSA of the planner's output: 1.0 iff the set of ``rec.plan``'s tools == the set of reference names
    (0.0 without a valid plan)."""
    return float(bool(rec.plan) and set(rec.plan) == {c.get("name") for c in ref})


def hallucinated_calls(rec: EpisodeRecord) -> tuple[int, int]:
    """Hal.Rate pair (SimCRAFT): ``(calls with error_kind in HALLUCINATION_KINDS, calls)``."""
    return sum(c.get("error_kind") in HALLUCINATION_KINDS for c in rec.calls), len(rec.calls)


def format_errors(rec: EpisodeRecord) -> tuple[int, int]:
    """Fmt.Err pair (SimCRAFT): ``(turns with error_kind == "parse_error", assistant turns)``."""
    return sum(t.get("error_kind") == "parse_error" for t in rec.turns), len(rec.turns)
