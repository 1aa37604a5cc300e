"""GiGPO: group-in-group advantages, episode level plus step level on anchor states.

Feng et al. 2025, *Group-in-Group Policy Optimization for LLM Agent Training* (arXiv:2505.10978,
§4; reference code verl-agent ``gigpo/core_gigpo.py``). The advantage of turn t of trajectory i is

    Â_{i,t} = Â^E_i + ω · Â^S_{i,t}

- Â^E_i, the episode-level term (Eq. 3): the trajectory's GRPO advantage within its task group,
  exactly the ``grpo`` estimator (:func:`~earthrl.algorithms.estimators.trajectory_advantages`:
  δ, std floor, ``norm_by_std``). verl-agent computes its statistics over step rows, so a long
  episode weighs more there; here every trajectory counts once, as in GRPO.
- Â^S_{i,t}, the step-level term (Eqs. 5–7): the turn's discounted step return
  G_{i,t} = Σ_{k≥t} γ^{k−t} r_{i,k}, normalised within its step group — the turns of the same
  task group (the G episodes of one task) whose anchor state is equal (``TurnBatch.turn_anchor``:
  the task and the set of verified artifacts by lineage, :mod:`earthrl.envs.core.anchor`). A turn's
  reward r_{i,k} is its per-turn reward plus, on the trajectory's last turn, the trajectory reward, so
  with an outcome reward alone G_{i,t} = γ^{T_i−1−t} · R_i. Turns of one episode that start from
  the same state (an error turn changes no artifact) share a group, as in verl-agent.
  Normalisation is :func:`~earthrl.algorithms.grpo.group_normalise` (one code for every group):
  ``norm_by_std: true`` is verl-agent's ``mean_std_norm``, ``false`` its ``mean_norm``; a
  singleton step group, or one whose returns are all equal, gives 0.

ω = ``step_weight`` (verl-agent ``step_advantage_w`` = 1.0) and γ = ``gamma`` (0.95, verl-agent's
GiGPO runs) are :class:`~earthrl.algorithms.estimators.AdvantageConfig` fields.
"""

from __future__ import annotations

import torch

from earthrl.algorithms.estimators import AdvantageConfig, TurnBatch, keyed_turn_advantages, trajectory_advantages
from earthrl.algorithms.registry import ESTIMATORS


def step_returns(batch: TurnBatch, gamma: float) -> torch.Tensor:
    """Discounted return of every turn within its trajectory (GiGPO Eq. 5).

    G_t = r_t + γ·G_{t+1}, r_t the turn's reward (``turn_reward``) plus the trajectory reward
    (``reward``) on the trajectory's last turn, unless ``batch.reward_in_turns`` says it is there
    already (verl). Vectorised over trajectories: one pass per turn position, backwards.

    Args:
        batch: the turns, in trajectory order (``turn_traj`` non-decreasing, ``turn_pos`` 0, 1, …).
        gamma: γ in [0, 1].

    Returns:
        (M,) float64 returns.
    """
    m = batch.turn_traj.numel()
    if m == 0:
        return torch.zeros(0, dtype=torch.float64)
    last = torch.ones(m, dtype=torch.bool)
    last[:-1] = batch.turn_traj[1:] != batch.turn_traj[:-1]
    r = batch.turn_reward.to(torch.float64)
    if not batch.reward_in_turns:
        r = r + torch.where(last, batch.reward.to(torch.float64)[batch.turn_traj], 0.0)
    g = r.clone()
    for t in range(int(batch.turn_pos.max()) - 1, -1, -1):
        idx = ((batch.turn_pos == t) & ~last).nonzero().flatten()
        g[idx] = r[idx] + gamma * g[idx + 1]
    return g


@ESTIMATORS.register("gigpo")
def gigpo_estimator(batch: TurnBatch, cfg: AdvantageConfig) -> torch.Tensor:
    """GiGPO advantages Â^E_i + ω·Â^S_{i,t} (module doc). Returns (M,) float32, 0 on invalid trajectories.

    Raises:
        ValueError: a turn of a valid trajectory has no anchor state (``turn_anchor`` −1: a trajectory
            recorded before anchors existed, or a verl batch without ``anchor_ids``), ``gamma`` is
            outside [0, 1], or a reward is NaN or inf.
    """
    if not 0.0 <= cfg.gamma <= 1.0:
        raise ValueError(f"algorithm.advantage.gamma={cfg.gamma} must be in [0, 1]")
    valid = batch.valid[batch.turn_traj]
    if (valid & (batch.turn_anchor < 0)).any():
        raise ValueError("estimator gigpo needs each turn's anchor state (Turn.anchor), and a turn has none: "
                         "use trajectories from this EarthRL's agent loop (older records lack anchors)")
    episode = trajectory_advantages(batch, cfg)[batch.turn_traj]
    step = keyed_turn_advantages(batch, cfg, valid, batch.turn_anchor, values=step_returns(batch, cfg.gamma))
    return episode + cfg.step_weight * step
