"""The learner's chosen-token log-probabilities (shared prefix packed once, LM head on response
positions only, float32 logsumexp in chunks) against the plain computation: the whole padded batch
through the model and a full-vocabulary float32 log-softmax (tiny model, float32)."""

import pytest
import torch

from earthrl.models.policy import Policy, pack_batch, packed_layout, shared_prefix_len

PREFIX = list(range(300, 345))  # 45 shared leading tokens: more than min_shared_prefix (32)


def _batch(prefix=PREFIX):
    g = torch.Generator().manual_seed(7)
    ids, masks = [], []
    for n in (21, 34, 8):
        own = torch.randint(5, 4000, (n,), generator=g).tolist()
        ids.append(prefix + own)
        masks.append([0] * len(prefix) + [0, 0] + [int(i % 4 != 3) for i in range(n - 2)])
    return pack_batch(ids, masks)


def _naive(policy, b, temperature, reference=False):
    """log_softmax over the whole vocabulary at every position of the padded batch, in float32."""
    def run():
        logits = policy.model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits.float()
        lp = torch.log_softmax(logits[:, :-1] / temperature, dim=-1).gather(-1, b["input_ids"][:, 1:, None])[..., 0]
        return torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1) * b["response_mask"]
    if reference:
        with torch.no_grad(), policy.model.disable_adapter():
            return run()
    return run()


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "checkpointing"])
def policy(request, tiny_model):
    torch.manual_seed(0)
    p = Policy(str(tiny_model), {"rank": 4, "alpha": 8, "dropout": 0.0}, dtype="float32",
               gradient_checkpointing=request.param, logit_chunk=16)
    with torch.no_grad():  # a non-identity adapter, so that policy and reference differ
        for name, w in p.model.named_parameters():
            if "lora_B" in name:
                w.normal_(0, 0.2)
    p.model.train()
    return p


def _grads(policy, lp):
    policy.model.zero_grad(set_to_none=True)
    weights = torch.linspace(-1, 1, lp.numel()).reshape(lp.shape)
    (lp * weights).sum().backward()
    return [w.grad.clone() for w in policy.trainable_parameters()]


def test_packed_logprobs_and_gradients_equal_the_full_softmax(policy):
    b = _batch()
    assert shared_prefix_len(b["input_ids"], b["attention_mask"], b["response_mask"]) == len(PREFIX)
    got = policy.token_logprobs(b["input_ids"], b["attention_mask"], b["response_mask"], 0.8)
    want = _naive(policy, b, 0.8)
    assert int((got != 0).sum()) == int(b["response_mask"].sum()) > 0
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    g_got, g_want = _grads(policy, got), _grads(policy, _naive(policy, b, 0.8))
    for a, w in zip(g_got, g_want):
        torch.testing.assert_close(a, w, rtol=1e-5, atol=1e-5 * float(w.abs().max()))


def test_reference_logprobs_equal_the_adapter_free_full_softmax(policy):
    b = _batch()
    ref = policy.ref_logprobs(b["input_ids"], b["attention_mask"], b["response_mask"], 1.0)
    torch.testing.assert_close(ref, _naive(policy, b, 1.0, reference=True), rtol=0, atol=1e-5)
    with torch.no_grad():
        own = policy.token_logprobs(b["input_ids"], b["attention_mask"], b["response_mask"], 1.0)
    assert float((ref - own).abs().max()) > 1e-3  # the adapter does change the policy


def test_rows_without_a_common_prefix_take_the_padded_path(policy):
    b = _batch(prefix=[9] * 10)  # 10 shared tokens: below min_shared_prefix
    assert shared_prefix_len(b["input_ids"], b["attention_mask"], b["response_mask"]) == 10
    torch.testing.assert_close(policy.token_logprobs(b["input_ids"], b["attention_mask"], b["response_mask"]),
                               _naive(policy, b, 1.0), rtol=0, atol=1e-5)


def test_shared_prefix_stops_before_responses_and_at_the_first_difference():
    b = pack_batch([[1, 2, 3, 4, 5], [1, 2, 3, 9, 9, 9]], [[0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 1]])
    assert shared_prefix_len(b["input_ids"], b["attention_mask"], b["response_mask"]) == 3
    early = pack_batch([[1, 2, 3, 4, 5], [1, 2, 3, 4, 6]], [[0, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    assert shared_prefix_len(early["input_ids"], early["attention_mask"], early["response_mask"]) == 1
    one = pack_batch([[1, 2, 3]], [[0, 0, 1]])
    assert shared_prefix_len(one["input_ids"], one["attention_mask"], one["response_mask"]) == 0


def test_packed_layout_lets_each_row_see_the_prefix_and_itself_only():
    index, positions, allowed = packed_layout([4, 3], prefix=2)  # [p0 p1][a2 a3][b2]
    assert index.tolist() == [[0, 1, 2, 3], [0, 1, 4, 0]]
    assert positions.tolist() == [0, 1, 2, 3, 2]
    assert allowed.int().tolist() == [[1, 0, 0, 0, 0],
                                      [1, 1, 0, 0, 0],
                                      [1, 1, 1, 0, 0],
                                      [1, 1, 1, 1, 0],
                                      [1, 1, 0, 0, 1]]
