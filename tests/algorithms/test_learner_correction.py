"""The learner's rollout correction on the tiny model: the weights multiply the policy-gradient term only (the KL
term and its value unchanged), a dropped sequence leaves both terms, and an engine that agrees with the learner
changes nothing, bit for bit. Checked against a plain computation written here (one padded batch, weights by hand)."""

import pytest
import torch

from earthrl.algorithms.learner import Learner, pack
from earthrl.algorithms.registry import POLICY_LOSSES
from earthrl.algorithms.rollout_correction import RolloutCorrection
from earthrl.models.policy import Policy, pack_batch
from earthrl.rollout.trajectory import Trajectory, Turn
from earthrl.tests.algorithms.builders import learner_config, loss_config

PROMPT = list(range(100, 140))  # 40 shared prompt tokens: the learner's packed decoder path runs
ADVANTAGE = [1.5, -0.5, 0.8, -1.2]
BETA = 0.5


def _trajs() -> list[Trajectory]:
    g = torch.Generator().manual_seed(5)
    out = []
    for k, n in enumerate((5, 8, 4, 6)):
        resp, obs = torch.randint(200, 4000, (n,), generator=g).tolist(), torch.randint(200, 4000, (3,), generator=g).tolist()
        more = torch.randint(200, 4000, (n // 2 + 1,), generator=g).tolist()
        out.append(Trajectory("t", "g", prompt_ids=PROMPT + [150 + k],
                              turns=[Turn(resp, [0.0] * n, obs), Turn(more, [0.0] * len(more))]))
    return out


def _advantages(trajs):
    return [a * torch.tensor(t.response_mask(), dtype=torch.float32) for t, a in zip(trajs, ADVANTAGE)]


def _policy(tiny_model) -> Policy:
    torch.manual_seed(0)
    policy = Policy(str(tiny_model), {"rank": 4, "alpha": 8, "dropout": 0.0}, dtype="float32",
                    gradient_checkpointing=False)
    with torch.no_grad():  # an adapter that has moved: π ≠ π_ref, so the KL term has a gradient
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    return policy


def _set_rollout_logprobs(trajs, rows: torch.Tensor, mask: torch.Tensor) -> None:
    """Write (N, T) logprobs aligned with each trajectory's token_ids() into its turns' response_logprobs."""
    for t, row, m in zip(trajs, rows, mask):
        values = row[m.bool()].tolist()
        for turn in t.turns:
            turn.response_logprobs, values = values[:len(turn.response_ids)], values[len(turn.response_ids):]


def _plain_logprobs(policy, trajs):
    """One padded batch through the plain (unpacked) path: (batch, seq args, ref logprobs)."""
    b = pack_batch([t.token_ids() for t in trajs], [t.response_mask() for t in trajs])
    seq = (b["input_ids"], b["attention_mask"], b["response_mask"], 1.0)
    prefix, policy.min_shared_prefix = policy.min_shared_prefix, 0
    try:
        with torch.no_grad():
            lp = policy.token_logprobs(*seq)
    finally:
        policy.min_shared_prefix = prefix
    return b, seq, lp


def _plain_grads(policy, trajs, weights: torch.Tensor, keep: torch.Tensor):
    """The corrected update computed by hand: −Σ w·Â·ρ over kept tokens + β·Σ k3(π_ref, π) over kept tokens, both
    divided by the whole batch's response tokens (dropped rows keep their place in the count)."""
    b, seq, _ = _plain_logprobs(policy, trajs)
    adv = torch.nn.utils.rnn.pad_sequence(_advantages(trajs), batch_first=True)
    prefix, policy.min_shared_prefix = policy.min_shared_prefix, 0
    policy.model.zero_grad(set_to_none=True)
    policy.model.train()
    ref = policy.ref_logprobs(*seq)
    lp = policy.token_logprobs(*seq)
    policy.min_shared_prefix = prefix
    n = b["response_mask"].sum()
    mask = b["response_mask"] * keep[:, None]
    pg = -(weights * adv * torch.exp(lp - lp.detach()) * mask).sum() / n
    kl = ((torch.exp(ref - lp) - (ref - lp) - 1) * mask).sum() / n
    (pg + BETA * kl).backward()
    return [p.grad.clone() for p in policy.trainable_parameters()], float(pg.detach()), float(kl.detach())


def _learner_update(policy, trajs, correction):
    cfg = learner_config(loss=loss_config(kl_coef=BETA), micro_batch_size=2, grad_clip=1e9, correction=correction)
    learner = Learner(policy, torch.optim.SGD(policy.trainable_parameters(), lr=0.0), POLICY_LOSSES.lookup("ppo_clip_kl"), cfg)
    grads = []
    m = learner.update(pack(trajs, _advantages(trajs), cfg),
                       before_step=lambda: grads.extend(p.grad.clone() for p in policy.trainable_parameters()))
    return grads, m


def _assert_close(got, want):
    assert len(got) == len(want) > 0
    scale = max(float(w.abs().max()) for w in want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6 * scale)


def _offsets(trajs, pattern):
    """(N, T) log π_old − log π_rollout to plant: ``pattern`` cycled over each row's response tokens."""
    b = pack_batch([t.token_ids() for t in trajs], [t.response_mask() for t in trajs])
    off = torch.zeros(b["response_mask"].shape)
    for i, m in enumerate(b["response_mask"]):
        idx = m.nonzero().flatten()
        off[i, idx] = torch.tensor([pattern[j % len(pattern)] for j in range(len(idx))])
    return off, b["response_mask"]


def test_token_weights_scale_the_policy_gradient_term_and_leave_the_kl_alone(tiny_model):
    policy, trajs = _policy(tiny_model), _trajs()
    offsets, mask = _offsets(trajs, [0.9, -0.3, 0.2, -1.0, 0.0])
    _, _, lp = _plain_logprobs(policy, trajs)
    _set_rollout_logprobs(trajs, lp - offsets, mask)  # the engine's logprobs: π_old − offset
    corrected, m = _learner_update(policy, trajs, RolloutCorrection("token", 2.0, "none", 0.5, 2.0))
    # by hand: w = min(e^offset, 2) = 2 (e^0.9 = 2.4596 cut), e^-0.3 = 0.740818, e^0.2 = 1.221403, e^-1 = 0.367879, 1
    table = {0.9: 2.0, -0.3: 0.740818, 0.2: 1.221403, -1.0: 0.367879, 0.0: 1.0}
    weights = torch.tensor([[table[round(float(o), 1)] for o in row] for row in offsets]) * mask
    want, want_pg, want_kl = _plain_grads(policy, trajs, weights, torch.ones(len(trajs)))
    _assert_close(corrected, want)
    assert m["pg_loss"] == pytest.approx(want_pg, abs=1e-6) and m["kl"] == pytest.approx(want_kl, abs=1e-7)
    n, cut = int(mask.sum()), int((offsets == 0.9).sum())
    assert m["is_truncated_frac"] == pytest.approx(cut / n)
    assert m["is_weight_mean"] == pytest.approx(float(weights.sum()) / n, rel=1e-5)
    assert m["logprob_diff"] == pytest.approx(float(offsets.abs().sum()) / n, rel=1e-4)
    _, plain = _learner_update(policy, trajs, None)  # the KL term and its value do not see the weights
    assert m["kl"] == plain["kl"] > 0 and m["pg_loss"] != plain["pg_loss"]


def test_a_sequence_outside_the_band_leaves_both_terms(tiny_model):
    policy, trajs = _policy(tiny_model), _trajs()
    offsets, mask = _offsets(trajs, [0.0])
    offsets[2] = 0.3 * mask[2]  # row 2: ∏ r = e^(0.3 · 7 tokens) = 8.17 > 2; the others ∏ r = 1
    _, _, lp = _plain_logprobs(policy, trajs)
    _set_rollout_logprobs(trajs, lp - offsets, mask)
    grads, m = _learner_update(policy, trajs, RolloutCorrection("none", 2.0, "sequence", 0.5, 2.0))
    want, want_pg, want_kl = _plain_grads(policy, trajs, mask.float(), torch.tensor([1, 1, 0, 1]))
    _assert_close(grads, want)
    assert m["masked_seq_frac"] == 0.25 and m["kl"] == pytest.approx(want_kl, abs=1e-7)
    assert m["pg_loss"] == pytest.approx(want_pg, abs=1e-6)


def test_an_engine_that_agrees_with_the_learner_changes_nothing(tiny_model):
    policy, trajs = _policy(tiny_model), _trajs()
    cfg = learner_config(micro_batch_size=2)
    policy.model.train()
    with torch.no_grad():  # the learner's own π_old, micro-batch by micro-batch, as the engine's logprobs
        for k, mb in enumerate(pack(trajs, _advantages(trajs), cfg).micro):
            old = policy.token_logprobs(mb.input_ids, mb.attention_mask, mb.response_mask, 1.0)
            _set_rollout_logprobs(trajs[2 * k:2 * k + 2], old, mb.response_mask)
    corrected, m = _learner_update(policy, trajs, RolloutCorrection("token", 2.0, "geometric", 0.999, 1.001))
    plain, pm = _learner_update(policy, trajs, None)
    assert all(torch.equal(a, b) for a, b in zip(corrected, plain))
    assert {k: m[k] for k in ("pg_loss", "kl", "loss", "grad_norm")} == {k: pm[k] for k in ("pg_loss", "kl", "loss", "grad_norm")}
    assert (m["is_weight_mean"], m["is_truncated_frac"], m["masked_seq_frac"], m["logprob_diff"]) == (1.0, 0.0, 0.0, 0.0)
