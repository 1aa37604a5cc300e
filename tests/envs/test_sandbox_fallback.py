"""The sandbox never weakens by itself: a bubblewrap that fails at run time is a one-line
refusal unless ``env.format_options.sandbox.allow_weaker=true``, which says what the weaker backend lacks;
bubblewrap works through symbolic links (venv, data) and binds only what the interpreter needs,
not the folders of the parent's own ``sys.path``."""

from __future__ import annotations

import logging
import os
import socket
import sys

import pytest

import earthrl.envs.sandbox.bwrap as bwrap_mod
from earthrl.envs.errors import ConfigError
from earthrl.envs.sandbox.bwrap import bwrap_probe
from earthrl.envs.sandbox.interpreter import interpreter_layout
from earthrl.envs.sandbox.parent import LACKS, Sandbox, SandboxUnavailable, sandbox_backend
from earthrl.launch.config_schema.env import EnvConfig
from earthrl.launch.job_inputs import check_env
from tests.envs.sandbox_kit import BYPASS, LIMITS, assert_serving, skip_or_fail_without_bwrap

#: what bubblewrap printed where the venv was reached through a symlink
BWRAP_ERROR = "bwrap: execvp /srv/link/.venv/bin/python: No such file or directory"


def _clear():
    for cached in (bwrap_probe, sandbox_backend, interpreter_layout):
        cached.cache_clear()


@pytest.fixture
def fresh_probes():
    """Probes re-run in the test and again after it (the machine's real answer comes back)."""
    _clear()
    yield
    _clear()


@pytest.fixture
def failing_bwrap(fresh_probes, tmp_path, monkeypatch):
    """A bubblewrap that is installed but fails when run (exit 1 with bwrap's error line)."""
    script = tmp_path / "bwrap"
    script.write_text(f"#!/bin/sh\necho '{BWRAP_ERROR}' >&2\nexit 1\n")
    script.chmod(0o755)
    monkeypatch.setattr(bwrap_mod, "bwrap_path", lambda: str(script))
    return script


def test_failing_bwrap_is_refused_in_one_line_before_anything_runs(failing_bwrap, tmp_path):
    with pytest.raises(SandboxUnavailable) as e:
        Sandbox(tmp_path / "ws", LIMITS)
    msg = str(e.value)
    assert "\n" not in msg
    assert f"bubblewrap and it cannot run here (bwrap cannot run here: {BWRAP_ERROR})" in msg
    assert "`apt-get install bubblewrap`" in msg and "unprivileged user namespaces" in msg
    assert "set env.format_options.sandbox.allow_weaker=true" in msg
    assert not (tmp_path / "ws").exists()  # refused before anything was made
    with pytest.raises(ConfigError) as c:  # the config check that runs before Ray and the model
        check_env(EnvConfig(action_format="codeact"))
    assert str(c.value) == msg


def test_failing_bwrap_with_allow_weaker_runs_and_says_what_it_lacks(failing_bwrap, tmp_path,
                                                                    caplog):
    with caplog.at_level(logging.WARNING, logger="earthrl.envs.sandbox.parent"):
        with Sandbox(tmp_path / "ws", LIMITS, allow_weaker=True) as sb:
            assert_serving(sb)
            iso = sb.isolation
    assert iso["backend"] in ("kernel", "weaker")
    assert not iso["bwrap"] and not iso["mountns"] and not iso["ipcns"] and not iso["seccomp"]
    assert iso["lacks"] == LACKS[iso["backend"]]
    assert "seccomp filter" in iso["lacks"] and "capability drop" in iso["lacks"]
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and "\n" not in said[0]
    assert said[0] == (f"CodeAct sandbox on the {iso['backend']!r} backend "
                       f"(env.format_options.sandbox.allow_weaker=true; bubblewrap cannot run: bwrap cannot run "
                       f"here: {BWRAP_ERROR}): it lacks {iso['lacks']}")
    with pytest.raises(ValueError, match="allow_weaker=True"):
        Sandbox(tmp_path / "ws2", LIMITS, isolate=False)


def test_symlinked_venv_and_data_run_in_bubblewrap(fresh_probes, tmp_path, monkeypatch):
    skip_or_fail_without_bwrap(sandbox_backend())
    _clear()
    venv = os.path.realpath(sys.prefix)
    link = tmp_path / "venv-link"
    link.symlink_to(venv)
    monkeypatch.setattr(sys, "executable", str(link / "bin" / os.path.basename(sys.executable)))
    data = tmp_path / "data"
    data.mkdir()
    (data / "scene.txt").write_text("pixels")
    data_link = tmp_path / "data-link"
    data_link.symlink_to(data)
    with Sandbox(tmp_path / "ws", LIMITS, read_roots=[data_link]) as sb:
        res = sb.exec("import sys, numpy\nprint(sys.prefix)\n"
                      f"print(open({str(data_link / 'scene.txt')!r}).read())")
        iso = sb.isolation
    assert iso["backend"] == "bwrap" and iso["mountns"] and iso["seccomp"] and iso["lacks"] == ""
    assert (res.stdout, res.error) == (f"{venv}\npixels\n", False), res.observation


def test_unix_socket_in_a_parent_sys_path_folder_is_unreachable(fresh_probes, tmp_path,
                                                                monkeypatch):
    skip_or_fail_without_bwrap(sandbox_backend())
    folder = tmp_path / "sp"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))  # e.g. a test root or PYTHONPATH of the parent
    path = str(folder / "s.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(1)
    srv.settimeout(0.5)
    code = (BYPASS + "import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n"
            f"    s.connect({path!r})\n    print('connected')\n"
            "except OSError as e:\n    print(type(e).__name__, e.errno)\n")
    try:
        with Sandbox(tmp_path / "ws", LIMITS) as sb:
            res = sb.exec(code)
            assert_serving(sb)
        with pytest.raises(socket.timeout):
            srv.accept()
    finally:
        srv.close()
    assert res.stdout == "FileNotFoundError 2\n", res.observation
