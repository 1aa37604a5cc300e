"""One algorithm spec per recipe: which reward, turn reward, estimator and loss a run uses, and the
extra inputs those need.

:class:`AlgorithmSpec` is built once from the ``algorithm`` config (``conf/algorithm/*.yaml``, as a
plain mapping: no Hydra here) and read by every stage of a step: :func:`earthrl.rewards.scoring.score`
(reward, turn reward), :func:`earthrl.algorithms.estimators.token_advantages` (estimator, advantage
config) and the learner (loss, :attr:`AlgorithmSpec.loss_inputs`). The verl plugin asks the same
tables (:data:`ESTIMATOR_INPUTS`, :data:`LOSS_INPUTS`) which tensors its calls must carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any

from earthrl.algorithms.estimators import AdvantageConfig
from earthrl.algorithms.policy_loss import PolicyLossConfig
from earthrl.algorithms.registry import ESTIMATORS, POLICY_LOSSES
from earthrl.algorithms.rollout_correction import RolloutCorrection
from earthrl.rewards.registry import REWARDS, TURN_REWARDS

ESTIMATOR_INPUTS: dict[str, tuple[str, ...]] = {"grpo_tap": ("error_mask",), "hierarchical": ("role_mask",),
                                                "gigpo": ("anchor_ids",)}
"""(B, T) tensors an estimator needs beyond rewards and the response mask when it runs on padded
tensors (verl): ``error_mask`` 1 on tokens of turns with E = 1, ``role_mask`` 1 on manager tokens,
``anchor_ids`` int64 the dense id of the turn's anchor state on its tokens (−1 elsewhere).
(The local backend reads the same facts from the trajectories' turns.)"""

LOSS_INPUTS: dict[str, tuple[str, ...]] = {"mixed_role": ("role_mask",)}
"""(B, T) tensors a policy loss needs beyond logprobs, advantages and the response mask."""


@dataclass(frozen=True, kw_only=True)
class AlgorithmSpec:
    """The names and settings of one recipe (``algorithm=grpo``, ``mefr_tap``, ``vg_hrl``, …).

    Every field is required: build it with :meth:`from_config` from the ``algorithm`` config, whose
    schema holds the defaults (from Python:
    ``AlgorithmSpec.from_config(earthrl.launch.config_schema.defaults("algorithm", name=..., **changes))``).

    Attributes:
        name: the recipe's name (``algorithm.name``).
        reward, reward_kwargs: trajectory reward (:data:`~earthrl.rewards.registry.REWARDS` name or
            ``module:function``) and its keyword arguments.
        turn_reward, turn_reward_kwargs: per-turn reward (:data:`~earthrl.rewards.registry.TURN_REWARDS`)
            or None, and its keyword arguments.
        estimator: advantage estimator (:data:`~earthrl.algorithms.registry.ESTIMATORS`).
        advantage: the estimator's hyper-parameters.
        loss: the policy loss's name (``loss.name``, :data:`~earthrl.algorithms.registry.POLICY_LOSSES`)
            and hyper-parameters.
        action_format: the ``env.action_format`` the recipe needs, or None (any).
        correction: the rollout/learner mismatch correction (``algorithm.rollout_correction``), or None when
            the mapping has none (no correction).
    """

    name: str
    reward: str
    reward_kwargs: Mapping
    turn_reward: str | None
    turn_reward_kwargs: Mapping
    estimator: str
    advantage: AdvantageConfig
    loss: PolicyLossConfig
    action_format: str | None
    correction: RolloutCorrection | None

    @property
    def advantage_inputs(self) -> tuple[str, ...]:
        """Extra (B, T) tensors the estimator needs on a tensor backend (:data:`ESTIMATOR_INPUTS`)."""
        return ESTIMATOR_INPUTS.get(self.estimator, ())

    @property
    def loss_inputs(self) -> tuple[str, ...]:
        """Extra (B, T) tensors the policy loss needs (:data:`LOSS_INPUTS`); the learner builds only these."""
        return LOSS_INPUTS.get(self.loss.name, ())

    @classmethod
    def from_config(cls, alg: Mapping | Any) -> AlgorithmSpec:
        """Build from the whole ``algorithm`` config: a plain mapping (``OmegaConf.to_container``) or its
        typed settings (``earthrl.launch.config_schema.to_settings(cfg.algorithm)``, a dataclass).

        Raises:
            ValueError: a key the spec reads is missing, an unknown or missing key under ``advantage``,
                ``policy_loss`` or ``rollout_correction`` (the message names them), or a bad ``rollout_correction``
                value.
        """
        alg = asdict(alg) if is_dataclass(alg) else dict(alg)
        keys = ("name", "reward", "reward_kwargs", "turn_reward", "turn_reward_kwargs", "estimator", "advantage",
                "policy_loss", "action_format", "rollout_correction")
        missing = [k for k in keys if k not in alg]
        if missing:
            raise ValueError(f"the algorithm config is missing {missing}; pass the whole config "
                             "(from Python: earthrl.launch.config_schema.defaults('algorithm', name=...))")
        return cls(name=str(alg["name"]), reward=str(alg["reward"]), reward_kwargs=dict(alg["reward_kwargs"] or {}),
                   turn_reward=alg["turn_reward"] or None, turn_reward_kwargs=dict(alg["turn_reward_kwargs"] or {}),
                   estimator=str(alg["estimator"]), advantage=AdvantageConfig.from_mapping(alg["advantage"]),
                   loss=PolicyLossConfig.from_mapping(alg["policy_loss"]), action_format=alg["action_format"] or None,
                   correction=RolloutCorrection.from_mapping(alg["rollout_correction"]))

    def check(self, env_action_format: str) -> None:
        """Resolve every registered name and the action format.

        Raises:
            ValueError: one line naming the ``algorithm.`` field and the fix (an unknown name lists
                the registered ones).
        """
        if self.action_format and self.action_format != env_action_format:
            raise ValueError(f"algorithm={self.name} needs env.action_format={self.action_format} "
                             f"(got {env_action_format}): add env={self.action_format}")
        checks = [("reward", self.reward, REWARDS), ("estimator", self.estimator, ESTIMATORS),
                  ("policy_loss.name", self.loss.name, POLICY_LOSSES)]
        if self.turn_reward:
            checks.append(("turn_reward", self.turn_reward, TURN_REWARDS))
        for key, name, registry in checks:
            try:
                registry.lookup(name)
            except KeyError as exc:
                raise ValueError(f"algorithm.{key}={name}: {exc.args[0]}") from None
