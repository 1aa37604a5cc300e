"""vLLM colocated with the learner on one GPU: the engine's options on cuda and cpu, and the worker's sleep / wake
order, run through the worker's own code (build_llm, Server) against a stand-in ``vllm`` package that
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
        self.llm_engine = _Engine(self.calls)
        _LLM.built.append(kwargs)

    def reset_prefix_cache(self):
        self.calls.append("reset_prefix_cache")

    def sleep(self, level=1):
        self.calls.append(f"sleep({level})")

    def wake_up(self, tags=None):
        self.calls.append("wake_up")


class _Engine:
    """vLLM's ``LLMEngine`` as the worker's :class:`~earthrl.rollout.vllm_worker.Server` drives it: each
    ``step`` finishes every request added, answering ``[last prompt id + 1, 7]``."""

    def __init__(self, calls):
        self.calls, self.pending = calls, []

    def add_request(self, request_id, prompt, params, lora_request=None):
        self.pending.append((request_id, prompt.prompt_token_ids))

    def has_unfinished_requests(self):
        return bool(self.pending)

    def step(self):
        self.calls.append("step")
        outs = []
        for request_id, prompt in self.pending:
            ids = [prompt[-1] + 1, 7]
            step = [{t: types.SimpleNamespace(logprob=-0.5)} for t in ids]
            out = types.SimpleNamespace(token_ids=ids, logprobs=step, finish_reason="stop")
            outs.append(types.SimpleNamespace(request_id=request_id, finished=True, outputs=[out],
                                              num_cached_tokens=0))
        self.pending = []
        return outs


class _Conn:
    """The socket's worker end: records the replies sent."""

    def __init__(self):
        self.sent = []

    def send(self, reply):
        self.sent.append(reply)


@pytest.fixture()
def fake_vllm(monkeypatch):
    """A ``vllm`` package with the names the worker imports: LLM, SamplingParams,
    sampling_params.RequestOutputKind, inputs.TokensPrompt, lora.request.LoRARequest."""
    vllm = types.ModuleType("vllm")
    vllm.LLM = _LLM
    vllm.SamplingParams = lambda **kw: kw
    sampling = types.ModuleType("vllm.sampling_params")
    sampling.RequestOutputKind = types.SimpleNamespace(FINAL_ONLY="final_only")
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: types.SimpleNamespace(prompt_token_ids=prompt_token_ids)
    lora, request = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request.LoRARequest = lambda *a: a
    for name, mod in {"vllm": vllm, "vllm.sampling_params": sampling, "vllm.inputs": inputs, "vllm.lora": lora, "vllm.lora.request": request}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    _LLM.built = []
    return _LLM


def _opts(device: str, max_loras: int = 1):
    args = worker_options("/m", dtype="bfloat16", max_model_len=4096, lora=LORA, kv_cache_gib=1.5,
                          gpu_memory_utilization=0.3, enforce_eager=False, device=device, max_loras=max_loras)
    return vllm_worker.parser().parse_args(["--address", "/tmp/sock", *args])


def test_on_cuda_the_engine_has_sleep_mode_and_the_card_share_on_cpu_an_explicit_kv_cache(fake_vllm):
    gpu = vllm_worker.build_llm(_opts("cuda")).kwargs
    assert gpu["enable_sleep_mode"] is True and gpu["gpu_memory_utilization"] == 0.3
    assert "kv_cache_memory_bytes" not in gpu and gpu["dtype"] == "bfloat16"
    assert (gpu["enable_lora"], gpu["max_lora_rank"], gpu["enable_prefix_caching"]) == (True, 8, True)
    assert gpu["max_loras"] == 1 and vllm_worker.build_llm(_opts("cuda", max_loras=2)).kwargs["max_loras"] == 2  # roles
    cpu = vllm_worker.build_llm(_opts("cpu")).kwargs
    assert "enable_sleep_mode" not in cpu and "gpu_memory_utilization" not in cpu
    assert cpu["kv_cache_memory_bytes"] == int(1.5 * 2**30)
    # no partial prefill on CPU (a seeded request's rewind fails there); a step fits a whole max_model_len prompt
    assert (cpu["enable_chunked_prefill"], cpu["max_num_batched_tokens"]) == (False, 4096)
    assert "enable_chunked_prefill" not in gpu
    assert actor_options("cuda") == {"num_cpus": 0, "num_gpus": 1, "max_restarts": 0}
    assert actor_options("cpu")["num_gpus"] == 0


def _req(rid: int, first_token: int, op: str = "generate") -> dict:
    return {"op": op, "rid": rid, "prompts": [[1, 2, first_token]], "max_tokens": 4, "temperature": 0.0,
            "top_p": 1.0, "seed": 0, "stop_token_ids": [2], "stop": [], "ignore_eos": False, "lora": None}


def _serve(server, req):
    """What the server's loop does with one request: handle it, then step until nothing is left."""
    server.handle(req)
    while server.engine.has_unfinished_requests():
        server.step()
    return server.conn.sent[-1]


def test_sleep_after_a_rollout_and_wake_before_the_next_generate(fake_vllm):
    llm = vllm_worker.build_llm(_opts("cuda"))
    server = vllm_worker.Server(llm, _Conn(), sleep_mode=True)
    first = _serve(server, _req(0, 3))
    assert first["rid"] == 0 and first["results"][0]["response_ids"] == [4, 7]
    assert first["results"][0]["logprobs"] == [-0.5, -0.5]
    server.handle(_req(1, 0, "generate"))  # in flight when the sleep request comes: it finishes awake first
    server.handle({"op": "sleep", "rid": 2})
    assert [(r["rid"], r.get("slept")) for r in server.conn.sent[1:]] == [(1, None), (2, True)]
    assert _serve(server, {"op": "sleep", "rid": 3})["slept"] is False  # a second sleep finds it asleep
    assert llm.calls == ["step", "step", "reset_prefix_cache", "sleep(1)"]
    again = _serve(server, _req(4, 5))
    assert again["results"][0]["response_ids"] == [6, 7]
    assert llm.calls[4:] == ["wake_up", "step"]  # woken first, once
    _serve(server, _req(5, 5))
    assert llm.calls[6:] == ["step"] and not server.asleep


def test_without_sleep_mode_sleep_changes_nothing(fake_vllm):
    llm = vllm_worker.build_llm(_opts("cpu"))
    server = vllm_worker.Server(llm, _Conn(), sleep_mode=False)
    assert _serve(server, {"op": "sleep", "rid": 0}) == {"rid": 0, "ok": True, "slept": False}
    _serve(server, _req(1, 3))
    assert llm.calls == ["step"]
