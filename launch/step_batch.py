"""One step's batch of the local GRPO recipe and what the log stage records of it: :class:`StepBatch` (the
sampling stage's result, which the update and log stages take), :func:`step_metrics` (the step's scalar
metrics, under the names both backends share, :mod:`earthrl.rollout.step_accounting`) and
:func:`dump_rollouts` (the step's trajectories in rollouts.jsonl)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from earthrl.rewards.scoring import Scores
from earthrl.rollout.run_logger import LOGGED_AS
from earthrl.rollout.step_accounting import TOKENS_PER_S_PER_GPU, by_skill, local_accounting


@dataclass(frozen=True)
class StepBatch:
    """One step's sampled and scored trajectories (:meth:`LocalGRPORecipe.sample_batch`): what the update
    and the log stages take."""

    trajs: list  # the trajectories of every sampling round, in order (group_size per task)
    scores: Scores  # one entry per trajectory
    keep: list[int]  # indices into trajs of those the update uses (all of them without group filtering)
    filter_metrics: dict[str, float]  # filter/kept_groups, …_all_correct_groups, …_all_wrong_groups, filter/rounds
    #                                   with algorithm.filter_groups.enabled; else {}
    engine_stats: dict  # the batching client's stats summed over the rounds (generate_s, generated_tokens, …)
    score_s: float  # seconds spent scoring, part of the sampling's wall time


def step_metrics(batch: StepBatch, advantages: list[torch.Tensor], loss_m: dict, times: dict[str, float],
                 skill_of: dict[str, str] | None = None) -> dict:
    """Scalar metrics of one step (reward, accuracy, error-turn rate, turns, speed, and the time split
    under the names both backends share, :mod:`earthrl.rollout.step_accounting`); ``times``: seconds of
    ``rollout`` (scoring excluded), ``reward`` (scoring + advantages), ``update`` (learner only),
    ``weight_sync`` (LoRA push) and the whole ``step``; ``skill_of``: task id → skill, for the per-skill
    reward and accuracy (:func:`~earthrl.rollout.step_accounting.by_skill`; a task not in it counts as
    skill ``"?"``)."""
    trajs, scores, engine_stats = batch.trajs, batch.scores, batch.engine_stats
    kept = [i for i, t in enumerate(trajs) if not t.faulted]
    agent = [trajs[i] for i in kept]
    agent_rewards = torch.tensor([scores.reward[i] for i in kept]) if agent else torch.zeros(1)
    gen_s = engine_stats["generate_s"]
    turns = sum(t.num_turns for t in agent)
    turn_rewards = [r for i in kept for r in scores.turn_rewards[i]]
    groups = {t.group for t in trajs}
    signal = {trajs[i].group for i, a in enumerate(advantages) if bool(a.abs().sum() > 0)}
    accounting = local_accounting(times, engine_stats["generated_tokens"], gen_s)
    return {
        "advantage/groups": float(len(groups)),
        "advantage/nonzero_groups": float(len(signal)),
        "reward/mean": float(agent_rewards.mean()),
        "reward/std": float(agent_rewards.std(unbiased=False)),
        **({"reward/turn_mean": sum(turn_rewards) / len(turn_rewards)} if turn_rewards else {}),
        "advantage/abs_mean": sum(float(a.abs().sum()) for a in advantages)
        / max(sum(t.generated_tokens for t in agent), 1),
        "eval/accuracy": sum(scores.correct[i] for i in kept) / max(len(agent), 1),
        "rollout/answered": sum(t.answer is not None for t in agent) / max(len(agent), 1),
        "rollout/error_turn_rate": sum(t.num_error_turns for t in agent) / max(turns, 1),
        "rollout/mean_turns": turns / max(len(agent), 1),
        "rollout/faulted": float(len(trajs) - len(agent)),
        **{name: loss_m.pop(k) for k, name in LOGGED_AS.items() if k in loss_m},  # rollout/logprob_diff, rollout_corr/*
        "rollout/sequence_tokens_mean": sum(len(t.token_ids()) for t in agent) / max(len(agent), 1),
        **loop_metrics(agent),
        **{f"engine/{k}": v for k, v in engine_stats.items() if k != "generate_s"},
        "perf/gen_tokens_per_s": accounting[TOKENS_PER_S_PER_GPU],  # one engine process
        **accounting,
        **{f"loss/{k}": v for k, v in loss_m.items()},
        **by_skill([(skill_of or {}).get(t.task_id, "?") for t in agent], [scores.reward[i] for i in kept],
                   [float(scores.correct[i]) for i in kept]),
    }

def loop_metrics(trajs: list) -> dict[str, float]:
    """Per-role and agent-loop metrics of a multi-role loop's trajectories, means per trajectory:
    ``rollout/tokens/<role>`` (generated tokens of the role's turns) and ``rollout/loop/<count>`` (the loop's
    ``agent_stats``: HiRS-Agent's routes and replans, Earth-Agent-Pro's repairs and retries per node, …);
    {} for the flat loop (one role ``agent``, no counts)."""
    roles = sorted({u.role for t in trajs for u in t.turns})
    counts = sorted({k for t in trajs for k in t.agent_stats})
    if set(roles) <= {"agent"} and not counts:
        return {}
    n = max(len(trajs), 1)
    out = {f"rollout/tokens/{r}": sum(len(u.response_ids) for t in trajs for u in t.turns if u.role == r) / n
           for r in roles}
    return out | {f"rollout/loop/{k}": sum(float(t.agent_stats.get(k, 0)) for t in trajs) / n for k in counts}


def turn_advantages(traj, advantage: torch.Tensor) -> list[float | None]:
    """The advantage of each turn of ``traj`` (in :attr:`Trajectory.turns` order): the value on the turn's first
    response token, which every token of the turn shares (:func:`earthrl.algorithms.estimators.token_advantages`
    spreads one value per turn over its tokens); None for a turn without response tokens."""
    return [float(advantage[a]) if b > a else None for a, b in traj.turn_spans()]


def dump_rollouts(path: Path, step: int, batch: StepBatch, advantages: list[torch.Tensor] | None = None) -> None:
    """Append the step's trajectories (text, tool calls, each turn's role, node and adapter, the loop's
    ``agent_stats``) with their scores to ``path`` (the run's rollouts.jsonl); with ``advantages`` (the step's
    per-token advantages, aligned with ``batch.trajs``) each turn records its ``advantage`` too."""
    scores = batch.scores
    with path.open("a") as f:
        for i, t in enumerate(batch.trajs):
            adv = turn_advantages(t, advantages[i]) if advantages is not None else [None] * len(t.turns)
            f.write(json.dumps({"step": step, "task_id": t.task_id, "episode_id": t.episode_id, "reward": scores.reward[i],
                                "correct": scores.correct[i], "answer": t.answer, "faulted": t.faulted,
                                "failure": t.failure, "turn_rewards": scores.turn_rewards[i], "record": t.record,
                                "agent_stats": t.agent_stats,
                                "turns": [{"response": u.response_text, "observation": u.observation, "error": u.error,
                                           "error_kind": u.error_kind, "tool_call": u.tool_call, "role": u.role,
                                           "node": u.node, "adapter": u.adapter, "subgoal": u.subgoal,
                                           "verdict": u.verdict, "anchor": u.anchor, "candidate": u.candidate,
                                           "node_state": u.node_state, "verdict_reasons": u.verdict_reasons,
                                           "tool_calls": u.tool_calls, "advantage": a}
                                          for u, a in zip(t.turns, adv)]}) + "\n")


def read_rollouts(path: Path) -> list[dict]:
    """The lines :func:`dump_rollouts` wrote to ``path``, in order; a torn last line (a write cut by a kill) is
    dropped.

    Raises:
        ValueError: a line before the last that is not JSON (names the file and line).
    """
    lines = path.read_text(errors="replace").splitlines()
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if n == len(lines):
                break
            raise ValueError(f"{path}:{n} is not JSON; fix or delete that line") from None
    return out
