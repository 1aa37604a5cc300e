"""``earthrl <command> --help`` opens with EarthRL's own usage line for every command, the Hydra commands
(train, eval, sft, learn) included, before any of Hydra's config listing."""

from __future__ import annotations

import pytest

from earthrl.launch.cli import COMMANDS, main

HYDRA = ("train", "eval", "sft", "learn")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_opens_with_earthrls_usage(command, capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["earthrl", command, "--help"])
    try:
        main([command, "--help"])
    except SystemExit as stop:
        assert stop.code in (0, None)
    out = capsys.readouterr().out
    assert out.startswith(f"usage: earthrl {command} "), out[:200]
    if command in HYDRA:  # EarthRL's lines come before Hydra's listing, never "… is powered by Hydra"
        assert "powered by Hydra" not in out
        assert out.index("Example: earthrl " + command) < out.index("== Configuration groups ==")


@pytest.mark.parametrize("flag", ["--cfg", "-c"])
def test_cfg_with_a_sweep_is_one_line(flag, capsys):
    # Hydra answers --cfg with --multirun by a traceback; the CLI names the pair and the fix first
    with pytest.raises(SystemExit) as stop:
        main(["eval", "-m", "eval.max_tasks=1,2", flag, "job"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == (f"earthrl: error: {flag} prints one job's config: drop -m and give one value "
                                       "per key (one combination of the sweep)\n")
