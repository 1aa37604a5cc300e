import pytest

from earthrl.rewards.outcome import answer_correct, argument_match, reference_steps, tool_family, value_match
from earthrl.tests.algorithms.builders import TASK


def test_answer_correct_numeric_choice_text():
    ref = {"kind": "numeric", "value": 12.5, "unit": "%", "tolerance": 0.5}
    assert answer_correct({"value": "13.0", "unit": "percent"}, ref)
    assert not answer_correct({"value": 13.01, "unit": "%"}, ref)
    assert not answer_correct({"value": 12.5, "unit": "km2"}, ref)
    assert not answer_correct(None, ref)
    assert answer_correct({"value": "(b)"}, {"kind": "choice", "value": "B"})
    # Earth-Agent's answer tags (its end-to-end evaluation): the tagged letter, not the text's first one
    assert answer_correct({"value": "After the steps: <Answer>B<Answer>"}, {"kind": "choice", "value": "B"})
    assert answer_correct({"value": "<answer>(b)</Answer>"}, {"kind": "choice", "value": "B"})
    assert not answer_correct({"value": "<Answer>A<Answer>"}, {"kind": "choice", "value": "B"})
    assert answer_correct({"value": " Increasing  trend"}, {"kind": "text", "value": "increasing trend"})


def test_reference_steps_drop_answer():
    assert [s["name"] for s in reference_steps(TASK)] == ["spectral_index", "threshold_mask", "pixel_share"]


def test_value_match_numeric_tolerance_and_strings():
    assert value_match(0.3015, 0.3)          # |Δ| = 0.0015 ≤ 1 % of 0.3
    assert not value_match(0.304, 0.3)       # 0.004 > 0.003
    assert value_match("0.3", 0.3)
    assert value_match(" ndvi ", "NDVI")
    assert value_match([1, "a"], [1.0, "A"]) and not value_match([1], [1, 2])
    assert not value_match(True, 1)


def test_argument_match_shares():
    ref = {"name": "ndvi_s2", "op": ">", "value": 0.3}
    assert argument_match({"name": "ndvi_s2", "op": "<", "value": 0.3001, "extra": 1}, ref) == (1.0, pytest.approx(2 / 3))
    assert argument_match({"name": "ndvi_s2"}, ref) == (pytest.approx(1 / 3), pytest.approx(1 / 3))
    assert argument_match(None, ref) == (0.0, 0.0)
    assert argument_match({"x": 1}, {}) == (1.0, 1.0)


def test_tool_family_from_tool_registry():
    assert tool_family("spectral_index") == "PRA"
    assert tool_family("threshold_mask") == "SPA"
    assert tool_family("pixel_share") == "SAA"
    assert tool_family("no_such_tool") is None and tool_family(None) is None
