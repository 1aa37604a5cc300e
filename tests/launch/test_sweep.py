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
