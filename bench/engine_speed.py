"""``earthrl bench rollout``: tokens/s of EarthRL's rollout engines against bare transformers
``generate`` and standalone vLLM, on the same prompts and lengths, batched and single stream.

Runners, one process at a time (each is started, measured and stopped before the next):

    earthrl_<engine>  every engine of :data:`~earthrl.rollout.engines.ENGINES` ("hf", "vllm", …) as the
                      Ray actor training uses, timed around ``generate`` from the driver (Ray transfer
                      included, as the agent loop sees it); an engine that cannot start is skipped
                      with its reason (e.g. the vLLM environment is not built)
    transformers      ``AutoModelForCausalLM.generate`` in this process, left-padded batch
    vllm_standalone   ``vllm.LLM.generate`` in the vLLM environment's Python (``vllm_standalone.py``, the
                      Python of :func:`~earthrl.rollout.vllm_engine.vllm_python`), timed inside that
                      process; skipped when there is none

Prompts: real earthrl-mini-core first-turn prompts and their second turns
(:func:`~earthrl.bench.inputs.bench_prompts`). Lengths: the only stop id is one the model
cannot sample (and vLLM runs with ``ignore_eos``), so every row generates ``max_new_tokens``
tokens; tokens are counted from what each runner returned. Sampling at temperature 1, top-p 1, as
in training. Goals: EarthRL with vLLM ≥ 2× its HF engine; EarthRL's vLLM engine ≥ 90 %
of standalone vLLM.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from earthrl.bench.inputs import bench_prompts, resolve_model, unreachable_stop_id
from earthrl.bench.local_ray import init_local_ray
from earthrl.models.dtype import resolve_dtype
from earthrl.rollout.engines import ENGINES, make_engine
from earthrl.rollout.hf_engine import SamplingParams
from earthrl.rollout.vllm_engine import DEFAULT_KV_CACHE_GIB
from earthrl.rollout.vllm_env import vllm_python

STANDALONE = Path(__file__).with_name("vllm_standalone.py")
TEMPERATURE = 1.0

Timed = dict[str, dict[str, dict[str, float]]]  # set -> "batched"|"single" -> {"tokens", "seconds"}


def measure_generate(generate: Callable[[list[list[int]]], list[int]], sets: dict, single_rows: int) -> Timed:
    """Time ``generate(prompts) -> generated token counts`` batched over each set and single stream
    over its first ``single_rows`` prompts, after one warm-up call."""
    generate(next(iter(sets.values()))[:1])
    out: Timed = {}
    for name, prompts in sets.items():
        t0 = time.perf_counter()
        tokens = sum(generate(prompts))
        batched = {"tokens": tokens, "seconds": time.perf_counter() - t0}
        single = {"tokens": 0, "seconds": 0.0}
        for p in prompts[:single_rows]:
            t0 = time.perf_counter()
            single["tokens"] += sum(generate([p]))
            single["seconds"] += time.perf_counter() - t0
        out[name] = {"batched": batched, "single": single}
    return out


def _earthrl_engine(name: str, model_path: Path, dtype: str, threads: int, max_new_tokens: int):
    def run(sets: dict, single_rows: int) -> Timed:
        import ray

        actor = make_engine(name, model_path=str(model_path), stop_ids=[unreachable_stop_id(model_path)], lora=None,
                              stop_strings=[], dtype=dtype, num_threads=threads)
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=TEMPERATURE, top_p=1.0, seed=0,
                                ignore_eos=True)
        try:
            ray.get(actor.ping.remote())
            return measure_generate(lambda ps: [len(r["response_ids"]) for r in ray.get(actor.generate.remote(ps, params))],
                            sets, single_rows)
        finally:
            ray.kill(actor, no_restart=True)
    return run


def _transformers(model_path: Path, dtype: str, threads: int, max_new_tokens: int):
    def run(sets: dict, single_rows: int) -> Timed:
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(threads)
        model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=getattr(torch, resolve_dtype(dtype)[0])).eval()
        pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
        stop = unreachable_stop_id(model_path)

        def generate(prompts: list[list[int]]) -> list[int]:
            width = max(len(p) for p in prompts)
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
            with torch.inference_mode():
                out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=True,  # noqa: F821 - model: bound in run(), deleted after the measurement
                                     temperature=TEMPERATURE, top_p=1.0, top_k=None, eos_token_id=[stop], pad_token_id=pad)
            return [int(n) for n in (out[:, width:] != -1).sum(dim=1)]

        try:
            return measure_generate(generate, sets, single_rows)
        finally:
            del model
            gc.collect()
    return run


def _vllm_standalone(model_path: Path, dtype: str, max_new_tokens: int, python: str | None, timeout_s: float):
    def run(sets: dict, single_rows: int) -> Timed:
        if python is None:
            raise RuntimeError("no Python with vLLM: run `make vllm` (builds .venv-vllm) or set EARTHRL_VLLM_PYTHON")
        with tempfile.TemporaryDirectory(prefix="earthrl-bench-vllm-") as tmp:
            spec, result = Path(tmp) / "spec.json", Path(tmp) / "result.json"
            spec.write_text(json.dumps({"model": str(model_path), "dtype": resolve_dtype(dtype)[0], "sets": sets,
                                        "max_new_tokens": max_new_tokens, "single_rows": single_rows,
                                        "temperature": TEMPERATURE, **_vllm_memory()}))
            proc = subprocess.run([str(python), str(STANDALONE), str(spec), str(result)], capture_output=True, text=True,
                                  timeout=timeout_s, env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
            if proc.returncode != 0:
                lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
                raise RuntimeError(f"standalone vLLM exited {proc.returncode}: {lines[-1] if lines else 'no output'}")
            out = json.loads(result.read_text())
        out.pop("vllm_version", None)
        return out
    return run


def _vllm_memory() -> dict:
    """vLLM's memory setting the EarthRL engine uses by default (GPU: ``gpu_memory_utilization`` 0.5; CPU:
    an explicit KV cache of :data:`~earthrl.rollout.vllm_engine.DEFAULT_KV_CACHE_GIB`, as
    :func:`earthrl.rollout.vllm_worker.build_llm` passes it)."""
    if torch.cuda.is_available():
        return {"gpu_memory_utilization": 0.5}
    return {"kv_cache_memory_bytes": int(DEFAULT_KV_CACHE_GIB * 2**30)}


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _attempt(name: str, run: Callable, sets: dict, single_rows: int) -> Timed | str:
    """``run(sets, single_rows)``, or the one-line reason it could not (a runner that cannot start is
    reported and skipped; the others go on)."""
    try:
        return run(sets, single_rows)
    except Exception as exc:  # noqa: BLE001 - see above
        reason = _one_line(exc)
        print(f"rollout/{name}: skipped ({reason})", flush=True)
        return reason


def _ratio(out: dict, num: str, den: str) -> float | None:
    a, b = out.get(f"{num}_tok_s"), out.get(f"{den}_tok_s")
    return a / b if a and b else None


def bench_rollout(model: str = "qwen2.5-coder-0.5b", rows: int = 4, max_new_tokens: int = 32, single_rows: int = 1,
                  engines: list[str] | None = None, dtype: str = "auto", threads: int = 2,
                  vllm_timeout_s: float = 900.0) -> dict:
    """Tokens/s of every runner (module doc) on the same first- and second-turn prompts.

    Args:
        model: a fetched model name or an HF folder (``tiny-llama`` for tests).
        rows: prompts per set (batched: one call over all of them).
        max_new_tokens: generated tokens per row (every row generates exactly this many).
        single_rows: prompts of each set also generated one call each (the single stream).
        engines: EarthRL engines to run (default: every name in ``ENGINES``).
        dtype: ``model.dtype`` rule for every runner (:func:`~earthrl.models.dtype.resolve_dtype`).
        threads: torch threads of the in-process and actor runners.
        vllm_timeout_s: limit of the standalone vLLM process.

    Returns:
        flat dict: ``rows``, ``single_rows``, ``max_new_tokens``, ``turn1_prompt_tokens`` /
        ``turn2_prompt_tokens`` (mean), ``dtype``; per runner ``<runner>_<turn1|turn2>_<batched|single>_tokens``
        and ``…_tok_s``, ``<runner>_tok_s`` (batched, both sets), ``<runner>_single_tok_s``,
        ``<runner>_batched_over_single``, or ``<runner>_skipped`` (the reason); ratios ``vllm_over_hf``
        (goal ≥ 2), ``earthrl_vllm_over_standalone`` (goal ≥ 0.9), ``earthrl_hf_over_transformers``
        when both sides ran.

    Raises:
        FileNotFoundError: the model is not fetched.
        ValueError: ``rows`` or ``single_rows`` out of range, an unknown engine.
    """
    if not 0 <= single_rows <= rows:
        raise ValueError(f"single_rows={single_rows}: use 0..rows ({rows})")
    unknown = [e for e in (engines or []) if e not in ENGINES]
    if unknown:
        raise ValueError(f"engines {unknown}: not in the engine registry ({', '.join(ENGINES.names())})")
    from transformers import AutoTokenizer

    path = resolve_model(model)
    prompts = bench_prompts(AutoTokenizer.from_pretrained(str(path)), rows)
    sets = {"turn1": prompts.first, "turn2": prompts.second}
    runners = {f"earthrl_{e}": _earthrl_engine(e, path, dtype, threads, max_new_tokens) for e in (engines or ENGINES.names())}
    runners["transformers"] = _transformers(path, dtype, threads, max_new_tokens)
    runners["vllm_standalone"] = _vllm_standalone(path, dtype, max_new_tokens, vllm_python(), vllm_timeout_s)
    out: dict = {"model": path.name, "dtype": resolve_dtype(dtype)[0], "rows": rows, "single_rows": single_rows,
                 "max_new_tokens": max_new_tokens,
                 **{f"{k}_prompt_tokens": sum(map(len, v)) / len(v) for k, v in sets.items()}}
    import ray

    own_ray = init_local_ray(1, configure_logging=False)
    try:
        results = {name: _attempt(name, run, sets, single_rows) for name, run in runners.items()}
    finally:
        if own_ray:
            ray.shutdown()
    for name, timed in results.items():
        if isinstance(timed, str):
            out[f"{name}_skipped"] = timed
            continue
        for mode in ("batched", "single"):
            tokens = sum(timed[s][mode]["tokens"] for s in sets)
            seconds = sum(timed[s][mode]["seconds"] for s in sets)
            for s in sets:
                t = timed[s][mode]
                out[f"{name}_{s}_{mode}_tokens"] = t["tokens"]
                out[f"{name}_{s}_{mode}_tok_s"] = t["tokens"] / t["seconds"] if t["seconds"] else 0.0
            out[f"{name}_{'tok_s' if mode == 'batched' else 'single_tok_s'}"] = tokens / seconds if seconds else 0.0
        if out[f"{name}_single_tok_s"]:
            out[f"{name}_batched_over_single"] = out[f"{name}_tok_s"] / out[f"{name}_single_tok_s"]
    for key, num, den in (("vllm_over_hf", "earthrl_vllm", "earthrl_hf"),
                          ("earthrl_vllm_over_standalone", "earthrl_vllm", "vllm_standalone"),
                          ("earthrl_hf_over_transformers", "earthrl_hf", "transformers")):
        if (r := _ratio(out, num, den)) is not None:
            out[key] = r
    return out
