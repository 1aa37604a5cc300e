"""The Earth-Bench task suites: ``tasks=earthbench`` (all 248) and ``tasks=earthbench-rsclaw`` (RS-Claw-Evolution's
12 train / 176 test split), read from the folder the user gives (tasks.data)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from omegaconf import OmegaConf

from earthrl.envs.benchmarks.earthbench import load_earthbench
from earthrl.envs.benchmarks.earthbench_rsclaw import POOL_IDS, SEED, TRAIN_IDS, choose_train_ids
from earthrl.envs.core.tasks import load_suite
from earthrl.envs.errors import ConfigError
from earthrl.envs.paths import data_dir
from earthrl.launch.job_inputs import check_replay, load_tasks
from earthrl.launch.overrides import CONF_DIR, compose_job
from tests.paths import EARTHBENCH as EB
from tests.paths import EARTHBENCH_MISSING


@pytest.fixture(scope="module")
def eb() -> Path:
    if not (EB / "question.json").is_file():
        pytest.skip(reason=EARTHBENCH_MISSING)
    return EB


@pytest.fixture(autouse=True)
def _no_env_folder(monkeypatch):
    monkeypatch.delenv("EARTHRL_EARTHBENCH", raising=False)  # the folder comes from tasks.data alone


def test_earthbench_is_all_248_tasks_in_both_phrasings(eb):
    tasks = load_suite("earthbench", split="test", data_root=eb)
    questions = json.loads((eb / "question.json").read_text())
    assert [t.id for t in tasks] == [f"earthbench/{i}" for i in range(1, 249)] and len(questions) == 248
    assert all(set(t.question) == {"IF", "AP"} for t in tasks)
    # Earth-Bench phrases five tasks the same way in both modes (its question.json, evaluation[*].question)
    same = [t.id for t in tasks if t.question["IF"] == t.question["AP"]]
    assert same == [f"earthbench/{i}" for i in (163, 173, 177, 178, 186)]
    assert load_suite("earthbench", split="train", data_root=eb) == []


def test_rsclaw_split_is_12_train_and_176_test_of_questions_1_to_189_without_43(eb):
    train = load_suite("earthbench-rsclaw", split="train", data_root=eb)
    test = load_suite("earthbench-rsclaw", split="test", data_root=eb)
    assert (len(train), len(test)) == (12, 176)
    assert tuple(t.id for t in train) == TRAIN_IDS
    ids = {t.id for t in train + test}
    assert ids == set(POOL_IDS) and "earthbench/43" not in ids and "earthbench/190" not in ids
    assert max(int(i.removeprefix("earthbench/")) for i in ids) == 189
    assert not {t.id for t in train} & {t.id for t in test}


def test_the_training_ids_are_the_documented_seeded_choice(eb):
    pool = [t for t in load_earthbench(eb) if t.id in set(POOL_IDS)]
    assert tuple(choose_train_ids(pool, 12, SEED)) == TRAIN_IDS
    covered = {c.name for t in pool if t.id in TRAIN_IDS for c in t.reference}
    assert len(covered) == 36  # the paper's 12 span 28 tools; the greedy choice covers more
    assert choose_train_ids(pool, 12, SEED + 1) != list(TRAIN_IDS)  # the seed does choose


@pytest.mark.parametrize(("name", "split", "count"), [("earthbench", "test", 248), ("earthbench-rsclaw", "train", 12),
                                                      ("earthbench-rsclaw", "test", 176)])
def test_the_suites_load_from_tasks_data_as_a_job_does(eb, name, split, count):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose_job("eval", [f"tasks={name}", f"tasks.data={eb}", f"tasks.split={split}", "env.mode=replay",
                                   "env.toolset=earthbench"])
    root = data_dir(cfg.tasks.data)
    assert root == eb  # an absolute tasks.data is the folder itself
    tasks = load_tasks(cfg.tasks.name, cfg.tasks.split, root, check_data=False)
    assert len(tasks) == count and all(t["template"] == "earthbench" for t in tasks)


def test_a_folder_without_earthbench_names_tasks_data(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"tasks\.data=/path/to/folder.*EARTHRL_EARTHBENCH"):
        load_suite("earthbench-rsclaw", data_root=tmp_path)


def test_replay_refuses_before_it_starts_a_suite_without_recordings_or_another_folder(eb, tmp_path):
    tasks = load_tasks("earthbench-rsclaw", "train", eb, check_data=False)
    check_replay(tasks, eb)  # the folder the tasks came from: every task has its recording
    with pytest.raises(ConfigError, match=r"^tasks\.data=.*question\.json is missing"):
        check_replay(tasks, tmp_path)
    mini = [{"id": "mini/x", "template": "s2_index_stat"}]
    with pytest.raises(ConfigError, match=r"^env\.mode=replay: .*recorded suites: .*earthbench.*env\.mode=execute or mock"):
        check_replay(mini, eb)
    other = [{**tasks[0], "id": "earthbench/999"}]
    with pytest.raises(ConfigError, match=r"no recorded calls for 1 task\(s\) \(earthbench/999"):
        check_replay(other, eb)


@pytest.mark.parametrize("command", ["config", "eval"])
@pytest.mark.parametrize("name", ["earthbench", "earthbench-rsclaw"])
def test_the_suite_presets_bring_earthbenchs_env_keys_and_the_command_line_wins(command, name):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose_job(command, ["logger=none", f"tasks={name}", "tasks.data=/eb", "env.mode=replay"])
        assert (cfg.tasks.name, cfg.tasks.data) == (name, "/eb")
        assert (cfg.env.mode, cfg.env.toolset, cfg.env.max_context_tokens, cfg.env.max_turns) == (
            "replay", "earthbench", 16384, 20)
        assert (cfg.env.action_format, cfg.env.max_obs_chars) == ("json", 600)  # the env group's other keys stay
        assert cfg.cluster.vllm.max_model_len == 17408  # the engine holds the context and a turn's response
        # a turn may write a call of up to 1,024 tokens (Earth-Bench's calls: median 81, 95th percentile 571 tokens),
        # and the engine holds it beside the 16,384-token context
        sampling = cfg.algorithm.sampling if command == "config" else cfg.sampling
        assert (cfg.env.max_action_tokens, sampling.max_new_tokens) == (1024, 1024)
        assert cfg.env.max_context_tokens + sampling.max_new_tokens == cfg.cluster.vllm.max_model_len
        cfg = compose_job(command, ["logger=none", f"tasks={name}", "env.max_turns=7", "env.max_context_tokens=8192",
                                    "env.toolset=all"])
        assert (cfg.env.toolset, cfg.env.max_context_tokens, cfg.env.max_turns) == ("all", 8192, 7)
        cfg = compose_job(command, ["logger=none", f"tasks={name}", "cluster.vllm.max_model_len=12288"])
        assert cfg.cluster.vllm.max_model_len == 12288
        key = "algorithm.sampling" if command == "config" else "sampling"  # the command line wins over the preset
        cfg = compose_job(command, ["logger=none", f"tasks={name}", f"{key}.max_new_tokens=200"])
        assert (cfg.env.max_action_tokens, OmegaConf.select(cfg, key).max_new_tokens) == (1024, 200)
        # a preset after the env and agent groups: agent=hierarchical keeps its format, the suite its limits
        cfg = compose_job(command, ["logger=none", f"tasks={name}", "agent=hierarchical"])
        assert (cfg.env.action_format, cfg.env.toolset, cfg.env.max_turns) == ("hierarchical", "earthbench", 20)
        # the other suites keep the env group's defaults
        cfg = compose_job(command, ["logger=none"])
        assert (cfg.tasks.name, cfg.env.toolset, cfg.env.max_context_tokens, cfg.env.max_turns) == (
            "earthrl-mini-core", "mini", 3072, 5)
        assert cfg.cluster.vllm.max_model_len == 8192
    assert cfg.tasks.split == ("test" if command == "eval" else "train")


EXECUTE_REFUSAL = (r"^env\.mode=execute: tasks=earthbench-rsclaw has no rasters to run on for (176 of 176|12 of 12) tasks "
                   r"\(.*/data/question\d+ does not exist\); put Earth-Bench's benchmark/data/questionN folders "
                   r"under .*/data, or set env\.mode=replay \(docs/earthbench\.md\)$")


def test_an_earthbench_suite_in_execute_mode_without_its_rasters_stops_with_one_line_naming_the_fix(eb):
    with pytest.raises(ConfigError, match=EXECUTE_REFUSAL):
        load_tasks("earthbench-rsclaw", "test", eb, mode="execute")
    assert len(load_tasks("earthbench-rsclaw", "test", eb, check_data=False, mode="replay")) == 176


def test_an_earthbench_suite_in_mock_mode_stops_with_one_line_naming_the_two_modes(eb):
    with pytest.raises(ConfigError, match=r"^env\.mode=mock: tasks=earthbench-rsclaw \(template earthbench\) runs in "
                                          r"env\.mode=replay .*, or in env\.mode=execute on its rasters under "
                                          r"tasks\.data \(docs/earthbench\.md\)$"):
        load_tasks("earthbench-rsclaw", "test", eb, mode="mock")


def test_an_earthbench_suite_without_its_folder_is_one_line_naming_tasks_data(tmp_path):
    with pytest.raises(ConfigError, match=r"^tasks=earthbench: Earth-Bench is not bundled .*tasks\.data=/path/to/folder"):
        load_tasks("earthbench", "test", tmp_path, mode="replay")


@pytest.mark.parametrize("command", ["train", "eval"])
def test_the_cli_refuses_earthbench_in_execute_mode_before_anything_starts(eb, tmp_path, command):
    from tests.launch.test_train_e2e import earthrl

    out = earthrl(command, "logger=none", "tasks=earthbench-rsclaw", f"tasks.data={eb}", "trainer.output_dir=run"
                  if command == "train" else "eval.output_dir=run", cwd=tmp_path, check=False, timeout=300)
    assert out.returncode != 0
    line = out.stderr.strip().splitlines()[-1]
    assert re.match(EXECUTE_REFUSAL.replace("^", "^earthrl: error: ", 1), line)
    assert ("12 of 12" if command == "train" else "176 of 176") in line  # train: its 12 train tasks
    assert not (tmp_path / "run").exists()
