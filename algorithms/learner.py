"""The update stage: policy-gradient passes of a policy loss over packed batches (no Hydra, no Ray).

:func:`pack` turns trajectories and their per-token advantages into a :class:`PackedBatch` of
right-padded micro-batches (faulted and empty trajectories left out); :meth:`Learner.update`
runs ``ppo_epochs`` passes of the loss over it, one optimizer step per pass. The local GRPO
recipe uses it; the SFT stage and the verl backend reuse the same pieces.

Work that cannot change the gradient is skipped, with the loss normalised exactly as if it had been
done (whole-batch token and sequence counts): rows whose advantages are all zero contribute nothing
to the policy-gradient term, so they are packed apart and run only when the KL term can give them a
gradient (``kl_coef > 0`` and the adapter is not an identity, or an estimator whose gradient does not
vanish at π = π_ref); the reference forward runs only when ``kl_coef > 0``, and not at all while the
adapter is an identity (π_ref = π bit for bit, e.g. the first step from peft's zero-initialised B).

The rollout correction (:mod:`earthrl.algorithms.rollout_correction`, ``LearnerConfig.correction``) is computed
once per micro-batch from π_old (the first pass's logprobs) and the engine's logprobs: its weights multiply
the policy-gradient term of every pass and the sequences it drops leave the loss (both terms) while keeping
their place in the whole-batch counts.

Roles on one frozen base (VG-HRL of HiRS-Agent, Earth-Agent-Pro's planner and executor): each row carries the LoRA
adapter its sequence was generated with (:meth:`~earthrl.rollout.trajectory.Trajectory.sequence_adapters`); a
micro-batch holds the rows of one adapter and its loss runs under that adapter, so each role learns from its own
rows' signal, and one optimizer step per pass updates every adapter together. An adapter with no row in the batch
gets no gradient at all (its ``grad`` stays None: AdamW leaves its weights and state untouched); one whose rows all
had zero advantage is treated as the single adapter's skipped rows are (a zero gradient, as running them would
give).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from earthrl.algorithms.mixed_loss import role_token_masks
from earthrl.algorithms.policy_loss import PolicyLossConfig, kl_gradient_vanishes_at_reference
from earthrl.algorithms.rollout_correction import Correction, CorrectionStats, RolloutCorrection, rollout_correction
from earthrl.models.policy import pack_batch, pad_right

CORRECTION_METRICS = tuple(CorrectionStats().metrics())
"""The rollout correction's metrics (:meth:`~earthrl.algorithms.rollout_correction.CorrectionStats.metrics`):
is_weight_mean, is_truncated_frac, masked_seq_frac, logprob_diff."""

METRICS = ("pg_loss", "kl", "clip_frac", "loss", "grad_norm") + CORRECTION_METRICS

ROW_SEPARABLE_AGG = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean")
"""verl loss aggregations in which a row's share of the loss does not depend on the other rows of its
micro-batch, given the whole-batch counts (``seq-mean-token-sum-norm`` divides by the micro-batch's
padded width): only under these are zero-advantage rows packed apart."""


@dataclass(frozen=True, kw_only=True)
class LearnerConfig:
    """Hyper-parameters of the update (``algorithm.*`` in Hydra).

    The fields that come from the config are required (its schema holds their defaults; from Python,
    ``earthrl.launch.config_schema.defaults("algorithm")`` gives them).

    Attributes:
        loss: the policy loss's configuration (passed to the loss as ``cfg``).
        loss_inputs: extra (B, T) inputs the loss needs (``AlgorithmSpec.loss_inputs``; see :data:`TOKEN_INPUTS`).
        ppo_epochs: passes over the batch, one optimizer step each.
        micro_batch_size: sequences per forward/backward.
        grad_clip: max global gradient norm.
        temperature: the rollout's sampling temperature (logits are divided by it).
        correction: the rollout/learner mismatch correction (``algorithm.rollout_correction``), or None: no
            weights, no sequence dropped (not a default of the config key, whose default lives in the schema).
    """

    loss: PolicyLossConfig
    loss_inputs: tuple[str, ...] = ()
    ppo_epochs: int
    micro_batch_size: int
    grad_clip: float
    temperature: float
    correction: RolloutCorrection | None


@dataclass
class MicroBatch:
    """Right-padded (B, T) tensors of B sequences: ``input_ids``/``attention_mask``/``response_mask``
    (long, :func:`~earthrl.models.policy.pack_batch`), ``rollout_logprobs`` and ``advantages``
    (float32, 0 off the response), and ``inputs``: the loss's extra tensors by name (float32)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    rollout_logprobs: torch.Tensor
    advantages: torch.Tensor
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    adapter: str = ""
    """the LoRA adapter every row of the micro-batch is scored and trained under ("" : the policy's first)."""


@dataclass
class PackedBatch:
    """The micro-batches of one update, with the whole-batch counts the loss aggregates by.

    Attributes:
        micro: the micro-batches in order (rows with a non-zero advantage somewhere).
        num_tokens: response tokens in the whole batch (``zero_micro`` included).
        num_sequences: sequences in the whole batch (``zero_micro`` included).
        loss_kwargs: whole-batch keyword arguments that come with the extra inputs
            (``role_num_tokens`` with ``role_mask``).
    """

    micro: list[MicroBatch]
    num_tokens: int
    num_sequences: int
    loss_kwargs: dict = field(default_factory=dict)
    zero_micro: list[MicroBatch] = field(default_factory=list)
    """micro-batches of the rows whose advantages are all zero: their policy-gradient term is exactly 0,
    so :meth:`Learner.update` runs them only when their KL term has a gradient."""


def _role_mask(trajs: Sequence, keep: list[int], num_tokens: int) -> tuple[list[torch.Tensor], dict]:
    masks = role_token_masks(trajs, "manager")
    n_manager = sum(float(masks[i].sum()) for i in keep)
    return masks, {"role_num_tokens": (n_manager, num_tokens - n_manager)}


TOKEN_INPUTS: dict[str, Callable] = {"role_mask": _role_mask}
"""Extra loss inputs the local learner builds from trajectories: name → ``fn(trajs, keep, num_tokens)
-> (per-trajectory float32 masks aligned with token_ids(), whole-batch loss kwargs)``."""


def pack(trajs: Sequence, advantages: Sequence[torch.Tensor], cfg: LearnerConfig) -> PackedBatch:
    """Pack the trajectories that count (no fault, at least one turn) into micro-batches, one row per
    sequence (:meth:`~earthrl.rollout.trajectory.Trajectory.sequence_bounds`: one per trajectory in the
    flat loop, one per role context in loops whose turns bring their own context). Each micro-batch holds the
    rows of one adapter (:attr:`MicroBatch.adapter`); with several adapters the rows are grouped by adapter, in
    the order the adapters first appear (a stable sort: with one adapter the order is the trajectories').

    Args:
        trajs: N :class:`~earthrl.rollout.trajectory.Trajectory`.
        advantages: N float32 tensors aligned with each ``token_ids()``
            (:func:`earthrl.algorithms.estimators.token_advantages`).
        cfg: uses ``micro_batch_size`` and ``loss_inputs``.

    Returns:
        The :class:`PackedBatch` (no micro-batches when no trajectory counts); rows whose advantages are
        all zero go to ``zero_micro`` when the loss aggregation is in :data:`ROW_SEPARABLE_AGG`.

    Raises:
        ValueError: a loss input the local learner cannot build (names the ones it can), or a sequence
            whose turns name different adapters (:meth:`~earthrl.rollout.trajectory.Trajectory.sequence_adapters`).
    """
    unknown = [k for k in cfg.loss_inputs if k not in TOKEN_INPUTS]
    if unknown:
        raise ValueError(f"loss inputs {unknown} cannot be built by the local learner; it builds {sorted(TOKEN_INPUTS)}")
    keep = [i for i, t in enumerate(trajs) if not t.faulted and t.turns]
    n_tokens = sum(sum(trajs[i].response_mask()) for i in keep)
    extra, loss_kwargs = {}, {}
    for name in cfg.loss_inputs:
        extra[name], kwargs = TOKEN_INPUTS[name](trajs, keep, n_tokens)
        loss_kwargs.update(kwargs)
    columns = {i: {"ids": trajs[i].token_ids(), "mask": trajs[i].response_mask(), "lp": trajs[i].rollout_logprobs(),
                   "adv": torch.as_tensor(advantages[i]).tolist(), **{k: v[i].tolist() for k, v in extra.items()}}
               for i in keep}
    adapter_of = {(i, a, b): name for i in keep
                  for (a, b), name in zip(trajs[i].sequence_bounds(), trajs[i].sequence_adapters())}
    rows = [(i, a, b) for i in keep for a, b in trajs[i].sequence_bounds() if any(columns[i]["mask"][a:b])]
    order = {name: k for k, name in enumerate(dict.fromkeys(adapter_of[r] for r in rows))}
    rows.sort(key=lambda r: order[adapter_of[r]])  # stable: one adapter keeps the trajectories' order
    zero = set()
    if cfg.loss.loss_agg_mode in ROW_SEPARABLE_AGG:
        zero = {r for r in rows if not any(columns[r[0]]["adv"][r[1]:r[2]])}

    def micro_batches(chosen: list[tuple[int, int, int]]) -> list[MicroBatch]:
        out, parts = [], []
        for name in order:
            group = [r for r in chosen if adapter_of[r] == name]
            parts += [(name, group[s:s + cfg.micro_batch_size]) for s in range(0, len(group), cfg.micro_batch_size)]
        for name, part in parts:
            cut = [(columns[i], a, b) for i, a, b in part]
            ids = pack_batch([c["ids"][a:b] for c, a, b in cut], [c["mask"][a:b] for c, a, b in cut])
            out.append(MicroBatch(ids["input_ids"], ids["attention_mask"], ids["response_mask"],
                                  pad_right([c["lp"][a:b] for c, a, b in cut], 0.0),
                                  pad_right([c["adv"][a:b] for c, a, b in cut], 0.0),
                                  {k: pad_right([c[k][a:b] for c, a, b in cut], 0.0) for k in extra}, name))
        return out

    return PackedBatch(micro_batches([r for r in rows if r not in zero]), n_tokens, len(rows), loss_kwargs,
                       zero_micro=micro_batches([r for r in rows if r in zero]))


class Learner:
    """Policy-gradient updates of a policy with one optimizer and one policy loss.

    Args:
        policy: :class:`~earthrl.models.policy.Policy` (``model``, ``token_logprobs``,
            ``ref_logprobs``, ``trainable_parameters``).
        optimizer: a torch optimizer over ``policy.trainable_parameters()`` (every adapter's).
        loss_fn: a :data:`~earthrl.algorithms.registry.POLICY_LOSSES` function (named arguments only).
        cfg: :class:`LearnerConfig`.
    """

    def __init__(self, policy, optimizer: torch.optim.Optimizer, loss_fn: Callable, cfg: LearnerConfig) -> None:
        self.policy, self.optimizer, self.loss_fn, self.cfg = policy, optimizer, loss_fn, cfg

    def update(self, batch: PackedBatch, *, before_step: Callable[[], None] | None = None) -> dict[str, float]:
        """``cfg.ppo_epochs`` passes of the loss over ``batch`` in its micro-batches, one optimizer step
        per pass. The first pass's logprobs are π_old (ratio 1 there: the gradient is GRPO's); later
        passes are clipped against them. The reference logprobs are computed once per micro-batch, only
        when ``kl_coef > 0``, and taken from the policy's own logprobs while the adapter is an identity.
        ``batch.zero_micro`` runs only in passes where its KL term has a gradient; skipped work leaves
        the loss, the gradient and the optimizer state exactly as if it had been done (a parameter that
        received no gradient gets a zero one, as the skipped rows would have given it). With several adapters
        (the policy's ``adapter_names``) each micro-batch runs under its own (``adapter=``), and only the
        parameters of adapters that have rows in the batch get those zeros: an adapter without rows keeps
        ``grad`` None and the optimizer step leaves it exactly as it was.

        Args:
            before_step: called before each optimizer step (the kill-anywhere test hook).

        Returns:
            The last pass's :data:`METRICS` (pg_loss, kl and loss: the loss's whole-batch aggregates summed
            over micro-batches; clip_frac token-weighted over micro-batches; grad_norm before clipping;
            :data:`CORRECTION_METRICS` over the rows the first pass computed, logprob_diff = mean
            |π_old − π_rollout| per token); all 0.0 (is_weight_mean 1.0) when the batch has no response token.
        """
        metrics = {**dict.fromkeys(METRICS, 0.0), **CorrectionStats().metrics()}
        if batch.num_tokens == 0:
            return metrics
        cfg, n_tokens = self.cfg, batch.num_tokens
        kl = cfg.loss.kl_coef > 0
        old_cache: dict[int, torch.Tensor] = {}  # π_old per micro-batch: the policy before this update
        ref_cache: dict[int, torch.Tensor | None] = {}
        corr_cache: dict[int, Correction] = {}  # the rollout correction per micro-batch, from its π_old
        stats = CorrectionStats()  # over the rows the first pass computed
        params = self.policy.trainable_parameters()
        multi = len(getattr(self.policy, "adapter_names", ())) > 1
        fill = params  # the parameters of the adapters that have rows in this batch
        if multi:
            fill = [p for name in dict.fromkeys(mb.adapter for mb in batch.micro + batch.zero_micro)
                    for p in self.policy.adapter_parameters(name)]
        self.policy.model.train()
        for epoch in range(cfg.ppo_epochs):
            metrics = dict.fromkeys(METRICS, 0.0)
            self.optimizer.zero_grad(set_to_none=True)
            identity = kl and self.policy.adapter_is_identity()  # π = π_ref exactly in this pass
            work = list(enumerate(batch.micro))
            if kl and not (identity and kl_gradient_vanishes_at_reference(cfg.loss.kl_estimator)):
                work += [(len(batch.micro) + j, mb) for j, mb in enumerate(batch.zero_micro)]
            for s, mb in work:
                seq = (mb.input_ids, mb.attention_mask, mb.response_mask, cfg.temperature)
                if kl and s not in ref_cache and not identity:
                    ref_cache[s] = self.policy.ref_logprobs(*seq)
                # the micro-batch's adapter (stays active through its backward pass)
                logprobs = self.policy.token_logprobs(*seq, **({"adapter": mb.adapter} if multi else {}))
                if kl and s not in ref_cache:
                    ref_cache[s] = logprobs.detach()  # identity adapter: the reference's logprobs, bit for bit
                if s not in old_cache:
                    # a zero-advantage row first run in a later pass: its π_old only multiplies Â = 0
                    old_cache[s] = logprobs.detach()
                    corr_cache[s] = rollout_correction(old_cache[s], mb.rollout_logprobs, mb.response_mask,
                                                       cfg.correction)
                    if epoch == 0:
                        stats += corr_cache[s].stats
                corr = corr_cache[s]
                loss, m = self.loss_fn(logprobs=logprobs, old_logprobs=old_cache[s], advantages=mb.advantages,
                                       response_mask=corr.response_mask, ref_logprobs=ref_cache.get(s), cfg=cfg.loss,
                                       batch_num_tokens=n_tokens, global_batch_size=batch.num_sequences,
                                       is_weights=corr.weights, **mb.inputs, **batch.loss_kwargs)
                loss.backward()
                metrics["loss"] += float(loss.detach())
                metrics["pg_loss"] += m["pg_loss"]  # already normalised by the whole batch's counts
                metrics["kl"] += m["kl"]
                metrics["clip_frac"] += m["clip_frac"] * float(corr.response_mask.sum()) / n_tokens  # a micro-batch mean
            metrics.update(stats.metrics())
            for p in fill:  # what the skipped rows would have given: keeps the optimizer's state exact
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            if before_step is not None:
                before_step()
            grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            metrics["grad_norm"] = float(grad_norm)
            self.optimizer.step()
        self.policy.model.eval()
        return metrics
