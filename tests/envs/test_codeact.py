"""The ``codeact`` action format: parsing fenced Python blocks, a session over the sandbox, and
the system prompt's Python signatures."""

from __future__ import annotations

from typing import Literal

import pytest

from earthrl.envs.formats.codeact import (
    CodeActSession,
    code_blocks,
    codeact_system_prompt,
    parse_codeact,
    python_signature,
    truncate,
)
from earthrl.envs.formats.parsers import ActionError
from earthrl.envs.sandbox.parent import SandboxLimits
from earthrl.envs.tools.registry import Args, Tool, ToolResult, openai_schema


class AreaArgs(Args):
    name: str
    unit: Literal["km2", "m2"] = "km2"


class ThresholdArgs(Args):
    name: str
    threshold: float
    op: str = ">"


def _tool(name, args, description):
    return Tool(name, lambda ctx, a: ToolResult(""), args, description, "Physical & GIS Analytics",
                "SAA", ("water_flood",), ("any",), "number")


TOOLS = {"mask_area": _tool("mask_area", AreaArgs, "Area of mask pixels that are 1."),
         "threshold_mask": _tool("threshold_mask", ThresholdArgs, "Mask of pixels vs a value.")}


def test_parse_first_python_block():
    text = ("I will compute the area.\n```python\nr = mask_area(name='water')\nprint(r)\n```\n"
            "Then:\n```py\nprint(2)\n```")
    assert parse_codeact(text) == "r = mask_area(name='water')\nprint(r)"
    assert code_blocks(text) == ["r = mask_area(name='water')\nprint(r)\n", "print(2)\n"]


def test_parse_untagged_and_cut_off_blocks():
    assert parse_codeact("```\nprint(1)\n```") == "print(1)"
    assert parse_codeact("```Python\nx = 1\nprint(x)") == "x = 1\nprint(x)"  # no closing fence


def test_parse_errors_name_the_fix():
    with pytest.raises(ActionError) as e:
        parse_codeact('<tool_call>{"name": "mask_area"}</tool_call>')
    assert e.value.kind == "parse_error" and "no ```python code block found." in e.value.message
    assert "```python\n" in e.value.message
    with pytest.raises(ActionError) as e:
        parse_codeact('```json\n{"name": "mask_area"}\n```')
    assert "(found a ```json block)" in e.value.message
    with pytest.raises(ActionError, match="block is empty"):
        parse_codeact("```python\n\n```")


def test_truncate():
    assert truncate("abc", 3) == "abc"
    assert truncate("a" * 50, 20) == "a" * 8 + "…[truncated]"


@pytest.fixture
def session(tmp_path):
    calls = []

    def handler(name, kwargs):
        calls.append((name, kwargs))
        return {"text": "area 1.5 km2", "data": {"area": 1.5, "unit": "km2"}}

    s = CodeActSession(tmp_path / "ws", handler, SandboxLimits(wall_s=5, memory_mb=1024),
                       max_output_chars=100, tools=TOOLS)
    s.calls = calls
    yield s
    s.close()


def test_session_runs_code_with_tools(session):
    res = session.run("Let me measure.\n```python\na = mask_area(name='water')\n"
                      "print(a['area'] * 2, a['unit'])\n```")
    assert (res.stdout, res.error) == ("3.0 km2\n", False)
    assert session.calls == [("mask_area", {"name": "water"})]
    assert res.tool_calls == [{"name": "mask_area", "arguments": {"name": "water"},
                               "error": False, "error_kind": None}]
    assert session.run("```python\nprint(a['area'])\n```").stdout == "1.5\n"  # a persists


def test_session_truncates_output_to_the_budget(session):
    res = session.run("```python\nprint('x' * 5000)\n```")
    assert len(res.stdout) == 100 and res.stdout == "x" * 88 + "…[truncated]"
    res2 = session.run("```python\nraise ValueError('v' * 5000)\n```")
    assert res2.error_kind == "code_error" and len(res2.message) == 100
    assert res2.message.endswith("…[truncated]")


def test_session_parse_error_runs_nothing(session):
    res = session.run('{"name": "mask_area", "arguments": {"name": "water"}}')
    assert (res.error, res.error_kind) == (True, "parse_error")
    assert res.observation.startswith("Error (parse_error): no ```python code block found.")
    assert session.calls == [] and session.sandbox.starts == 0


def test_session_notes_ignored_blocks(session):
    res = session.run("```python\nprint(1)\n```\n```python\nprint(2)\n```\n"
                      "```python\nprint(3)\n```")
    assert res.stdout == "1\n"
    assert res.notes == ["Only the first code block of a turn runs; 2 more ignored."]
    assert res.observation == "Only the first code block of a turn runs; 2 more ignored.\n1"


def test_python_signature():
    assert python_signature(openai_schema(TOOLS["mask_area"])) == (
        "def mask_area(name: str, unit: 'km2'|'m2' = 'km2') -> dict"
        "  # Area of mask pixels that are 1.")
    assert python_signature(openai_schema(TOOLS["threshold_mask"])) == (
        "def threshold_mask(name: str, threshold: float, op: str = '>') -> dict"
        "  # Mask of pixels vs a value.")


def test_system_prompt_lists_every_tool_once():
    prompt = codeact_system_prompt([openai_schema(t) for t in TOOLS.values()])
    assert prompt.count("def mask_area(") == prompt.count("def threshold_mask(") == 1
    assert "```python" in prompt and "answer(value=..., unit=...)" in prompt
    assert "ToolCallError" in prompt


def test_real_tool_signatures_are_valid_python():
    """Every registered tool renders as a ``def`` line that compiles, under a name that is an
    identifier and shadows no builtin the model's code needs."""
    import builtins
    import keyword

    from earthrl.envs.tools.registry import TOOLS as real

    for schema in (openai_schema(t) for t in real.values() if t.surface == "earthrl"):  # Earth-Agent's: json only
        sig = python_signature(schema)
        compile(sig.split("  # ")[0] + ": pass", "<sig>", "exec")
        name = schema["function"]["name"]
        assert name.isidentifier() and not keyword.iskeyword(name), name
        assert not hasattr(builtins, name), name
