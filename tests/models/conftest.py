"""Fixtures for the models tests.

Each test runs against a temporary ``EARTHRL_HOME`` whose ``downloads/`` is a link to the
real downloads cache (``earthrl_home()/downloads`` as the environment had it at start), so
registry wheels are downloaded once per machine and reused by every run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from earthrl.envs.paths import downloads_dir

REAL_DOWNLOADS = downloads_dir()


def _home_with_shared_downloads(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    REAL_DOWNLOADS.mkdir(parents=True, exist_ok=True)
    link = root / "downloads"
    if not link.exists():
        link.symlink_to(REAL_DOWNLOADS, target_is_directory=True)
    return root


@pytest.fixture
def tmp_home(tmp_path, monkeypatch) -> Path:
    """A fresh EARTHRL_HOME for one test (downloads shared with the real cache)."""
    home = _home_with_shared_downloads(tmp_path / "earthrl_home")
    monkeypatch.setenv("EARTHRL_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    """The tiny-llama folder built once per session by the real ``fetch_model`` path."""
    from earthrl.models.fetch import fetch_model

    home = _home_with_shared_downloads(tmp_path_factory.mktemp("tiny_home"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EARTHRL_HOME", str(home))
        return fetch_model("tiny-llama")


@pytest.fixture(scope="session")
def smollm2_tokenizer(tiny_llama_dir):
    """The tokenizer of the tiny-llama folder (SmolLM2's, with eos fixed to <|im_end|>)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_llama_dir))
