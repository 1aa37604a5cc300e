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


def _verl_adapter(folder, tiny_model, alpha=0):
    base = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32)
    get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"])).save_pretrained(str(folder))
    cfg = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**cfg, "lora_alpha": alpha}))
    return folder


def _cli(argv, capsys):
    from earthrl.launch.export_cmd import main

    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.err.removeprefix("earthrl: error: ").rstrip("\n"), out.out


def test_export_cli_messages_name_the_flag_the_folder_and_the_source(tmp_path, tiny_model, capsys):
    adapter = _verl_adapter(tmp_path / "lora_adapter", tiny_model)
    capsys.readouterr()  # transformers' loading bar
    # which of the two verl flags is missing
    assert _cli([adapter, tmp_path / "o", "--lora-alpha", "8"], capsys)[:2] == (
        2, f"{adapter} is a verl LoRA adapter folder (no meta.json): also give --base-model <the base HF folder the "
           "run trained (model.path)>")
    assert _cli([adapter, tmp_path / "o", "--base-model", tiny_model], capsys)[:2] == (
        2, f"{adapter} is a verl LoRA adapter folder (no meta.json): also give --lora-alpha <the run's model.lora.alpha>")
    # the base model's source is the flag, not a meta.json
    rc, err, _ = _cli([adapter, tmp_path / "o", "--base-model", tmp_path / "nonexist", "--lora-alpha", "8"], capsys)
    assert rc == 2 and err == (f"base model '{tmp_path / 'nonexist'}' (from --base-model) is not an HF folder nor a "
                               "fetched model; fetch it (earthrl fetch model <name>) or give --base-model the base HF "
                               "folder the run trained")
    # a folder that is not there
    rc, err, _ = _cli([tmp_path / "nothere", tmp_path / "o"], capsys)
    assert rc == 2 and err.startswith(f"checkpoint {tmp_path / 'nothere'}: no such folder; give an EarthRL checkpoint")
    # a non-empty OUT names the CLI flag
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    rc, err, _ = _cli([adapter, tmp_path / "full", "--base-model", tiny_model, "--lora-alpha", "8"], capsys)
    assert rc == 2 and err == f"{tmp_path / 'full'} exists and is not empty; choose another output folder or pass --overwrite"
    assert not (tmp_path / "o").exists()


def test_export_cli_refuses_verl_flags_that_differ_from_an_earthrl_checkpoint(tmp_path, tiny_model, capsys):
    ckpt = tmp_path / "step_000001"
    _verl_adapter(ckpt / "adapter", tiny_model, alpha=8)
    (ckpt / "meta.json").write_text(json.dumps({"base_model": str(tiny_model), "step": 1}))
    capsys.readouterr()  # transformers' loading bar
    why = f"only for a verl adapter folder; {ckpt} is an EarthRL checkpoint (meta.json)"
    assert _cli([ckpt, tmp_path / "o", "--lora-alpha", "3"], capsys)[:2] == (
        2, f"--lora-alpha 3: {why} whose adapter has lora_alpha 8; drop --lora-alpha")
    assert _cli([ckpt, tmp_path / "o", "--base-model", tmp_path], capsys)[:2] == (
        2, f"--base-model {tmp_path}: {why} whose base model is {str(tiny_model)!r}; drop --base-model "
           "(or fix base_model in its meta.json)")
    assert not (tmp_path / "o").exists()
    # the checkpoint's own values are accepted, and the export uses them
    rc, _, out = _cli([ckpt, tmp_path / "o", "--lora-alpha", "8", "--base-model", tiny_model], capsys)
    assert rc == 0 and out.strip() == str(tmp_path / "o")
    assert json.loads((tmp_path / "o" / "earthrl_export.json").read_text())["lora_alpha"] == 8


def test_export_cli_refuses_non_finite_alpha_and_file_paths(tmp_path, tiny_model, capsys):
    adapter = _verl_adapter(tmp_path / "lora_adapter", tiny_model)
    capsys.readouterr()  # transformers' loading bar
    for bad in ("nan", "inf", "-inf"):
        rc, err, _ = _cli([adapter, tmp_path / "o", "--base-model", tiny_model, f"--lora-alpha={bad}"], capsys)
        assert (rc, err) == (2, f"--lora-alpha={float(bad)}: give the alpha the run trained with (model.lora.alpha)")
    afile = tmp_path / "afile"
    afile.write_text("x")
    rc, err, _ = _cli([adapter, afile, "--base-model", tiny_model, "--lora-alpha", "8"], capsys)
    assert (rc, err) == (2, f"OUT {afile} is a file; name a folder (new or empty) to write the export into")
    assert afile.read_text() == "x"
    rc, err, _ = _cli([adapter, afile / "sub", "--base-model", tiny_model, "--lora-alpha", "8"], capsys)
    assert (rc, err) == (2, f"OUT {afile / 'sub'} is under {afile}, which is a file; name a folder (new or empty) "
                            "to write the export into")
    rc, err, _ = _cli([afile, tmp_path / "o"], capsys)
    assert rc == 2 and err.startswith(f"checkpoint {afile} is a file, not a checkpoint folder; give an EarthRL")
    assert not (tmp_path / "o").exists()


def test_export_cli_base_model_replaces_a_recorded_base_that_is_gone(tmp_path, tiny_model, capsys):
    ckpt = tmp_path / "step_000001"
    _verl_adapter(ckpt / "adapter", tiny_model, alpha=8)
    gone = tmp_path / "moved_base"
    (ckpt / "meta.json").write_text(json.dumps({"base_model": str(gone), "step": 1}))
    capsys.readouterr()  # transformers' loading bar
    rc, err, _ = _cli([ckpt, tmp_path / "o"], capsys)
    assert rc == 2 and err.startswith(f"base model '{gone}' (from meta.json) is not an HF folder")
    rc, err, out = _cli([ckpt, tmp_path / "o", "--base-model", tiny_model], capsys)
    assert rc == 0 and out.strip() == str(tmp_path / "o")
    assert err.splitlines()[0] == f"earthrl: note: --base-model {tiny_model} replaces the recorded base model '{gone}' (not found)"
    assert json.loads((tmp_path / "o" / "earthrl_export.json").read_text())["base_model"] == str(tiny_model)


def test_export_cli_dtype_saves_the_merged_weights_in_it(tmp_path, tiny_model, capsys):
    """`--dtype float16` (a GPU without bf16 serving the export): the saved weights are the float32 merge
    rounded to float16, and the provenance file says so; an unknown dtype is argparse's refusal (exit 2)."""
    from safetensors.torch import load_file

    ckpt = tmp_path / "step_000001"
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)  # a non-trivial adapter: the merge changes q_proj
    model.save_pretrained(str(ckpt / "adapter"))
    (ckpt / "meta.json").write_text(json.dumps({"base_model": str(tiny_model), "step": 1}))
    for dtype in ("float32", "float16"):
        rc, err, _ = _cli([ckpt, tmp_path / dtype, "--dtype", dtype], capsys)
        assert rc == 0, err
        assert json.loads((tmp_path / dtype / "earthrl_export.json").read_text())["dtype"] == dtype
    full, half = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("float32", "float16"))
    assert full.keys() == half.keys() and len(full) > 0
    base = load_file(str(tiny_model / "model.safetensors"))
    q = next(k for k in full if k.endswith("q_proj.weight"))
    assert (full[q] - base[q].float()).abs().max() > 1e-2  # the merge is in the saved weights
    for k in full:  # float16 merge = float32 merge to float16's precision (3 significant digits)
        assert full[k].dtype == torch.float32 and half[k].dtype == torch.float16, k
        torch.testing.assert_close(half[k].float(), full[k], atol=2e-3, rtol=2e-3)
    with pytest.raises(SystemExit) as exit_:
        _cli([ckpt, tmp_path / "o", "--dtype", "int8"], capsys)
    assert exit_.value.code == 2 and "invalid choice: 'int8'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
