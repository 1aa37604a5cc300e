"""Register EarthRL's estimators and policy losses in verl's registries (backend=verl).

Name this module in ``VERL_USE_EXTERNAL_MODULES=earthrl.algorithms.verl_plugin``: verl 0.9.1's
``verl/__init__.py`` imports every module listed there (comma-separated) on ``import verl``, so
every Ray worker that imports verl registers them too. Names get an ``earthrl_`` prefix so they
never collide with verl's own ("grpo" is verl's): ``earthrl_grpo``, ``earthrl_grpo_tap``,
``earthrl_hierarchical``, ``earthrl_executor_node``; losses ``earthrl_ppo_clip_kl``,
``earthrl_mixed_role``. Select them with ``algorithm.adv_estimator=earthrl_grpo_tap`` and
``actor_rollout_ref.actor.policy_loss.loss_mode=earthrl_ppo_clip_kl``.

Adaptation to verl's tensor interface (``core_algos.compute_advantage`` passes
``token_level_rewards`` (B, T), ``response_mask`` (B, T), ``index`` (B,) uid array, ``config``):

- turns are the maximal runs of 1 in ``response_mask`` (verl's multi-turn layout: 1 on generated
  tokens, 0 on tool observations);
- the trajectory reward is the row sum of ``token_level_rewards``; a turn's reward is the sum over
  its run (EarthRL's verl reward manager writes each per-turn reward on the turn's last token);
- the extra (B, T) inputs come from the algorithm spec's tables
  (:data:`earthrl.algorithms.spec.ESTIMATOR_INPUTS`, :data:`~earthrl.algorithms.spec.LOSS_INPUTS`):
  ``grpo_tap`` needs ``error_mask`` {0,1} (1 on the tokens of turns with E = 1), ``hierarchical``
  needs ``role_mask`` (1 on manager tokens; the manager reward is then the row sum over
  non-specialist turns), ``gigpo`` needs ``anchor_ids`` (the dense id of the turn's anchor state on
  its tokens, −1 elsewhere; the trajectory reward on the last token is then part of the last
  turn's step reward), the ``mixed_role`` loss needs ``role_mask``. verl 0.9.1's trainer does not
  forward such keys: the EarthRL verl trainer must add them to ``adv_kwargs`` / the loss call
  (``AlgorithmSpec.advantage_inputs`` / ``loss_inputs`` list them); without them these raise
  ValueError instead of silently running plain GRPO. EarthRL's verl run installs
  :func:`install_trainer_hook`, which wraps verl's ``compute_advantage``: for an ``earthrl_*``
  estimator it builds the masks from the rows' agent-loop ``extra_fields``
  (:func:`batch_inputs`: ``error_mask``, ``role_mask``, ``anchor_ids``, ``valid``, and ``token_rewards``
  with each turn's reward on the turn's last token) and hands them to the estimator through
  :data:`BATCH_INPUTS`.
- the settings are the run's: an estimator reads ``algorithm.advantage`` from verl's
  ``algorithm.earthrl_advantage`` (:data:`ADVANTAGE_KEY`; verl hands its ``algorithm`` config to every
  estimator), a loss reads ``algorithm.policy_loss`` from the :data:`POLICY_LOSS_ENV` variable of every
  Ray worker (verl's actor config has no place for it); ``earthrl train backend=verl`` writes both
  (``earthrl.launch.verl_config``), and without them the adapters raise ValueError rather than run with
  settings of their own.
- KL to the reference is verl's own term (``actor.use_kl_loss``), so the registered losses use
  ``kl_coef = 0``; verl's ``rollout_is_weights`` (≥ 0; ``algorithm.rollout_correction``, computed by verl's
  trainer from π_old and the rollout's logprobs) go to the loss as ``is_weights``: they multiply the clipped
  surrogate per token, as in verl's own ``compute_policy_loss_vanilla``. The sequences verl's rejection
  sampling drops arrive with their ``response_mask`` already 0.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from contextvars import ContextVar

import torch
from verl.trainer.ppo.core_algos import (
    ADV_ESTIMATOR_REGISTRY,
    POLICY_LOSS_REGISTRY,
    register_adv_est,
    register_policy_loss,
)

from earthrl.algorithms.broadcast import turn_runs
from earthrl.algorithms.estimators import ROLES, AdvantageConfig, TurnBatch
from earthrl.algorithms.grpo import group_index
from earthrl.algorithms.policy_loss import PolicyLossConfig
from earthrl.algorithms.registry import ESTIMATORS, POLICY_LOSSES
from earthrl.algorithms.spec import ESTIMATOR_INPUTS, LOSS_INPUTS

PREFIX = "earthrl_"

ADVANTAGE_KEY = "earthrl_advantage"
"""The key of verl's ``algorithm`` config that holds the run's ``algorithm.advantage`` settings (written by
``earthrl train backend=verl``; read by :func:`run_advantage`)."""

POLICY_LOSS_ENV = "EARTHRL_POLICY_LOSS"
"""The environment variable (JSON) that holds the run's ``algorithm.policy_loss`` settings in every Ray
worker (verl's actor config has no place for them; ``earthrl train backend=verl`` sets it in verl's
``ray_kwargs.ray_init.runtime_env.env_vars``; read by :func:`run_policy_loss`)."""

BATCH_INPUTS: ContextVar[dict | None] = ContextVar("earthrl_verl_batch_inputs", default=None)
"""(B, T) inputs of the batch whose advantages verl is computing (set by :func:`compute_advantage`)."""


def _per_turn(token_turn: torch.Tensor, values: torch.Tensor, m: int) -> torch.Tensor:
    sel = token_turn >= 0
    return torch.zeros(m, dtype=torch.float32).index_add_(0, token_turn[sel], values[sel].to(torch.float32))


def turn_batch_from_verl(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index,
                         *, error_mask: torch.Tensor | None = None,
                         role_mask: torch.Tensor | None = None,
                         anchor_ids: torch.Tensor | None = None,
                         valid: torch.Tensor | None = None) -> tuple[TurnBatch, torch.Tensor]:
    """A :class:`TurnBatch` from verl's padded tensors (see module doc for the conventions).

    Args:
        anchor_ids: (B, T) int64, the dense anchor-state id of each turn on its tokens; a turn takes the
            id on its first token. None: every turn's anchor is −1 (unknown).

    Returns:
        ``(batch, token_turn)`` with ``token_turn`` (B, T) int64 the global turn of each token (−1 off-mask).
    """
    b = response_mask.shape[0]
    token_turn, starts = turn_runs(response_mask)
    m = starts.shape[0]
    turn_traj = starts[:, 0]
    count = torch.bincount(turn_traj, minlength=b)
    offset = torch.cumsum(count, 0) - count
    turn_pos = torch.arange(m) - offset[turn_traj]
    turn_reward = _per_turn(token_turn, token_level_rewards, m)
    err = _per_turn(token_turn, error_mask, m) > 0 if error_mask is not None else torch.zeros(m, dtype=torch.bool)
    prev = torch.cat([torch.zeros(1, dtype=torch.bool), err[:-1]]) & (turn_pos > 0)
    reward = token_level_rewards.to(torch.float32).sum(-1)
    if role_mask is None:
        role = torch.full((m,), ROLES["agent"], dtype=torch.long)
    else:
        manager = _per_turn(token_turn, role_mask, m) > 0
        role = torch.where(manager, ROLES["manager"], ROLES["specialist"])
        specialist_reward = torch.where(manager, 0.0, turn_reward)
        reward = reward - torch.zeros(b).index_add_(0, turn_traj, specialist_reward)
    role_pos = torch.zeros(m, dtype=torch.long)
    for code in ROLES.values():  # position among same-role turns of the row
        ind = (role == code).long()
        before = torch.cumsum(ind, 0) - ind
        role_pos = torch.where(role == code, before - before[offset[turn_traj]], role_pos)
    anchor = torch.full((m,), -1, dtype=torch.long) if anchor_ids is None else \
        anchor_ids[starts[:, 0], starts[:, 1]].to(torch.long)
    batch = TurnBatch(reward=reward, group=group_index(list(index) if index is not None else range(b)),
                      valid=torch.ones(b, dtype=torch.bool) if valid is None else valid.to(torch.bool), turn_traj=turn_traj, turn_pos=turn_pos,
                      turn_role_pos=role_pos, turn_role=role, turn_error=err, turn_prev_error=prev,
                      turn_reward=turn_reward, turn_anchor=anchor, reward_in_turns=True)
    return batch, token_turn


def _require(name: str, needs: tuple[str, ...], kwargs: dict) -> None:
    missing = [k for k in needs if kwargs.get(k) is None]
    if missing:
        raise ValueError(f"{PREFIX}{name} needs {missing} (B, T) tensors in the call; verl 0.9.1 does not forward "
                         "them: use EarthRL's verl trainer, which adds them to adv_kwargs / the loss call")


def run_advantage(config) -> AdvantageConfig:
    """The run's :class:`AdvantageConfig` from verl's ``algorithm`` config (the ``config`` verl hands an
    estimator): its :data:`ADVANTAGE_KEY` mapping, which EarthRL's verl config fills from the run's
    ``algorithm.advantage``.

    Raises:
        ValueError: ``config`` is None or lacks the key (a verl config not composed by ``earthrl train
            backend=verl``), or the mapping lacks a field (named).
    """
    settings = config.get(ADVANTAGE_KEY) if config is not None else None
    if settings is None:
        raise ValueError(f"verl's algorithm.{ADVANTAGE_KEY} is not set: EarthRL's estimators take the run's "
                         "algorithm.advantage from there; start verl with `earthrl train backend=verl`")
    return AdvantageConfig.from_mapping({k: settings[k] for k in settings})


def verl_estimator(name: str) -> Callable:
    """Wrap EarthRL estimator ``name`` as a verl advantage estimator
    ``fn(token_level_rewards, response_mask, index=None, config=None, **kwargs) -> (advantages, returns)``,
    both (B, T) float32, 0 off the response mask. ``config`` is verl's ``algorithm`` config; the
    estimator's settings are its :data:`ADVANTAGE_KEY` (:func:`run_advantage`).
    """
    estimator = ESTIMATORS.lookup(name)

    def adv_est(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None, config=None, **kwargs):
        inputs = {k: v for k, v in (BATCH_INPUTS.get() or {}).items()
                  if v is not None and tuple(v.shape[:1]) == tuple(response_mask.shape[:1])}
        kwargs = {**inputs, **{k: v for k, v in kwargs.items() if v is not None}}
        _require(name, ESTIMATOR_INPUTS.get(name, ()), kwargs)
        settings = run_advantage(config)
        rewards = kwargs.get("token_rewards", token_level_rewards)
        batch, token_turn = turn_batch_from_verl(rewards, response_mask, index, error_mask=kwargs.get("error_mask"),
                                                 role_mask=kwargs.get("role_mask"), anchor_ids=kwargs.get("anchor_ids"),
                                                 valid=kwargs.get("valid"))
        with torch.no_grad():
            turn_adv = estimator(batch, settings)
            adv = torch.where(token_turn >= 0, turn_adv[token_turn.clamp(min=0)], 0.0) if turn_adv.numel() else \
                torch.zeros(response_mask.shape)
        adv = adv.to(token_level_rewards.device)
        return adv, adv

    adv_est.__name__ = adv_est.__qualname__ = f"{PREFIX}{name}"
    adv_est.__doc__ = f"verl adapter of EarthRL estimator {name!r}: {estimator.__doc__}"
    return adv_est


def run_policy_loss(name: str, config, loss_agg_mode: str) -> PolicyLossConfig:
    """The :class:`PolicyLossConfig` of loss ``name`` in a verl actor: the run's ``algorithm.policy_loss``
    from :data:`POLICY_LOSS_ENV`, with verl's own values where verl applies them: the clip ratios of its
    ActorConfig ``config`` (``clip_ratio_low``/``clip_ratio_high``, else ``clip_ratio``), its
    ``loss_agg_mode``, and ``kl_coef`` 0 (verl adds the KL term itself, ``actor.use_kl_loss``).

    Raises:
        ValueError: the variable is not set (a verl run not started by ``earthrl train backend=verl``) or
            lacks a field (named).
    """
    text = os.environ.get(POLICY_LOSS_ENV)
    if not text:
        raise ValueError(f"{POLICY_LOSS_ENV} is not set: EarthRL's losses take the run's algorithm.policy_loss "
                         "from it; start verl with `earthrl train backend=verl`")
    run = {**json.loads(text), "name": name, "loss_agg_mode": loss_agg_mode, "kl_coef": 0.0}
    for key in ("clip_ratio_low", "clip_ratio_high"):
        value = getattr(config, key, None)
        value = getattr(config, "clip_ratio", None) if value is None else value
        if value is not None:
            run[key] = float(value)
    return PolicyLossConfig.from_mapping(run)


def verl_policy_loss(name: str) -> Callable:
    """Wrap EarthRL policy loss ``name`` with verl's ``PolicyLossFn`` signature ``(old_log_prob, log_prob,
    advantages, response_mask, loss_agg_mode, config, rollout_is_weights, **kwargs) -> (loss, metrics)``.
    The loss's settings are :func:`run_policy_loss`'s; global token and sequence counts come from
    ``config.global_batch_info``; ``rollout_is_weights`` (B, T) or None is the loss's ``is_weights``."""
    loss_fn = POLICY_LOSSES.lookup(name)
    needs = LOSS_INPUTS.get(name, ())

    def policy_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
                    rollout_is_weights=None, **kwargs):
        _require(name, needs, kwargs)
        cfg = run_policy_loss(name, config, loss_agg_mode)
        info = dict(getattr(config, "global_batch_info", None) or {})
        loss, m = loss_fn(logprobs=log_prob, old_logprobs=old_log_prob, advantages=advantages,
                          response_mask=response_mask, cfg=cfg, is_weights=rollout_is_weights,
                          **{k: kwargs[k] for k in needs},
                          batch_num_tokens=info.get("batch_num_tokens"),
                          global_batch_size=info.get("global_batch_size"), dp_size=int(info.get("dp_size") or 1))
        return loss, {"actor/pg_clipfrac": m["clip_frac"], "actor/pg_loss_earthrl": m["pg_loss"]}

    policy_loss.__name__ = policy_loss.__qualname__ = f"{PREFIX}{name}"
    return policy_loss


def rows_of(non_tensor_batch: dict, n: int) -> list[dict]:
    """Each row's agent-loop ``extra_fields`` from a DataProto's ``non_tensor_batch``: the per-row dicts of
    verl's v1 trainer (``extra_fields``), or the keys verl's v0 ``_postprocess`` spreads one per field."""
    if "extra_fields" in non_tensor_batch:
        return [dict(x or {}) for x in non_tensor_batch["extra_fields"]]
    keys = [k for k in non_tensor_batch if k.startswith(PREFIX) or k == "reward_extra_info"]
    return [{k: non_tensor_batch[k][i] for k in keys} for i in range(n)]


def batch_inputs(rows: Sequence[dict], response_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """The (B, T) inputs of EarthRL's estimators from the rows of :func:`rows_of`.

    Uses each row's ``earthrl_turns`` (``span`` [start, end) in response coordinates, ``role``, ``error``,
    ``anchor``; written by :mod:`earthrl.rollout.verl_loop`) and, when every row has it, ``reward_extra_info``
    (``score``, ``turn_rewards`` as JSON; written by :mod:`earthrl.algorithms.verl_reward`).

    Returns:
        ``error_mask`` (B, T) {0,1} on tokens of turns with E = 1; ``role_mask`` (B, T) {0,1} on manager
        tokens (only when a row has a manager turn); ``anchor_ids`` (B, T) int64, a dense id per distinct
        anchor state of the batch on the tokens of the turns that started from it (−1 off turns and on
        turns without an anchor); ``valid`` (B,) bool, False for trajectories hit by a fault;
        ``token_rewards`` (B, T) float32, each turn's reward on its last token and the trajectory reward
        on the last token of the last non-specialist turn (only when every row has rewards). Turns cut off by ``response_length`` (span None) are dropped with their turn rewards.
    """
    b, t = response_mask.shape
    error, role = torch.zeros(b, t, dtype=torch.long), torch.zeros(b, t, dtype=torch.long)
    anchor = torch.full((b, t), -1, dtype=torch.long)
    anchors: dict[str, int] = {}
    rewards = torch.zeros(b, t, dtype=torch.float32)
    valid = torch.ones(b, dtype=torch.bool)
    has_rewards = bool(rows) and all(isinstance(r.get("reward_extra_info"), dict) and "score" in r["reward_extra_info"]
                                     for r in rows)
    has_manager = False
    for i, row in enumerate(rows):
        valid[i] = row.get("earthrl_failure") is None
        turns = list(row.get("earthrl_turns") if row.get("earthrl_turns") is not None else [])
        info = row.get("reward_extra_info") or {}
        turn_rewards = json.loads(info.get("turn_rewards") or "[]") if has_rewards else []
        last = None
        for k, turn in enumerate(turns):
            span = turn.get("span")
            s, e = (int(span[0]), min(int(span[1]), t)) if span else (0, 0)
            if e <= s:
                continue
            error[i, s:e] = int(bool(turn.get("error")))
            if turn.get("anchor"):
                anchor[i, s:e] = anchors.setdefault(str(turn["anchor"]), len(anchors))
            if turn.get("role") == "manager":
                role[i, s:e], has_manager = 1, True
            if k < len(turn_rewards):
                rewards[i, e - 1] += float(turn_rewards[k])
            if turn.get("role") != "specialist" or last is None:
                last = e - 1
        if has_rewards and last is not None:
            rewards[i, last] += float(info["score"])
    out = {"error_mask": error, "anchor_ids": anchor, "valid": valid}
    if has_manager:
        out["role_mask"] = role
    if has_rewards:
        out["token_rewards"] = rewards
    return out


_VERL_COMPUTE_ADVANTAGE: list[Callable] = []


def compute_advantage(data, adv_estimator, *args, **kwargs):
    """verl's ``ray_trainer.compute_advantage`` with EarthRL's inputs: for an ``earthrl_*`` estimator the
    batch's :func:`batch_inputs` are set in :data:`BATCH_INPUTS` around verl's own call (other
    estimators run unchanged). Same arguments and return value as verl's."""
    from verl.trainer.ppo import ray_trainer  # lazy: the trainer stack is heavy; estimators need only core_algos

    original = _VERL_COMPUTE_ADVANTAGE[0] if _VERL_COMPUTE_ADVANTAGE else ray_trainer.compute_advantage
    name = getattr(adv_estimator, "value", adv_estimator)
    if not str(name).startswith(PREFIX):
        return original(data, adv_estimator, *args, **kwargs)
    rows = rows_of(data.non_tensor_batch, len(data))
    token = BATCH_INPUTS.set(batch_inputs(rows, data.batch["response_mask"]))
    try:
        return original(data, adv_estimator, *args, **kwargs)
    finally:
        BATCH_INPUTS.reset(token)


def install_trainer_hook() -> None:
    """Make verl's trainers call :func:`compute_advantage` (patches the ``compute_advantage`` names of
    ``verl.trainer.ppo.ray_trainer`` and ``verl.trainer.ppo.v1.utils``; idempotent). Called by
    EarthRL's verl task runner in the process that runs ``fit``."""
    from verl.trainer.ppo import ray_trainer  # lazy: see compute_advantage

    if not _VERL_COMPUTE_ADVANTAGE:
        _VERL_COMPUTE_ADVANTAGE.append(ray_trainer.compute_advantage)
    ray_trainer.compute_advantage = compute_advantage
    try:
        from verl.trainer.ppo.v1 import utils as v1_utils  # lazy: see compute_advantage
    except ImportError:  # the v1 trainer needs transfer_queue
        return
    v1_utils.compute_advantage = compute_advantage


def register_all() -> list[str]:
    """Register every EarthRL estimator and loss in verl under ``earthrl_<name>`` (idempotent).

    Returns:
        the verl names registered.

    Raises:
        ValueError: a name is already taken in verl by a function that is not EarthRL's.
    """
    names = []
    for registry, verl_registry, wrap, register in (
            (ESTIMATORS, ADV_ESTIMATOR_REGISTRY, verl_estimator, register_adv_est),
            (POLICY_LOSSES, POLICY_LOSS_REGISTRY, verl_policy_loss, register_policy_loss)):
        for name in registry.names():
            key = PREFIX + name
            old = verl_registry.get(key)
            if old is not None:
                if getattr(old, "__module__", None) != __name__:
                    raise ValueError(f"verl already has {key!r} from {old.__module__}; EarthRL will not replace it")
                names.append(key)
                continue
            register(key)(wrap(name))
            names.append(key)
    return names


REGISTERED = register_all()
