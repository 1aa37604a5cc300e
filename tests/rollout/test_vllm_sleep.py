"""vLLM colocated with the learner on one GPU: the engine's options on cuda and cpu, and the worker's sleep / wake
order, run through the worker's own code (build_llm, Engine, generate) against a stand-in ``vllm`` package that
records what the worker calls (no GPU here; the real GPU check is launch/gpu_smoke.sh)."""

import sys
import types

import pytest

from earthrl.rollout import vllm_worker
from earthrl.rollout.hf_engine import actor_options
from earthrl.rollout.vllm_engine import worker_options

LORA = {"rank": 4, "alpha": 8}


class _LLM:
    """Records the constructor's keyword arguments and every call, in order."""

    built: list[dict] = []

    def __init__(self, **kwargs):
        self.kwargs, self.calls = kwargs, []
        _LLM.built.append(kwargs)

    def reset_prefix_cache(self):
        self.calls.append("reset_prefix_cache")

    def sleep(self, level=1):
        self.calls.append(f"sleep({level})")

    def wake_up(self, tags=None):
        self.calls.append("wake_up")

    def generate(self, prompts, params, lora_request=None, use_tqdm=True):
        self.calls.append("generate")
        outs = []
        for p in prompts:
            ids = [p.prompt_token_ids[-1] + 1, 7]
            step = [{t: types.SimpleNamespace(logprob=-0.5)} for t in ids]
            outs.append(types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=ids, logprobs=step,
                                                                             finish_reason="stop")]))
        return outs


@pytest.fixture()
def fake_vllm(monkeypatch):
    """A ``vllm`` package with the names the worker imports: LLM, SamplingParams, inputs.TokensPrompt,
    lora.request.LoRARequest."""
    vllm = types.ModuleType("vllm")
    vllm.LLM = _LLM
    vllm.SamplingParams = lambda **kw: kw
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: types.SimpleNamespace(prompt_token_ids=prompt_token_ids)
    lora, request = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request.LoRARequest = lambda *a: a
    for name, mod in {"vllm": vllm, "vllm.inputs": inputs, "vllm.lora": lora, "vllm.lora.request": request}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    _LLM.built = []
    return _LLM


def _opts(device: str):
    args = worker_options("/m", dtype="bfloat16", max_model_len=4096, lora=LORA, kv_cache_gib=1.5,
                          gpu_memory_utilization=0.3, enforce_eager=False, device=device)
    return vllm_worker.parser().parse_args(["--address", "/tmp/sock", *args])


def test_on_cuda_the_engine_has_sleep_mode_and_the_card_share_on_cpu_an_explicit_kv_cache(fake_vllm):
    gpu = vllm_worker.build_llm(_opts("cuda")).kwargs
    assert gpu["enable_sleep_mode"] is True and gpu["gpu_memory_utilization"] == 0.3
    assert "kv_cache_memory_bytes" not in gpu and gpu["dtype"] == "bfloat16"
    assert (gpu["enable_lora"], gpu["max_lora_rank"], gpu["enable_prefix_caching"]) == (True, 8, True)
    cpu = vllm_worker.build_llm(_opts("cpu")).kwargs
    assert "enable_sleep_mode" not in cpu and "gpu_memory_utilization" not in cpu
    assert cpu["kv_cache_memory_bytes"] == int(1.5 * 2**30)
    assert actor_options("cuda") == {"num_cpus": 0, "num_gpus": 1, "max_restarts": 0}
    assert actor_options("cpu")["num_gpus"] == 0


def _req(first_token: int) -> dict:
    return {"prompts": [[1, 2, first_token]], "max_tokens": 4, "temperature": 0.0, "top_p": 1.0, "seed": 0,
            "stop_token_ids": [2], "stop": [], "ignore_eos": False, "lora": None}


def test_sleep_after_a_rollout_and_wake_before_the_next_generate(fake_vllm):
    engine = vllm_worker.Engine(vllm_worker.build_llm(_opts("cuda")), sleep_mode=True)
    llm = engine.llm
    first = engine.generate(_req(3))
    assert first["results"][0]["response_ids"] == [4, 7] and first["results"][0]["logprobs"] == [-0.5, -0.5]
    assert engine.sleep() is True and engine.sleep() is False  # a second sleep finds it asleep
    assert llm.calls == ["generate", "reset_prefix_cache", "sleep(1)"]
    again = engine.generate(_req(5))
    assert again["results"][0]["response_ids"] == [6, 7]
    assert llm.calls[3:] == ["wake_up", "generate"]  # woken first, once
    engine.generate(_req(5))
    assert llm.calls[5:] == ["generate"] and not engine.asleep


def test_without_sleep_mode_sleep_changes_nothing(fake_vllm):
    engine = vllm_worker.Engine(vllm_worker.build_llm(_opts("cpu")), sleep_mode=False)
    assert engine.sleep() is False
    engine.generate(_req(3))
    assert engine.llm.calls == ["generate"]
