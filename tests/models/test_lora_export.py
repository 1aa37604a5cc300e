"""LoRA helpers and merged export: merged logits equal base + adapter; alpha survives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from earthrl.launch.config_schema import defaults
from earthrl.models.export import ExportError, export_merged
from earthrl.models.lora import DEFAULT_TARGET_MODULES, attach_lora, lora_config

PROMPT = [{"role": "user", "content": "Compute the NDVI of the scene."}]
RANK, ALPHA = 4, 16


def _load(path, dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).eval()


def test_lora_config_defaults_and_validation():
    cfg = lora_config(rank=8, alpha=16, dropout=0.05)
    assert set(cfg.target_modules) == set(DEFAULT_TARGET_MODULES) and cfg.r == 8 and cfg.lora_alpha == 16
    assert cfg.task_type == "CAUSAL_LM"
    assert set(lora_config(8, 16, 0.0, ["q_proj"]).target_modules) == {"q_proj"}
    for bad in ({"rank": 0}, {"alpha": 0}, {"dropout": 1.0}, {"target_modules": []}):
        with pytest.raises(ValueError):
            lora_config(**{"rank": 8, "alpha": 16, "dropout": 0.0, **bad})
    with pytest.raises(TypeError, match="dropout"):  # no values of its own: the config's model.lora gives them
        lora_config(rank=8, alpha=16)
    schema = lora_config(**defaults("model.lora"))
    assert (schema.r, schema.lora_alpha, schema.lora_dropout) == (16, 32.0, 0.0)


def test_attach_lora_trains_only_adapters(tiny_llama_dir):
    model = attach_lora(_load(tiny_llama_dir), lora_config(RANK, ALPHA, 0.0))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert {n.split(".")[-4] for n in trainable} == set(DEFAULT_TARGET_MODULES)
    attach_lora(model, lora_config(RANK, ALPHA, 0.0, ["q_proj"]), adapter_name="manager")
    assert set(model.peft_config) == {"default", "manager"} and model.active_adapter == "manager"
    with pytest.raises(ValueError, match="already attached"):
        attach_lora(model, lora_config(RANK, ALPHA, 0.0), adapter_name="manager")
    with pytest.raises(ValueError, match="no LoRA target"):
        attach_lora(_load(tiny_llama_dir), lora_config(RANK, ALPHA, 0.0, ["c_attn"]))


@pytest.fixture(scope="module")
def checkpoint(tiny_llama_dir, tmp_path_factory):
    """A trainer-style checkpoint of tiny-llama with non-zero random LoRA A and B."""
    model = attach_lora(_load(tiny_llama_dir), lora_config(RANK, ALPHA, 0.0))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.3)
    ckpt = tmp_path_factory.mktemp("ckpt") / "step_3"
    model.save_pretrained(str(ckpt / "adapter"))
    (ckpt / "meta.json").write_text(json.dumps({"base_model": str(tiny_llama_dir), "step": 3}))
    return ckpt, model.eval()


def _prompt_ids(folder):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    return tok.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def test_export_matches_base_plus_adapter(checkpoint, tiny_llama_dir, tmp_path):
    ckpt, peft_model = checkpoint
    out = export_merged(ckpt, tmp_path / "merged", dtype="float32")
    ids = _prompt_ids(out)
    merged = _load(out)
    expected, got = _logits(peft_model, ids), _logits(merged, ids)
    assert (expected - got).abs().max().item() < 1e-3
    with peft_model.disable_adapter():
        base_logits = _logits(peft_model, ids)
    assert (base_logits - got).abs().max().item() > 1e-2  # the adapter really changed the model
    assert not any("lora" in k for k in merged.state_dict())

    new = merged.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert new.shape == (1, ids.shape[1] + 4)

    adapter_cfg = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter_cfg["lora_alpha"] == ALPHA and adapter_cfg["r"] == RANK
    assert (out / "adapter" / "adapter_model.safetensors").is_file()
    record = json.loads((out / "earthrl_export.json").read_text())
    assert record["step"] == 3 and record["lora_alpha"] == ALPHA and record["dtype"] == "float32"
    assert (out / "tokenizer.json").is_file() and (out / "chat_template.jinja").is_file()

    with pytest.raises(ExportError, match="not empty"):
        export_merged(ckpt, out)
    assert export_merged(ckpt, out, overwrite=True) == out  # default bf16
    assert _load(out, dtype=None).dtype == torch.bfloat16
    assert [p.name for p in tmp_path.iterdir()] == ["merged"]


def test_export_repairs_verl_zero_alpha(checkpoint, tmp_path):
    ckpt, peft_model = checkpoint
    verl_ckpt = tmp_path / "verl_ckpt"
    shutil.copytree(ckpt, verl_ckpt)
    cfg_path = verl_ckpt / "adapter" / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["lora_alpha"] = 0
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(ExportError, match="lora_alpha 0"):
        export_merged(verl_ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists()

    meta = json.loads((verl_ckpt / "meta.json").read_text())
    (verl_ckpt / "meta.json").write_text(json.dumps({**meta, "lora_alpha": ALPHA}))
    out = export_merged(verl_ckpt, tmp_path / "out", dtype="float32")
    assert json.loads((out / "adapter" / "adapter_config.json").read_text())["lora_alpha"] == ALPHA
    ids = _prompt_ids(out)
    assert (_logits(peft_model, ids) - _logits(_load(out), ids)).abs().max().item() < 1e-3


@pytest.mark.parametrize("missing", ["meta.json", "adapter/adapter_config.json", "adapter/adapter_model.safetensors"])
def test_export_missing_file_is_one_line(checkpoint, tmp_path, missing):
    broken = tmp_path / "ckpt"
    shutil.copytree(checkpoint[0], broken)
    (broken / missing).unlink()
    with pytest.raises(ExportError) as info:
        export_merged(broken, tmp_path / "out")
    assert missing in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()


def test_export_unknown_base(checkpoint, tmp_path, tmp_home):
    broken = tmp_path / "ckpt"
    shutil.copytree(checkpoint[0], broken)
    (broken / "meta.json").write_text(json.dumps({"base_model": str(Path("/nonexistent/base")), "step": 1}))
    with pytest.raises(ExportError, match="fetch it"):
        export_merged(broken, tmp_path / "out")
