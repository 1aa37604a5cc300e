"""Export of a verl-style adapter folder (lora_alpha 0 in its config, as verl's merger writes it): the trained
alpha is written and the merged model's logits equal base + adapter (tiny model, float32)."""

from __future__ import annotations

import json

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

from earthrl.models.export import ExportError, export_verl_adapter


def test_verl_adapter_exports_with_trained_alpha_and_merges(tmp_path, tiny_model):
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)  # a non-trivial adapter
    folder = tmp_path / "verl_ckpt" / "lora_adapter"
    model.save_pretrained(str(folder))
    cfg = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**cfg, "lora_alpha": 0}))  # verl's merger bug

    ids = torch.tensor([[1, 5, 9, 42, 7, 3]])
    with torch.no_grad():
        want = model(input_ids=ids).logits
        plain = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32)(input_ids=ids).logits
    assert (want - plain).abs().max() > 1e-3  # the adapter changes the logits

    with pytest.raises(ExportError, match="lora_alpha=0"):
        export_verl_adapter(folder, tmp_path / "bad", tiny_model, lora_alpha=0)
    out = export_verl_adapter(folder, tmp_path / "export", tiny_model, lora_alpha=16, dtype="float32")
    assert json.loads((out / "adapter" / "adapter_config.json").read_text())["lora_alpha"] == 16
    assert json.loads((out / "earthrl_export.json").read_text())["checkpoint"] == str(folder.resolve())
    merged = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    with torch.no_grad():
        got = merged(input_ids=ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # and the exported adapter itself reloads on the base to the same logits
    again = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32),
                                      str(out / "adapter"))
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids).logits, want, atol=1e-5, rtol=1e-5)


def test_earthrl_export_cli_takes_a_verl_adapter_folder(tmp_path, tiny_model):
    from tests.launch.test_train_e2e import earthrl

    base = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32)
    folder = tmp_path / "global_step_2" / "actor" / "lora_adapter"
    get_peft_model(base, LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj"])).save_pretrained(str(folder))
    cfg = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**cfg, "lora_alpha": 0}))
    bad = earthrl("export", str(folder), "out", cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "also give --base-model" in bad.stderr and not (tmp_path / "out").exists()
    earthrl("export", str(folder), "out", "--base-model", str(tiny_model), "--lora-alpha", "16", cwd=tmp_path)
    assert json.loads((tmp_path / "out" / "adapter" / "adapter_config.json").read_text())["lora_alpha"] == 16
    assert (tmp_path / "out" / "config.json").is_file()
