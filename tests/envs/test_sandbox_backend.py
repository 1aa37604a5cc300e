"""Which boundary the CodeAct sandbox gets: bubblewrap; where it cannot run, a
one-line refusal unless allow_weaker, which picks the kernel layers where they work."""

from __future__ import annotations

import pytest

import earthrl.envs.sandbox.parent as sandbox_mod
from earthrl.envs.sandbox.parent import Sandbox, SandboxUnavailable, sandbox_backend
from earthrl.launch.doctor import check_landlock, check_userns
from tests.envs.sandbox_kit import BYPASS, LIMITS, assert_serving, skip_or_fail_without_bwrap, skip_without


@pytest.fixture
def no_bwrap(monkeypatch):
    """This machine as one without a usable bubblewrap (probes re-run, caches restored)."""
    monkeypatch.setattr(sandbox_mod, "bwrap_probe", lambda: (False, "bwrap is not installed"))
    sandbox_backend.cache_clear()
    yield monkeypatch
    sandbox_backend.cache_clear()


def test_this_machine_uses_bubblewrap_with_seccomp(tmp_path):
    sandbox_backend.cache_clear()
    skip_or_fail_without_bwrap(sandbox_backend())
    with Sandbox(tmp_path / "ws", LIMITS) as sb:
        assert_serving(sb)
        iso = sb.isolation
    assert iso["bwrap"] and iso["mountns"] and iso["ipcns"] and iso["netns"]
    assert iso["seccomp"] and iso["landlock"] > 0


def test_kernel_layers_when_bubblewrap_cannot_run_and_allow_weaker(no_bwrap, tmp_path):
    if not sandbox_mod.isolation_prefix():
        skip_without("unshare's user and network namespaces", check_userns)
    with Sandbox(tmp_path / "ws", LIMITS, allow_weaker=True) as sb:
        assert_serving(sb)
        if not sb.isolation["landlock"]:
            skip_without("the Landlock LSM", check_landlock)
        iso = sb.isolation
        res = sb.exec(BYPASS + f"open({str(tmp_path / 'escape')!r}, 'w')")
    assert iso["backend"] == "kernel" and not iso["bwrap"] and iso["netns"]
    assert res.error_kind == "code_error" and "PermissionError: [Errno 13]" in res.message
    assert not (tmp_path / "escape").exists()


def test_refuses_in_one_line_without_any_isolation(no_bwrap, tmp_path):
    no_bwrap.setattr(sandbox_mod, "isolation_prefix", lambda: ())
    with pytest.raises(SandboxUnavailable) as e:
        Sandbox(tmp_path / "ws", LIMITS)
    msg = str(e.value)
    assert "\n" not in msg and "bwrap is not installed" in msg
    assert "apt-get install bubblewrap" in msg and "env.format_options.sandbox.allow_weaker=true" in msg
    assert not (tmp_path / "ws").exists()  # refused before anything was made
    from earthrl.envs.errors import ConfigError
    from earthrl.envs.sandbox.parent import SandboxSettings
    from earthrl.launch.config_schema.env import EnvConfig
    from earthrl.launch.job_inputs import check_env
    from earthrl.rollout.runtime import env_kwargs

    env = EnvConfig(action_format="codeact")
    with pytest.raises(ConfigError, match="apt-get install bubblewrap"):
        check_env(env)
    env.format_options.sandbox = SandboxSettings(allow_weaker=True)
    check_env(env)
    assert env_kwargs(env)["format_options"] == {"limits": {}, "sandbox": SandboxSettings(allow_weaker=True)}


def test_allow_weaker_runs_and_says_so(no_bwrap, tmp_path):
    no_bwrap.setattr(sandbox_mod, "isolation_prefix", lambda: ())
    with Sandbox(tmp_path / "ws", LIMITS, allow_weaker=True) as sb:
        assert_serving(sb)
        res = sb.exec("open('/etc/escape', 'w')")
        iso = sb.isolation
    assert iso["backend"] == "weaker" and not iso["bwrap"] and not iso["netns"]
    assert res.error_kind == "sandbox_violation"  # the inner layers still refuse
