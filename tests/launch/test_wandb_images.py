"""A run's PNGs reach wandb as images at its end (offline mode, a temporary WANDB_DIR, no network): the
training run's plots (``RunLogger.log_images``, what ``earthrl train`` calls) and ``earthrl learn``'s
``learning.png`` (``launch/learn_report.log_learning_curve``); with ``logger=none`` nothing is logged."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from earthrl.launch.learn_report import log_learning_curve  # noqa: E402
from earthrl.rollout.run_logger import RunLogger  # noqa: E402


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    return tmp_path


def png(path):
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [1, 0])
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=50)
    plt.close(fig)
    return path


def images(run_dir, key):
    """The image files wandb wrote offline for ``key`` (``media/images/<key>_<step>_<hash>.png``)."""
    folder, stem = key.rsplit("/", 1)
    return sorted(p.name.split("_")[0] for p in run_dir.glob(f"wandb/offline-run-*/files/media/images/{folder}/{stem}_*.png"))


def test_the_runs_plots_are_logged_as_images(offline):
    paths = [png(offline / "plots" / "eir_turns.png"), png(offline / "plots" / "advantage_histogram.png")]
    logger = RunLogger(offline, "earthrl", "t", "auto", {})
    assert logger.mode == "offline"
    logger.log_images(paths, step=3)
    logger.finish()
    assert images(offline, "train/plots/eir_turns") == ["eir"]
    assert images(offline, "train/plots/advantage_histogram") == ["advantage"]


def test_learning_png_goes_to_wandb_unless_logging_is_off(offline):
    png(offline / "learning.png")
    assert log_learning_curve(offline, "none", "learn-tiny") is None
    assert log_learning_curve(offline, {"mode": "disabled"}, "learn-tiny") is None
    assert not (offline / "wandb").exists()
    folder = log_learning_curve(offline, None, "learn-tiny")  # the stages' default logger: wandb
    assert folder and folder.startswith(str(offline / "wandb" / "offline-run-"))
    assert images(offline, "learn/plots/learning") == ["learning"]
