"""The advantage stage: estimators by name, and the one entry point the recipes call.

An estimator maps a :class:`TurnBatch` (the scores, groups and turn facts of a rollout batch as
flat tensors) to one advantage per turn; :func:`token_advantages` builds the batch from the
trajectories and their :class:`~earthrl.rewards.scoring.Scores` (numbers: this module never
calls a reward), runs the estimator named by the spec (registry :data:`ESTIMATORS`, no if/else
over names) and broadcasts the turn advantages onto the response tokens.

Built-ins: ``grpo`` (all seeds; Dr. GRPO with ``norm_by_std: false``), ``grpo_tap``
(RS-Claw-Evolution TAP), ``hierarchical`` (HiRS-Agent VG-HRL) and ``executor_node``
(Earth-Agent-Pro) — the last two in :mod:`earthrl.algorithms.hierarchical` —, and ``gigpo``
(GiGPO, :mod:`earthrl.algorithms.gigpo`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from earthrl.algorithms.broadcast import turn_values_to_tokens
from earthrl.algorithms.grpo import group_index, group_normalise, grpo_advantages
from earthrl.algorithms.registry import ESTIMATORS
from earthrl.algorithms.settings import FromMapping
from earthrl.algorithms.tap import tap_advantages

# the roles of the agent loops: the flat loop's agent, HiRS-Agent's manager and specialists, Earth-Agent-Pro's
# planner and executor (Turn.role)
ROLES = {"agent": 0, "manager": 1, "specialist": 2, "planner": 3, "executor": 4}


@dataclass(frozen=True, kw_only=True)
class AdvantageConfig(FromMapping):
    """Hyper-parameters of the estimators (``algorithm.advantage`` in Hydra).

    Every field is required: the defaults live once, in the config schema
    (``earthrl.launch.config_schema.defaults("algorithm.advantage", **changes)`` gives them).

    Attributes:
        eps: δ added to the group std (RS-Claw-Evolution Eq. for Â_i).
        std_floor: lower bound on a group's std before division.
        norm_by_std: False gives Dr. GRPO (mean-centred only).
        protect_recovery: TAP option: a turn with E = 0 right after an error turn gets
            max(Â, 0) (see :mod:`earthrl.algorithms.tap`).
        step_weight: GiGPO's ω, weight of the step-level (anchor-state) advantage added to the
            episode-level one (Feng et al. 2025, Eq. 8; verl-agent ``step_advantage_w``).
        gamma: GiGPO's γ, discount of the step return Σ_k γ^k r_{t+k} (Eq. 5; verl-agent's
            ``algorithm.gamma``), in [0, 1].
    """

    CONFIG_KEY: ClassVar[str] = "algorithm.advantage"

    eps: float
    std_floor: float
    norm_by_std: bool
    protect_recovery: bool
    step_weight: float
    gamma: float


@dataclass
class TurnBatch:
    """A rollout batch as flat tensors (N trajectories, M turns in trajectory order).

    Attributes:
        reward: (N,) float32 trajectory reward (``Scores.reward``: outcome, MEFR, HiRS manager).
        group: (N,) int64 dense GRPO group index (the G samples of one task).
        valid: (N,) bool, False for faulted trajectories (excluded, advantage 0).
        turn_traj: (M,) int64 trajectory of each turn.
        turn_pos: (M,) int64 position of the turn in its trajectory.
        turn_role_pos: (M,) int64 position among the trajectory's turns of the same role
            (the HiRS specialist step index).
        turn_role: (M,) int64 :data:`ROLES` code.
        turn_error: (M,) bool E(a_t, o_t); turn_prev_error: (M,) bool E of the previous turn.
        turn_reward: (M,) float32 per-turn reward (``Scores.turn_rewards``; 0 where none).
        turn_anchor: (M,) int64 dense id of the turn's anchor state (``Turn.anchor``: equal ids, equal
            states; GiGPO's step groups), −1 where the turn has none.
        turn_node_state: (M,) int64 dense id of the node state a turn was sampled from with others
            (:attr:`~earthrl.rollout.trajectory.Turn.node_state`, per trajectory: Earth-Agent-Pro's node-level
            groups), −1 where the turn has none; None when no turn has one.
        reward_in_turns: True when ``turn_reward`` already holds the trajectory reward (verl's layout:
            every reward sits on a token, the trajectory's on the last token of its last turn, and a
            turn's reward is the sum over its tokens); False (local backend): ``reward`` and
            ``turn_reward`` are separate scores.
    """

    reward: torch.Tensor
    group: torch.Tensor
    valid: torch.Tensor
    turn_traj: torch.Tensor
    turn_pos: torch.Tensor
    turn_role_pos: torch.Tensor
    turn_role: torch.Tensor
    turn_error: torch.Tensor
    turn_prev_error: torch.Tensor
    turn_reward: torch.Tensor
    turn_anchor: torch.Tensor
    turn_node_state: torch.Tensor | None = None
    reward_in_turns: bool = False

    @classmethod
    def from_trajectories(cls, trajs: Sequence, scores) -> TurnBatch:
        """Collect the batch from N :class:`~earthrl.rollout.trajectory.Trajectory` objects (turn
        facts, groups, faults) and their :class:`~earthrl.rewards.scoring.Scores` (rewards).

        Raises:
            ValueError: ``scores`` is not for N trajectories, a trajectory's turn rewards are neither
                empty nor one per turn, or a turn's role is not one of :data:`ROLES`.
        """
        if len(scores.reward) != len(trajs) or len(scores.turn_rewards) != len(trajs):
            raise ValueError(f"scores are for {len(scores.reward)} trajectories, the batch has {len(trajs)}")
        cols: dict[str, list] = {k: [] for k in ("traj", "pos", "role_pos", "role", "err", "prev", "rew", "anchor",
                                                     "state")}
        anchors: dict[str, int] = {}
        states: dict[tuple[int, str], int] = {}
        for i, t in enumerate(trajs):
            tr = scores.turn_rewards[i] or [0.0] * len(t.turns)
            if len(tr) != len(t.turns):
                raise ValueError(f"trajectory {i} ({t.task_id}) has {len(tr)} turn_rewards for {len(t.turns)} turns")
            seen = dict.fromkeys(ROLES.values(), 0)
            prev = False
            for k, (turn, r) in enumerate(zip(t.turns, tr)):
                if turn.role not in ROLES:
                    raise ValueError(f"turn role {turn.role!r} of trajectory {i}: use one of {sorted(ROLES)}")
                code = ROLES[turn.role]
                cols["traj"].append(i)
                cols["pos"].append(k)
                cols["role_pos"].append(seen[code])
                cols["role"].append(code)
                cols["err"].append(bool(turn.error))
                cols["prev"].append(prev)
                cols["rew"].append(float(r))
                cols["anchor"].append(anchors.setdefault(turn.anchor, len(anchors)) if turn.anchor else -1)
                cols["state"].append(states.setdefault((i, turn.node_state), len(states)) if turn.node_state else -1)
                seen[code] += 1
                prev = bool(turn.error)
        long_ = lambda k: torch.tensor(cols[k], dtype=torch.long)  # noqa: E731
        bool_ = lambda k: torch.tensor(cols[k], dtype=torch.bool)  # noqa: E731
        return cls(
            reward=torch.tensor([float(r) for r in scores.reward], dtype=torch.float32),
            group=group_index([t.group for t in trajs]),
            valid=torch.tensor([not t.faulted for t in trajs], dtype=torch.bool),
            turn_traj=long_("traj"), turn_pos=long_("pos"), turn_role_pos=long_("role_pos"),
            turn_role=long_("role"), turn_error=bool_("err"), turn_prev_error=bool_("prev"),
            turn_reward=torch.tensor(cols["rew"], dtype=torch.float32), turn_anchor=long_("anchor"),
            turn_node_state=long_("state") if states else None)


def trajectory_advantages(batch: TurnBatch, cfg: AdvantageConfig) -> torch.Tensor:
    """:func:`~earthrl.algorithms.grpo.grpo_advantages` of the trajectory rewards within task groups;
    (N,) float32, 0 on invalid trajectories (each is its own singleton group).

    Raises:
        ValueError: a reward is NaN or inf.
    """
    n = batch.reward.numel()
    key = torch.where(batch.valid, batch.group, batch.group.max() + 1 + torch.arange(n)) if n else batch.group
    return grpo_advantages(batch.reward, key.tolist(), eps=cfg.eps, std_floor=cfg.std_floor, norm_by_std=cfg.norm_by_std)


def keyed_turn_advantages(batch: TurnBatch, cfg: AdvantageConfig, select: torch.Tensor, step: torch.Tensor,
                          values: torch.Tensor | None = None) -> torch.Tensor:
    """GRPO over per-turn ``values`` (default the per-turn rewards) of the ``select``-ed turns, grouped by
    (task group, ``step``).

    Turns of one step key are never normalised together with another key's (HiRS-Agent:
    specialist advantages grouped by (task, step index); Earth-Agent-Pro: by node; GiGPO: by anchor state).

    Args:
        select: (M,) bool, the turns that take part. step: (M,) int64 step key.
        values: (M,) float, the values normalised (GiGPO: step returns); None: ``batch.turn_reward``.

    Returns:
        (M,) float32, 0 where not selected or the trajectory is invalid.

    Raises:
        ValueError: a value is NaN or inf.
    """
    values = batch.turn_reward if values is None else values
    use = select & batch.valid[batch.turn_traj]
    if not torch.isfinite(values).all():
        raise ValueError("turn rewards contain NaN or inf: fix the turn reward function")
    out = torch.zeros(values.numel(), dtype=torch.float32)
    if use.any():
        g, k = batch.group[batch.turn_traj[use]], step[use]
        k = k - k.min()
        key = torch.unique(g * (k.max() + 1) + k, return_inverse=True)[1]  # dense id of the (group, step) pairs
        out[use] = group_normalise(values[use], key, eps=cfg.eps, std_floor=cfg.std_floor,
                                   norm_by_std=cfg.norm_by_std)
    return out


@ESTIMATORS.register("grpo")
def grpo_estimator(batch: TurnBatch, cfg: AdvantageConfig) -> torch.Tensor:
    """GRPO: the trajectory's :func:`~earthrl.algorithms.grpo.grpo_advantages` on every turn (all seeds'
    baseline; :func:`token_advantages` then broadcasts it onto the turn's tokens). Returns (M,) float32."""
    return trajectory_advantages(batch, cfg)[batch.turn_traj]


@ESTIMATORS.register("grpo_tap")
def grpo_tap_estimator(batch: TurnBatch, cfg: AdvantageConfig) -> torch.Tensor:
    """GRPO + TAP (RS-Claw-Evolution §IV-C): error turns get min(Â_i, 0). Returns (M,) float32."""
    return tap_advantages(grpo_estimator(batch, cfg), batch.turn_error, batch.turn_prev_error,
                          protect_recovery=cfg.protect_recovery)


def token_advantages(trajs: Sequence, scores, spec) -> list[torch.Tensor]:
    """Per-token advantages of a scored rollout batch — the one call a recipe makes.

    Args:
        trajs: N :class:`~earthrl.rollout.trajectory.Trajectory` (read only).
        scores: their :class:`~earthrl.rewards.scoring.Scores`.
        spec: the recipe's :class:`~earthrl.algorithms.spec.AlgorithmSpec` (uses ``estimator``, a
            :data:`ESTIMATORS` name, and ``advantage``, an :class:`AdvantageConfig`).

    Returns:
        N float32 tensors, the i-th of shape (len(trajs[i].token_ids()),): the turn's advantage on
        its response tokens, 0 on prompt/observation tokens; all-zero for faulted trajectories.

    Raises:
        KeyError: unknown estimator name. ValueError: NaN/inf rewards or scores of another batch.
    """
    estimator = ESTIMATORS.lookup(spec.estimator)
    batch = TurnBatch.from_trajectories(trajs, scores)
    turn_adv = estimator(batch, spec.advantage)
    turn_adv = torch.where(batch.valid[batch.turn_traj], turn_adv, torch.zeros_like(turn_adv))
    return turn_values_to_tokens(trajs, turn_adv)
