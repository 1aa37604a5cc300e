"""A task's reference workflow as action texts (envs/core/reference_actions.py): the scripted policy's
json turns and codeact block, and the codeact block that prints each call's result."""

from __future__ import annotations

import pytest

from earthrl.envs.core.reference_actions import codeact_action, scripted_actions

LT = "LT50350322008174PAC01"
TASK = {"id": "t/1", "question": {"IF": "mean NDVI"}, "data": [LT], "skill": "spectral_index",
        "reference": [{"name": "spectral_index", "arguments": {"scene": LT, "index": "NDVI"}}],
        "answer": {"value": 0.7, "unit": ""}}


def test_scripted_policy_plays_the_reference_then_the_answer():
    assert scripted_actions(TASK, "json") == [
        '<tool_call>{"name": "spectral_index", "arguments": {"scene": "%s", "index": "NDVI"}}</tool_call>' % LT,
        '<tool_call>{"name": "answer", "arguments": {"value": 0.7, "unit": ""}}</tool_call>']
    (block,) = scripted_actions(TASK, "codeact")
    assert block == ("```python\ntry:\n    spectral_index(**{'scene': '%s', 'index': 'NDVI'})\nexcept Exception as exc:\n"
                     "    print(exc)\nanswer(**{'value': 0.7, 'unit': ''})\n```" % LT)
    with pytest.raises(ValueError, match="scripted reference actions are written in json or codeact"):
        scripted_actions(TASK, "hierarchical")


def test_codeact_action_prints_each_call_then_answers():
    assert codeact_action(TASK) == ("```python\nprint(spectral_index(scene='%s', index='NDVI'))\n"
                                    "answer(value=0.7, unit='')\n```" % LT)
