"""Usage errors of the non-Hydra commands are one line naming the argument, exit 2, nothing started
(`launch/arg_parser.py`; argparse's own two-line usage block is not printed)."""

from __future__ import annotations

import pytest

from earthrl.launch.cli import main


@pytest.mark.parametrize("argv, message", [
    (["export"], "earthrl export: error: the following arguments are required: checkpoint, out"),
    (["export", "a", "b", "--dtype", "int8"], "earthrl export: error: argument --dtype: invalid choice: 'int8' "
                                              "(choose from 'bfloat16', 'float16', 'float32')"),
    (["fetch", "model"], "earthrl fetch: error: the following arguments are required: name"),
    (["catalog", "add"], "earthrl catalog add: error: the following arguments are required: source"),
    (["doctor", "--nope"], "earthrl doctor: error: unrecognized arguments: --nope"),
    (["audit"], "earthrl audit: error: the following arguments are required: suite"),
    (["audit", "nosuch"], "earthrl audit: error: unknown suite 'nosuch'; choose one of: earthbench, earthbench-rsclaw, earthrl-mini, "
                          "earthrl-mini-core, thinkgeo (or the path of a .json/.jsonl task file)"),
])
def test_usage_errors_are_one_line_with_the_help_to_read(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    prog = message.split(": error:")[0]
    assert exit_.value.code == 2 and err == f"{message}; see `{prog} --help`\n"
    assert list(tmp_path.iterdir()) == []
