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
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=12, temperature=0.7, seed=3))
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
    assert engine.set_lora_weights(policy.adapter_state_dict()) > 0
    prompt = codec.prompt_ids("S", "Q")
    out = engine.generate([prompt], SamplingParams(max_new_tokens=6, temperature=1.0, seed=1))[0]
    batch = pack_batch([prompt + out["response_ids"]], [[0] * len(prompt) + [1] * len(out["response_ids"])])
    lp = policy.token_logprobs(batch["input_ids"], batch["attention_mask"], batch["response_mask"])
    ref = policy.ref_logprobs(batch["input_ids"], batch["attention_mask"], batch["response_mask"])
    got = lp[0, len(prompt):]
    assert torch.allclose(got, torch.tensor(out["logprobs"]), atol=1e-4)
    assert not torch.allclose(got, ref[0, len(prompt):], atol=1e-3)
