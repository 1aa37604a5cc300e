"""``algorithm``: the RL algorithm (conf/algorithm/<name>.yaml picks one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from earthrl.launch.config_schema.rules import setting

KL_ESTIMATORS = ("k1", "kl", "k2", "mse", "k3", "low_var_kl", "abs")
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum")


@dataclass
class SamplingConfig:
    """Generation settings of a rollout."""

    temperature: float = setting(0.5, "sampling temperature (0: greedy); 0.5 for training: a 0.5B model after the "
                                      "SFT warm start wrote 56-73% error turns at 0.8 (malformed or several calls a "
                                      "turn) and no group of make train had a correct sample", range=(0, None))
    top_p: float = setting(1.0, "nucleus sampling: the smallest token set with this probability mass",
                           range=(0, 1), lo_open=True)
    max_new_tokens: int = setting("${env.max_action_tokens}", "tokens generated per turn at most (default: the "
                                  "suite's env.max_action_tokens)", range=(1, None))


@dataclass
class AdvantageConfig:
    """Group-normalised advantages."""

    eps: float = setting(1.0e-6, "δ added to the group's std before dividing", range=(0, None), lo_open=True)
    std_floor: float = setting(1.0e-2, "the group's std is at least this", range=(0, None))
    norm_by_std: bool = setting(True, "divide by the group's std (false: Dr. GRPO)")
    protect_recovery: bool = setting(False, "TAP only: the turn right after an error keeps a non-negative advantage")
    step_weight: float = setting(1.0, "GiGPO only: ω, weight of the step-level advantage (turns grouped by anchor "
                                      "state) added to the episode-level one", range=(0, None))
    gamma: float = setting(0.95, "GiGPO only: γ, discount of a turn's step return (γ^k × the reward k turns "
                                 "later)", range=(0, 1))


@dataclass
class PolicyLossConfig:
    """The policy loss (algorithms.registry.POLICY_LOSSES)."""

    name: str = setting("ppo_clip_kl", "ppo_clip_kl | mixed_role")
    clip_ratio_low: float = setting(0.2, "PPO clip below 1 (ratio ≥ 1 - low)", range=(0, 0.99))
    clip_ratio_high: float = setting(0.2, "PPO clip above 1 (ratio ≤ 1 + high)", range=(0, None))
    kl_coef: float = setting(0.01, "weight of the KL penalty to the adapter-free base", range=(0, None))
    kl_estimator: str = setting("low_var_kl", "KL estimator", choices=KL_ESTIMATORS)
    loss_agg_mode: str = setting("token-mean", "how token losses are averaged", choices=LOSS_AGG_MODES)
    manager_weight: float = setting(0.5, "λ of mixed_role: λ·L_manager + (1-λ)·L_specialist (HiRS VG-HRL)",
                                    range=(0, 1))


@dataclass
class RolloutCorrectionConfig:
    """Rollout/learner mismatch correction (verl's algorithm.rollout_correction, decoupled mode): importance
    weights r = π_old/π_rollout on the policy-gradient term, and sequences whose ratio leaves a band dropped."""

    weights: str = setting("token", "token: w_t = min(r_t, cap) on each token (truncated importance sampling, Yao et al. "
                                    "2025); sequence: w = min(∏_t r_t, cap) on every token of the sequence; none: no weights "
                                    "(verl rollout_is)", choices=("token", "sequence", "none"))
    cap: float = setting(2.0, "C: weights above it are cut to it (verl rollout_is_threshold)", range=(1, None))
    mask: str = setting("none", "drop a whole sequence (from the policy-gradient and KL terms) whose ratio leaves "
                               "[mask_lower, mask_upper]; sequence: the ratio ∏_t r_t (verl rollout_rs=seq_sum_k1); "
                               "geometric: its geometric mean (seq_mean_k1); none: no sequence dropped",
                        choices=("none", "sequence", "geometric"))
    mask_lower: float = setting(0.5, "the band's lower end (a ratio)", range=(0, 1), lo_open=True)
    mask_upper: float = setting(2.0, "the band's upper end (a ratio)", range=(1, None))


@dataclass
class FilterGroupsConfig:
    """DAPO dynamic sampling, decided on the outcome (correct), never a shaped reward."""

    enabled: bool = setting(False, "groups whose samples are all correct or all wrong leave the update")
    max_rounds: int = setting(3, "rollout rounds per step at most: fresh groups replace dropped ones until "
                                 "tasks.tasks_per_step are kept", range=(1, None))


@dataclass
class AlgorithmConfig:
    """Schema of conf/algorithm/*.yaml. The turns per episode are ``env.max_turns`` (an algorithm that
    needs another number sets it in its preset)."""

    name: str = setting(MISSING, "the algorithm's name (part of the experiment name)")
    group_size: int = setting(4, "G: trajectories per task (G = 1 gives every group-normalised advantage 0)",
                              range=(2, None))
    action_format: str | None = setting(None, "the env.action_format the algorithm needs (null: any)")
    estimator: str = setting("grpo", "advantage estimator (algorithms.registry.ESTIMATORS): grpo | grpo_tap | "
                                     "hierarchical | executor_node | gigpo")
    reward: str = setting("outcome", "trajectory reward (rewards.registry.REWARDS) or module:function")
    reward_kwargs: dict[str, Any] = setting({}, "keyword arguments of the reward")
    turn_reward: str | None = setting(None, "per-turn reward (hirs_specialist | executor_tiered) or null")
    turn_reward_kwargs: dict[str, Any] = setting({}, "keyword arguments of the turn reward")
    lora: dict[str, Any] = setting({}, "overrides of model.lora for this algorithm (e.g. rank, alpha)")
    advantage: AdvantageConfig = setting(factory=AdvantageConfig, doc="group-normalised advantages")
    policy_loss: PolicyLossConfig = setting(factory=PolicyLossConfig, doc="the policy loss")
    lr: float = setting(5.0e-5, "learning rate of the adapter (AdamW)", range=(0, None), lo_open=True)
    weight_decay: float = setting(0.0, "AdamW weight decay", range=(0, None))
    grad_clip: float = setting(1.0, "gradient norm clip", range=(0, None), lo_open=True)
    ppo_epochs: int = setting(1, "passes over a step's rollouts", range=(1, None))
    filter_groups: FilterGroupsConfig = setting(factory=FilterGroupsConfig, doc="DAPO dynamic sampling")
    rollout_correction: RolloutCorrectionConfig = setting(factory=RolloutCorrectionConfig,
                                                          doc="rollout/learner mismatch correction (TIS)")
    micro_batch_size: int = setting(2, "sequences per forward/backward", range=(1, None))
    sampling: SamplingConfig = setting(factory=SamplingConfig, doc="generation settings of the training rollouts")
