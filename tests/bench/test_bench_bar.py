"""``earthrl bench``'s progress bar (bench/cli.py): one bar over every measurement of the command, with the
measurements' own lines and the result lines each on a line of their own, never on the bar's."""

from __future__ import annotations

import argparse

from earthrl.bench import cli


def test_one_bar_over_the_measurements_lines_apart(monkeypatch, capsys):
    def first():
        print("first: its own line")
        return {"value": 1}

    monkeypatch.setitem(cli.BENCHES._entries, "toy", [("first", "first", {}), ("second", "second", {})])
    monkeypatch.setattr(cli, "import_target", {"first": first, "second": lambda: {"value": 2}}.__getitem__)
    cli._run(argparse.Namespace(suite="toy", out=None))
    parts = capsys.readouterr().out.replace("\r", "\n").splitlines()
    # the lines printed while the bar ran stand alone (a bar line starts with "bench:")
    assert "first: its own line" in parts and "toy/first: value=1, bench_wall_s=" in "\n".join(parts)
    assert [p for p in parts if p.startswith("toy/")] == [p for p in parts if "toy/" in p]
    bars = [p for p in parts if p.startswith("bench:")]
    assert bars[-1].startswith("bench: 100%") and "| 2/2 [" in bars[-1]
    assert not any("its own line" in p or "toy/" in p for p in bars)
