"""ThinkGeo metrics (rewards/metrics/thinkgeo.py) on hand-built episodes."""

from __future__ import annotations

import math

import pytest

from earthrl.rewards.metrics.thinkgeo import (
    answer_score,
    image_answer_score,
    score_thinkgeo,
    step_counts,
    steps_from_calls,
)


def tool(name, error=False, **args):
    return {"type": "tool", "name": name, "arguments": args, "error": error}


def ans(text):
    return {"type": "answer", "content": text, "error": False}


WL = {"whitelist": [["3", "three"], ["ships", "ship"]], "blacklist": None}


def test_answer_score_whitelist_and_blacklist():
    assert answer_score("There are three ships.", WL) == 1.0   # both groups hit
    assert answer_score("There are 3 boats.", WL) == 0.0        # group 2 misses
    assert answer_score("33 ships", WL) == 0.0                  # "3" must be a whole word
    black = {"whitelist": [["yes"]], "blacklist": [["no"]]}
    assert answer_score("yes", black) == 1.0 and answer_score("yes and no", black) == 0.0
    assert answer_score("A Harbor", ["a harbor", "a port"]) == 1.0   # list: exact-normalised
    assert answer_score(None, WL) == 0.0


def test_step_counts_position_by_position():
    ref = [tool("ObjectDetection", image="a.png"), tool("CountGivenObject", image="a.png", text="ship"),
           ans("three ships")]
    # step 1 right name, wrong args; step 2 errored (not aligned, but name still counts for
    # Tool. as in ThinkGeo); step 3 is a tool where an answer was due.
    pred = [tool("ObjectDetection", image="b.png"), tool("CountGivenObject", True, image="a.png", text="ship"),
            tool("Calculator", expression="1+2")]
    c = step_counts(pred, ref)
    # inst: pos1 tool==tool, no error -> 1; pos2 error -> 0; pos3 tool vs answer -> 0
    assert c == {"inst_align": 1, "tool_acc": 2, "arg_acc": 1, "ref_tool_steps": 2, "ref_answer_steps": 1}


def test_score_thinkgeo_over_three_episodes():
    e1_ref = [tool("ObjectDetection", image="a.png"), ans("three ships")]
    e1_pred = [tool("ObjectDetection", image="a.png"), ans("I count three ships")]
    e2_ref = [tool("TextToBbox", image="b.png", text="plane"), tool("CountGivenObject", image="b.png", text="plane"),
              ans("2")]
    e2_pred = [tool("TextToBbox", image="b.png", text="jet"), ans("1")]
    e3_ref = [tool("ObjectDetection", image="c.png"), tool("DrawBox", image="c.png", bbox="(1, 2, 3, 4)")]
    e3_pred = [tool("ObjectDetection", image="c.png"), tool("DrawBox", image="c.png", bbox="(1, 2, 3, 4)")]
    out = score_thinkgeo([(e1_pred, e1_ref, WL), (e2_pred, e2_ref, {"whitelist": [["2", "two"]], "blacklist": None}),
                          (e3_pred, e3_ref, None)])
    # Inst.: aligned e1 2 + e2 1 (TextToBbox; pos 2 answer vs tool no) + e3 2 = 5
    #        over ref tool steps (1 + 2 + 2) + tasks with an answer (2) = 7
    assert out["inst"] == pytest.approx(5 / 7)
    # Tool.: 1 + 1 + 2 = 4 of 5 reference tool steps; Arg.: 1 + 0 + 2 = 3 of 5
    assert out["tool"] == pytest.approx(4 / 5) and out["arg"] == pytest.approx(3 / 5)
    # Ans.: e1 right, e2 wrong -> 1/2; Ans_I: e3 (image task) DrawBox args equal -> 1: (1+0+1)/3
    assert out["ans"] == pytest.approx(1 / 2) and out["ans_i"] == pytest.approx(2 / 3)


def test_image_answer_score_needs_the_image_tool():
    ref = [tool("AddText", image="c.png", text="port")]
    assert image_answer_score([tool("AddText", image="c.png", text="port")], ref) == 1.0
    assert image_answer_score([tool("AddText", True, image="c.png", text="port")], ref) == 0.0  # errored
    assert image_answer_score([tool("DrawBox", image="c.png")], ref) == 0.0


def test_empty_denominators_are_nan_and_steps_from_calls():
    out = score_thinkgeo([])
    assert all(math.isnan(v) for v in out.values())
    steps = steps_from_calls([{"name": "x", "arguments": {"a": 1}, "error": True}], answer="B")
    assert steps == [{"type": "tool", "name": "x", "arguments": {"a": 1}, "error": True},
                     {"type": "answer", "content": "B", "error": False}]
