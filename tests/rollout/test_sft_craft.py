"""CRAFT contexts (SimCRAFT §3.5.2): the perturbation rate over 10,000 seeded draws, both kinds, one parameter
changed by a mutation, and the targets (the turns) untouched."""

from __future__ import annotations

import re

import numpy as np
import pytest

from earthrl.envs.core.sops import SOP_HEADER, load_sops
from earthrl.rollout.sft_craft import craft_context, craft_records, mutate_sop
from earthrl.rollout.sft_data import SFTTrajectory, SFTTurn

LIB = load_sops()
BY = {s.family: s for s in LIB}
RETRIEVED = [BY["water_extent"], BY["threshold_share"]]


def test_the_perturbation_rate_is_epsilon_over_10000_draws():
    rng = np.random.default_rng(0)
    kinds = [craft_context(RETRIEVED, LIB, rng, 0.15)[1] for _ in range(10_000)]
    rate = {k: kinds.count(k) / 10_000 for k in ("clean", "inject", "mutate")}
    assert abs(rate["inject"] + rate["mutate"] - 0.15) <= 0.01
    assert abs(rate["inject"] - 0.075) <= 0.01 and abs(rate["mutate"] - 0.075) <= 0.01  # both kinds, half each


def test_each_kind_changes_the_context_as_described():
    rng = np.random.default_rng(1)
    draws = [craft_context(RETRIEVED, LIB, rng, 1.0) for _ in range(200)]
    for ctx, kind in draws:
        assert len(ctx) == 2
        if kind == "inject":  # the lower-ranked SOP gives way to one of another family
            assert ctx[0] is RETRIEVED[0] and ctx[1].family not in {"water_extent", "threshold_share"}
        else:  # one SOP differs in exactly one number of its steps
            changed = [(a, b) for a, b in zip(RETRIEVED, ctx, strict=True) if a.text != b.text]
            assert kind == "mutate" and len(changed) == 1
            old, new = (re.findall(r"-?\d+(?:\.\d+)?", s.text) for s in changed[0])
            assert sum(x != y for x, y in zip(old, new, strict=True)) == 1
    assert {k for _, k in draws} == {"inject", "mutate"}
    assert [craft_context(RETRIEVED, LIB, rng, 0.0)[1] for _ in range(100)] == ["clean"] * 100
    with pytest.raises(ValueError, match="epsilon=1.5 must lie in"):
        craft_context(RETRIEVED, LIB, rng, 1.5)


def test_an_sop_without_numbers_is_not_mutated_and_none_retrieved_gets_an_injection():
    rng = np.random.default_rng(2)
    plain = type(LIB[0])(family="x", title="x", text="# x\n\nSteps:\n1. `raster_stats` {\"name\": A}", keys=("x",))
    assert mutate_sop(plain, rng) is None
    ctx, kind = craft_context([], LIB, rng, 1.0)
    assert kind == "inject" and len(ctx) == 1


def test_the_target_stays_the_validated_trajectory():
    turns = [SFTTurn(action='<tool_call>{"name": "water_mask"}</tool_call>', observation="ok"),
             SFTTurn(action='<tool_call>{"name": "answer"}</tool_call>', observation="done")]
    recs = [SFTTrajectory(task_id=f"t{i}", source="oracle", action_format="json", phrasing="AP", system="sys",
                          user=f"How much water? {i}\n\nData (scene | sensor | date | bands):\nS2", turns=list(turns),
                          answer={"value": 1.0}, correct=True) for i in range(300)]
    out, counts = craft_records(recs, [RETRIEVED] * 300, LIB, np.random.default_rng(3), 0.15)
    assert sum(counts.values()) == 300 and counts["inject"] > 0 and counts["mutate"] > 0
    for a, b in zip(recs, out, strict=True):
        assert b.turns == a.turns and b.answer == a.answer and b.system == a.system
        assert b.user.startswith(a.user + "\n\n" + SOP_HEADER) and a.user.count(SOP_HEADER) == 0
