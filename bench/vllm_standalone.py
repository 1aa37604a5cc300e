"""Standalone vLLM on token-id prompts, timed inside its own process (``earthrl bench rollout``).

Run by path with the vLLM environment's Python (it imports nothing of EarthRL, which that
environment need not have): ``python vllm_standalone.py SPEC.json RESULT.json``. SPEC holds
``model``, ``dtype``, ``max_new_tokens``, ``single_rows``, ``temperature``, ``sets``
(name -> list of token-id prompts) and vLLM's memory setting (``kv_cache_memory_bytes`` on CPU,
``gpu_memory_utilization`` on GPU). For every set it times one batched ``LLM.generate`` over all
prompts and a single stream (the first ``single_rows`` prompts one call each), after one warm-up
call, with ``ignore_eos`` so that every row generates ``max_new_tokens`` tokens; RESULT gets
``{set: {"batched": {"tokens", "seconds"}, "single": {...}}}`` plus ``vllm_version``.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(spec_path: str, out_path: str) -> None:
    """Run the measurement described in ``spec_path`` and write ``out_path`` (see the module doc)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the offline engine in this process
    import vllm
    from vllm import LLM, SamplingParams

    spec = json.loads(open(spec_path).read())
    llm = LLM(model=spec["model"], dtype=spec["dtype"], enable_prefix_caching=True, seed=0,
              max_model_len=int(spec.get("max_model_len", 4096)),
              **{k: spec[k] for k in ("gpu_memory_utilization", "kv_cache_memory_bytes") if k in spec})
    params = SamplingParams(max_tokens=int(spec["max_new_tokens"]), temperature=float(spec["temperature"]),
                            top_p=1.0, ignore_eos=True, logprobs=0)

    def run(prompts: list[list[int]]) -> tuple[int, float]:
        t0 = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs), time.perf_counter() - t0

    first_set = next(iter(spec["sets"].values()))
    run(first_set[:1])  # warm-up: compilation, allocation
    result: dict = {"vllm_version": vllm.__version__}
    for name, prompts in spec["sets"].items():
        tokens, seconds = run(prompts)
        single_tokens, single_seconds = 0, 0.0
        for p in prompts[: int(spec["single_rows"])]:
            n, s = run([p])
            single_tokens, single_seconds = single_tokens + n, single_seconds + s
        result[name] = {"batched": {"tokens": tokens, "seconds": seconds},
                        "single": {"tokens": single_tokens, "seconds": single_seconds}}
    with open(out_path, "w") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
