"""HiRS Expert-tuning data (rollout/sft_expert.py), its 80/20 split, the MCQ/ordering scorer
(rewards/metrics/expert_items.py) and a few tiny-model steps on its records lowering their loss."""

from __future__ import annotations

import pytest
import spyndex
import torch
from transformers import AutoTokenizer

from earthrl.envs.tools.registry import TOOLS
from earthrl.rewards.metrics.expert_items import accuracy, parse_letter, parse_order, score_answer
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.sft_expert import build_expert, build_items, split_items
from earthrl.rollout.sft_tokens import encode
from tests.sft.steps_kit import three_steps

#: two hand-written workflows in the suite's task layout (two templates, one an _mc twin of the other)
WATER = {"id": "t/water/1", "template": "s2_water_area", "question": {"AP": "Water area of scene S?"},
         "reference": [{"name": "spectral_index", "arguments": {"scene": "S", "index": "MNDWI"}},
                       {"name": "threshold_mask", "arguments": {"name": "mndwi_S", "op": ">", "value": 0.2}},
                       {"name": "mask_area", "arguments": {"name": "mask"}}]}
GREEN = {"id": "t/green/1", "template": "ls_greenest", "question": {"AP": "Greenest date?"},
         "reference": [{"name": "spectral_index", "arguments": {"scene": "A", "index": "NDVI"}},
                       {"name": "raster_stats", "arguments": {"name": "ndvi_A"}},
                       {"name": "spectral_index", "arguments": {"scene": "B", "index": "NDVI"}},
                       {"name": "raster_stats", "arguments": {"name": "ndvi_B"}}]}
INDICES = ["EVI", "NBR", "NDBI", "NDSI", "NDWI", "SAVI"]


def _tasks() -> list[dict]:
    mc = {**WATER, "id": "t/water_mc/1", "template": "s2_water_area_mc"}
    more = [{"id": f"t/i{k}", "template": f"idx_{k}", "question": {"AP": f"Mean {i}?"},
             "reference": [{"name": "spectral_index", "arguments": {"scene": "S", "index": i}},
                           {"name": "raster_stats", "arguments": {"name": "x"}}]} for k, i in enumerate(INDICES)]
    return [WATER, mc, GREEN, *more]


def test_mcq_key_is_the_references_tool_and_distractors_are_real_but_wrong():
    items = {i.id: i for i in build_items(_tasks(), seed=3)}
    item = items["mcq/next/s2_water_area/2"]  # after spectral_index comes threshold_mask
    assert item.options[ord(item.key) - ord("A")] == "threshold_mask"
    assert item.answer == item.key and len(item.options) == 4 and "1. spectral_index" in item.question
    for d in item.options:
        if d != "threshold_mask":
            assert d in TOOLS and d not in ("spectral_index", "threshold_mask", "mask_area", "answer")
            assert TOOLS[d].output_kind != "mask"
    idx = items["mcq/index/NDWI"]  # the index MCQ: the formula's index, three other real ones
    assert idx.options[ord(idx.key) - ord("A")] == "NDWI"
    assert spyndex.indices["NDWI"].formula in idx.question
    assert all(o in [*INDICES, "MNDWI", "NDVI"] and spyndex.indices[o].formula != spyndex.indices["NDWI"].formula
               for o in idx.options if o != "NDWI")


def test_ordering_answer_is_the_reference_order_and_its_shuffle_differs():
    items = {i.id: i for i in build_items(_tasks(), seed=0)}
    item = items["order/s2_water_area"]
    steps = ["spectral_index", "threshold_mask", "mask_area", "answer"]
    assert list(item.options) != steps and sorted(item.options) == sorted(steps)
    assert [item.options[ord(k) - ord("A")] for k in item.key.split(", ")] == steps
    assert "order/ls_greenest" not in items  # repeated tools: the order is not unique, no item
    assert "order/idx_0" in items  # spectral_index, raster_stats, answer


def test_knowledge_chunks_hold_the_registry_skill_tree_and_spyndex():
    items = {i.id: i for i in build_items(_tasks(), seed=0)}
    assert "Family SPA (Surface Parsing)" in items["knowledge/tool/threshold_mask"].answer
    assert "value (number, required)" in items["knowledge/tool/threshold_mask"].answer
    assert "threshold_mask.value in [-1, 1]" in items["knowledge/skill/water_flood"].answer
    assert items["knowledge/index/NDVI"].answer.startswith("NDVI (Normalized Difference Vegetation Index) = (N-R)/(N+R)")
    n_tools = sum(t.surface == "earthrl" for t in TOOLS.values())
    assert sum(i.startswith("knowledge/tool/") for i in items) == n_tools
    assert sum(i.startswith("knowledge/skill/") for i in items) == 7


def test_split_is_80_20_by_group_deterministic_and_disjoint():
    items = build_items(_tasks(), seed=0)
    groups = {i.group for i in items if i.kind != "knowledge"}
    # 8 workflow groups (s2_water_area and its _mc twin are one) + 8 indices (MNDWI, NDVI, 6 others)
    assert len(groups) == 16
    train, held = split_items(items, seed=0)
    held_groups = {i.group for i in held}
    assert len(held_groups) == 3  # round(0.2 * 16)
    assert not held_groups & {i.group for i in train}
    assert not {i.id for i in held} & {i.id for i in train} and len(train) + len(held) == len(items)
    assert all(i.kind != "knowledge" for i in held)
    again = split_items(build_items(_tasks(), seed=0), seed=0)
    assert [i.id for i in again[1]] == [i.id for i in held]
    other = {i.group for i in split_items(items, seed=1)[1]}
    assert other != held_groups  # another seed, another held-out half
    with pytest.raises(ValueError, match="heldout_share"):
        split_items(items, heldout_share=1.0)


@pytest.mark.parametrize(("text", "letter"), [("B", "B"), ("(C)", "C"), ("D) ndvi", "D"), ("Answer: A", "A"),
                                               ("The answer is C.", "C"), ("I pick B here", "B"), ("E", None),
                                               ("none", None)])
def test_letter_parsing(text, letter):
    assert parse_letter(text, 4) == letter


def test_scorer_mcq_and_ordering_exact_match():
    assert score_answer("mcq", "C) threshold_mask", "C", 4)
    assert not score_answer("mcq", "A", "C", 4)
    assert parse_order("D, C, A, B", 4) == ["D", "C", "A", "B"]
    assert score_answer("order", "D, C, A, B", "D, C, A, B", 4)
    assert score_answer("order", "D -> C -> A -> B", "D, C, A, B", 4)
    assert not score_answer("order", "D, A, C, B", "D, C, A, B", 4)  # one swap: wrong
    assert not score_answer("order", "D, C, A", "D, C, A, B", 4)  # one missing: wrong
    with pytest.raises(ValueError, match="kind"):
        score_answer("knowledge", "x", "A", 4)
    acc = accuracy([True, True, False, True])
    assert acc["n"] == 4 and acc["accuracy"] == 0.75 and acc["ci95"][0] <= 0.75 <= acc["ci95"][1]


def test_a_few_tiny_model_steps_lower_the_loss_of_expert_records(tiny_model):
    train, held, counts = build_expert(_tasks(), seed=0)
    assert counts["heldout_mcq"] + counts["heldout_order"] == len(held) > 0
    assert all(r.answer["kind"] in ("mcq", "order") for r in held)
    torch.manual_seed(0)
    codec = ChatCodec(AutoTokenizer.from_pretrained(str(tiny_model)))
    recs = [r for r in train if r.task_id.startswith(("mcq/", "order/"))][:4]
    examples, _ = encode(recs, codec, "oracle")
    lora = {"rank": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
    before, losses, after = three_steps(tiny_model, examples, lora, 2)
    assert losses[0] == pytest.approx(before, rel=1e-4)
    assert after < before - 0.1, (before, losses, after)


def test_expert_eval_items_that_are_empty_or_not_items_are_one_line(tmp_path):
    from earthrl.envs.errors import ConfigError
    from earthrl.launch.expert_eval_cmd import load_items
    from earthrl.rollout.sft_data import SFTTrajectory, write_jsonl

    empty = tmp_path / "e.heldout.jsonl"
    write_jsonl([], empty)
    with pytest.raises(ConfigError) as err:
        load_items(empty)
    assert str(err.value) == (f"--items {empty}: no held-out item (too few tasks to hold out a group: build the data "
                              "over more tasks, e.g. sft.data.max_tasks=null)")
    plain = tmp_path / "p.jsonl"
    write_jsonl([SFTTrajectory(task_id="t1", source="oracle", action_format="json", phrasing="IF", system="s",
                               user="u")], plain)
    with pytest.raises(ConfigError) as err:
        load_items(plain)
    assert str(err.value) == (f"--items {plain}: 1 record(s) without an MCQ/ordering answer (first: t1); give the "
                              ".heldout.jsonl file of the Expert-tuning data")
