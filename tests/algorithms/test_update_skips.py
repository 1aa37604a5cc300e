"""The update skips only work that cannot change it: zero-advantage rows, the reference forward with
kl_coef = 0 or an identity adapter. Checked against a plain computation over every row (tiny model)."""

import dataclasses

import pytest
import torch

from earthrl.algorithms.learner import Learner, pack
from earthrl.algorithms.policy_loss import PolicyLossConfig, ppo_clip_kl_loss
from earthrl.algorithms.registry import POLICY_LOSSES
from earthrl.models.policy import Policy, pack_batch
from earthrl.rollout.trajectory import Trajectory, Turn
from earthrl.tests.algorithms.builders import learner_config, loss_config

PROMPT = list(range(100, 140))  # 40 shared prompt tokens: the packed decoder path runs


def _trajs() -> list[Trajectory]:
    g = torch.Generator().manual_seed(3)
    out = []
    for k, n in enumerate((5, 9, 4, 7, 6)):
        resp = torch.randint(200, 4000, (n,), generator=g).tolist()
        obs = torch.randint(200, 4000, (3,), generator=g).tolist()
        more = torch.randint(200, 4000, (n // 2 + 1,), generator=g).tolist()
        out.append(Trajectory("t", "g", prompt_ids=PROMPT + [150 + k],
                              turns=[Turn(resp, [-2.0] * n, obs), Turn(more, [-2.0] * len(more))]))
    return out


ADVANTAGE = [1.5, 0.0, -0.5, 0.0, 0.0]  # rows 1, 3, 4 have zero advantage


def _advantages(trajs):
    return [a * torch.tensor(t.response_mask(), dtype=torch.float32) for t, a in zip(trajs, ADVANTAGE)]


class CountingPolicy:
    """Wraps a :class:`Policy` and counts the sequences that go through each forward."""

    def __init__(self, policy):
        self.policy, self.model = policy, policy.model
        self.rows = {"token_logprobs": 0, "ref_logprobs": 0}

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def token_logprobs(self, input_ids, *args):
        self.rows["token_logprobs"] += input_ids.shape[0]
        return self.policy.token_logprobs(input_ids, *args)

    def ref_logprobs(self, input_ids, *args):
        self.rows["ref_logprobs"] += input_ids.shape[0]
        return self.policy.ref_logprobs(input_ids, *args)


def _policy(tiny_model, identity: bool) -> Policy:
    torch.manual_seed(0)
    policy = Policy(str(tiny_model), {"rank": 4, "alpha": 8, "dropout": 0.0}, dtype="float32",
                    gradient_checkpointing=False)
    if not identity:
        with torch.no_grad():
            for name, p in policy.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.2)
    return policy


def _learner_grads(policy, loss_cfg: PolicyLossConfig, micro_batch_size: int = 2):
    """Gradients and metrics of one Learner.update, and the rows each forward saw."""
    counting = CountingPolicy(policy)
    cfg = learner_config(loss=loss_cfg, micro_batch_size=micro_batch_size, grad_clip=1e9)
    learner = Learner(counting, torch.optim.SGD(policy.trainable_parameters(), lr=0.0),
                      POLICY_LOSSES.lookup("ppo_clip_kl"), cfg)
    grads = []
    trajs = _trajs()
    m = learner.update(pack(trajs, _advantages(trajs), cfg),
                       before_step=lambda: grads.extend(p.grad.clone() for p in policy.trainable_parameters()))
    return grads, m, counting.rows


def _plain_grads(policy, loss_cfg: PolicyLossConfig):
    """The update's gradient computed the plain way: every row, one padded batch, no packing, the
    reference forward whenever kl_coef > 0."""
    trajs = _trajs()
    b = pack_batch([t.token_ids() for t in trajs], [t.response_mask() for t in trajs])
    adv = torch.nn.utils.rnn.pad_sequence(_advantages(trajs), batch_first=True)
    policy.min_shared_prefix = 0
    policy.model.zero_grad(set_to_none=True)
    policy.model.train()
    seq = (b["input_ids"], b["attention_mask"], b["response_mask"], 1.0)
    ref = policy.ref_logprobs(*seq) if loss_cfg.kl_coef > 0 else None
    lp = policy.token_logprobs(*seq)
    loss, m = ppo_clip_kl_loss(lp, lp.detach(), adv, b["response_mask"], ref, loss_cfg,
                               batch_num_tokens=int(b["response_mask"].sum()), global_batch_size=len(trajs))
    loss.backward()
    policy.min_shared_prefix = 32
    return [p.grad.clone() for p in policy.trainable_parameters()], m


def _assert_close(got, want):
    assert len(got) == len(want) > 0
    scale = max(float(w.abs().max()) for w in want)
    assert scale > 0
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6 * scale)


@pytest.mark.parametrize("agg", ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_zero_advantage_rows_are_skipped_and_the_gradient_is_unchanged(tiny_model, agg):
    policy = _policy(tiny_model, identity=False)
    cfg = loss_config(kl_coef=0.0, loss_agg_mode=agg)
    grads, m, rows = _learner_grads(policy, cfg)
    want, want_m = _plain_grads(policy, cfg)
    _assert_close(grads, want)
    assert abs(m["pg_loss"] - want_m["pg_loss"]) < 1e-6 and m["pg_loss"] != 0.0
    assert rows == {"token_logprobs": 2, "ref_logprobs": 0}  # 2 of 5 rows have an advantage


def test_kl_needs_the_zero_advantage_rows_once_the_adapter_moved(tiny_model):
    policy = _policy(tiny_model, identity=False)
    cfg = loss_config(kl_coef=0.5)
    grads, m, rows = _learner_grads(policy, cfg)
    want, want_m = _plain_grads(policy, cfg)
    _assert_close(grads, want)
    assert m["kl"] > 0 and abs(m["kl"] - want_m["kl"]) < 1e-6
    assert rows == {"token_logprobs": 5, "ref_logprobs": 5}


@pytest.mark.parametrize("estimator, computed", [("low_var_kl", 2), ("k2", 2), ("k1", 5)])
def test_identity_adapter_needs_no_reference_forward(tiny_model, estimator, computed):
    """π = π_ref bit for bit: the reference forward is never run, and the zero-advantage rows only run
    for an estimator whose gradient does not vanish at π = π_ref (k1)."""
    policy = _policy(tiny_model, identity=True)
    assert policy.adapter_is_identity()
    cfg = loss_config(kl_coef=0.5, kl_estimator=estimator)
    grads, m, rows = _learner_grads(policy, cfg)
    want, want_m = _plain_grads(policy, cfg)
    _assert_close(grads, want)
    assert m["kl"] == want_m["kl"] == 0.0
    assert rows == {"token_logprobs": computed, "ref_logprobs": 0}


def test_seq_mean_token_sum_norm_keeps_every_row(tiny_model):
    """That aggregation divides by each micro-batch's padded width, so rows are not packed apart."""
    trajs = _trajs()
    cfg = learner_config(loss=loss_config(loss_agg_mode="seq-mean-token-sum-norm"), micro_batch_size=2)
    batch = pack(trajs, _advantages(trajs), cfg)
    assert [mb.input_ids.shape[0] for mb in batch.micro] == [2, 2, 1] and batch.zero_micro == []
    split = pack(trajs, _advantages(trajs), dataclasses.replace(cfg, loss=loss_config()))
    assert [mb.input_ids.shape[0] for mb in split.micro] == [2]
    assert [mb.input_ids.shape[0] for mb in split.zero_micro] == [2, 1]
    assert (split.num_tokens, split.num_sequences) == (batch.num_tokens, batch.num_sequences) == (
        sum(sum(t.response_mask()) for t in trajs), 5)


def test_all_zero_batch_steps_the_optimizer_with_zero_gradients(tiny_model):
    """No forward at all, yet Adam's state advances exactly as a computed zero gradient would make it."""
    trajs = _trajs()
    zeros = [0.0 * a for a in _advantages(trajs)]
    states = []
    for skip in (True, False):
        policy = _policy(tiny_model, identity=False)
        counting = CountingPolicy(policy)
        opt = torch.optim.Adam(policy.trainable_parameters(), lr=1e-2)
        cfg = learner_config(loss=loss_config(kl_coef=0.0), micro_batch_size=2)
        learner = Learner(counting, opt, POLICY_LOSSES.lookup("ppo_clip_kl"), cfg)
        for values in (_advantages(trajs), zeros):  # a real step, then an all-zero one
            batch = pack(trajs, values, cfg)
            if not skip:
                batch = dataclasses.replace(batch, micro=batch.micro + batch.zero_micro, zero_micro=[])
            learner.update(batch)
        states.append(([p.detach().clone() for p in policy.trainable_parameters()],
                       [opt.state[p]["exp_avg_sq"].clone() for p in policy.trainable_parameters()],
                       counting.rows["token_logprobs"]))
    (p_skip, v_skip, rows_skip), (p_all, v_all, rows_all) = states
    assert rows_skip == 2 and rows_all == 10
    _assert_close(p_skip, p_all)
    _assert_close(v_skip, v_all)
