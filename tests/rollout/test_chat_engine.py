import torch
from transformers import AutoTokenizer

from earthrl.models.policy import Policy, pack_batch
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.hf_engine import HFEngine, SamplingParams


def test_incremental_ids_equal_full_template_tokenization(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    call = '<tool_call>\n{"name": "list_files", "arguments": {}}\n</tool_call>'
    response = tok(call, add_special_tokens=False)["input_ids"] + [codec.eos_id]
    ids = codec.prompt_ids("SYS", "Q") + response + codec.observation_ids("3 scenes", response)
    msgs = [{"role": "system", "content": "SYS"}, {"role": "user", "content": "Q"},
            {"role": "assistant", "content": call}, {"role": "tool", "content": "3 scenes"}]
    full = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert ids == tok(full, add_special_tokens=False)["input_ids"]


def test_cut_response_gets_its_end_of_turn_token_on_the_observation_side(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    cut = tok("<tool_call>\n{", add_special_tokens=False)["input_ids"]
    obs = codec.observation_ids("x", cut)
    assert obs[0] == codec.eos_id
    assert obs[1:] == codec.observation_ids("x", cut + [codec.eos_id])


def test_engine_logprobs_match_teacher_forced_learner_logprobs(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    lora = {"rank": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
    engine = HFEngine(str(tiny_model), stop_ids=[codec.eos_id], lora=lora, dtype="float32", num_threads=1)
    prompts = [codec.prompt_ids("S", "mean NDVI?"), codec.prompt_ids("S", "a longer question about water area?")]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=12, temperature=0.7, seed=3, top_p=1.0))
    assert len(outs) == 2
    for out in outs:
        assert len(out["response_ids"]) == len(out["logprobs"]) > 0
        assert out["finish_reason"] == ("stop" if out["response_ids"][-1] == codec.eos_id else "length")
        assert all(lp <= 0 for lp in out["logprobs"])
    policy = Policy(str(tiny_model), lora, dtype="float32", gradient_checkpointing=False)
    seqs = [p + o["response_ids"] for p, o in zip(prompts, outs)]
    masks = [[0] * len(p) + [1] * len(o["response_ids"]) for p, o in zip(prompts, outs)]
    batch = pack_batch(seqs, masks)
    lp = policy.token_logprobs(batch["input_ids"], batch["attention_mask"], batch["response_mask"], temperature=0.7)
    for i, (p, o) in enumerate(zip(prompts, outs)):
        got = lp[i, len(p): len(p) + len(o["response_ids"])]
        assert torch.allclose(got, torch.tensor(o["logprobs"]), atol=1e-4)
    # masked positions carry 0 and the base (adapter disabled) equals the fresh adapter (B = 0)
    assert torch.all(lp[batch["response_mask"] == 0] == 0)
    ref = policy.ref_logprobs(batch["input_ids"], batch["attention_mask"], batch["response_mask"], temperature=0.7)
    assert torch.allclose(ref, lp, atol=1e-5)


def test_lora_weights_pushed_to_engine_change_its_logprobs(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    lora = {"rank": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
    engine = HFEngine(str(tiny_model), stop_ids=[codec.eos_id], lora=lora, dtype="float32", num_threads=1)
    policy = Policy(str(tiny_model), lora, dtype="float32", gradient_checkpointing=False)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    assert engine.set_lora_weights(policy.adapter_state_dict()) == 2 * 2  # q_proj, v_proj in 2 layers
    prompt = codec.prompt_ids("S", "Q")
    out = engine.generate([prompt], SamplingParams(max_new_tokens=6, temperature=1.0, seed=1, top_p=1.0))[0]
    batch = pack_batch([prompt + out["response_ids"]], [[0] * len(prompt) + [1] * len(out["response_ids"])])
    lp = policy.token_logprobs(batch["input_ids"], batch["attention_mask"], batch["response_mask"])
    ref = policy.ref_logprobs(batch["input_ids"], batch["attention_mask"], batch["response_mask"])
    got = lp[0, len(prompt):]
    assert torch.allclose(got, torch.tensor(out["logprobs"]), atol=1e-4)
    assert not torch.allclose(got, ref[0, len(prompt):], atol=1e-3)


def test_engine_stops_at_stop_string_and_merges_without_drift(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    lora = {"rank": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj"]}
    engine = HFEngine(str(tiny_model), stop_ids=[codec.eos_id], lora=lora, stop_strings=["</tool_call>"],
                      dtype="float32", num_threads=1)
    call = tok('<tool_call>{"name": "x"}</tool_call> and more text', add_special_tokens=False)["input_ids"]
    n = engine._turn_end(call)
    assert tok.decode(call[:n]).endswith("</tool_call>") and not tok.decode(call[: n - 1]).endswith("</tool_call>")
    assert engine._turn_end(call[: n - 1]) is None
    # a stop string that ends inside a token ends the turn at that token (transformers stops there too)
    engine.stop_strings = ["ol_ca"]
    m = engine._turn_end(call)
    assert m is not None and "ol_ca" in tok.decode(call[:m]) and "ol_ca" not in tok.decode(call[: m - 1])
    engine.stop_strings = ["</tool_call>"]
    # pushing the same adapter twice gives the same weights as pushing it once (W0 kept)
    policy = Policy(str(tiny_model), lora, dtype="float32", gradient_checkpointing=False)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    sd = policy.adapter_state_dict()
    engine.set_lora_weights(sd)
    once = engine.model.model.layers[0].self_attn.q_proj.weight.clone()
    engine.set_lora_weights(sd)
    assert torch.equal(once, engine.model.model.layers[0].self_attn.q_proj.weight)
    a = sd["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"]
    b = sd["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"]
    w0 = engine._base_weights["model.layers.0.self_attn.q_proj"]
    assert torch.allclose(once, w0 + 2.0 * b @ a, atol=1e-6)  # alpha / rank = 2


def test_shared_prefix_cache_gives_the_same_tokens_and_logprobs(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    system = "You are a remote-sensing analyst. Tools: spectral_index, raster_stats, answer. " * 3
    prompts = [codec.prompt_ids(system, q) for q in ("mean NDVI of S2?", "water share of the scene by NDWI > 0?", "x")]
    kwargs = dict(stop_ids=[codec.eos_id], dtype="float32", num_threads=1)
    plain = HFEngine(str(tiny_model), min_shared_prefix=0, **kwargs)
    cached = HFEngine(str(tiny_model), min_shared_prefix=16, **kwargs)
    shared = cached._shared_prefix_len(prompts)
    assert shared >= 16 and all(p[:shared] == prompts[0][:shared] for p in prompts)
    params = SamplingParams(max_new_tokens=10, temperature=0.0, top_p=1.0)
    a, b = plain.generate(prompts, params), cached.generate(prompts, params)
    again = cached.generate(prompts, params)  # served from the kept prefix cache
    for x, y, z in zip(a, b, again):
        assert x["response_ids"] == y["response_ids"] == z["response_ids"]
        assert torch.allclose(torch.tensor(x["logprobs"]), torch.tensor(y["logprobs"]), atol=1e-4)
    # sampled generation: same seed, same samples with or without the cache
    s = SamplingParams(max_new_tokens=10, temperature=1.0, seed=7, top_p=1.0)
    assert [o["response_ids"] for o in plain.generate(prompts, s)] == [o["response_ids"] for o in cached.generate(prompts, s)]
