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
