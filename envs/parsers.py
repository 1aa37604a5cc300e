"""Action parsers. ``json`` format (Qwen / hermes style)::

    <tool_call>
    {"name": "spectral_index", "arguments": {"scene": "S2_T33UUU_20170216", "index": "NDVI"}}
    </tool_call>

Lenient: whitespace, a missing closing tag, a fenced ```json block, text around the call, and a
bare JSON object without tags are all accepted; ``arguments`` may also be a JSON-encoded string
(OpenAI style) or be spelled ``parameters``/``args``. Only the first tool call of a turn is used.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from pydantic import ValidationError

_TAG_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCE_RE = re.compile(r"^```(?:json)?\s*|\s*```$")
CALL_HINT = ('Write exactly one call: <tool_call>\n{"name": "<tool>", "arguments": {...}}\n'
             '</tool_call>')


class ActionError(Exception):
    """A bad action (E(a,o)=1).

    Attributes:
        kind: ``"parse_error"`` (no/invalid JSON, no name), ``"unknown_tool"``,
            ``"schema_error"`` (arguments fail the tool's pydantic model).
        message: what is wrong, naming the field, and how to fix it.
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass
class ToolCallAction:
    """A parsed tool call. ``arguments`` are the validated values (pydantic ``model_dump``,
    defaults filled) when the call was validated against a tool, else the raw JSON object."""

    name: str
    arguments: dict = field(default_factory=dict)
    ignored_calls: int = 0  # further calls written in the same turn (only the first one runs)

    def to_dict(self) -> dict:
        """``{"name", "arguments"}``."""
        return {"name": self.name, "arguments": self.arguments}


def count_calls_after_first(text: str) -> int:
    """How many further top-level ``{"name": …}`` call objects follow the first JSON object of
    ``text`` (a model that writes its whole plan in one turn); 0 when the first does not parse."""
    decoder = json.JSONDecoder()
    m = re.search(r"\{", text)
    if m is None:
        return 0
    try:
        _, pos = decoder.raw_decode(text, m.start())
    except json.JSONDecodeError:
        return 0
    count = 0
    while (m := re.compile(r"\{").search(text, pos)) is not None:
        try:
            obj, pos = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            pos = m.start() + 1
            continue
        count += isinstance(obj, dict) and isinstance(obj.get("name"), str)
    return count


def first_json_object(text: str) -> dict:
    """Decode the JSON object that starts at the first ``{``. Only that one is tried, so an inner
    object of a broken call is never mistaken for a call."""
    m = re.search(r"\{", text)
    if m is None:
        raise ActionError("parse_error", f"no tool call found. {CALL_HINT}")
    try:
        obj, _ = json.JSONDecoder().raw_decode(text, m.start())
    except json.JSONDecodeError as e:
        raise ActionError("parse_error", f"invalid JSON in the tool call: {e.msg} (char "
                          f"{e.pos - m.start()}). Use double quotes and balanced braces. "
                          f"{CALL_HINT}") from None
    if not isinstance(obj, dict):
        raise ActionError("parse_error", f"the tool call is not a JSON object. {CALL_HINT}")
    return obj


def extract_call(text: str) -> dict:
    """The first ``{"name", "arguments"}`` object in ``text`` (tags optional).

    Raises:
        ActionError: ``parse_error`` when there is no JSON object, it does not parse, or it lacks
            a string ``name`` / an object ``arguments``.
    """
    m = _TAG_RE.search(text)
    body = m.group(1) if m else text
    body = _FENCE_RE.sub("", body.strip())
    obj = first_json_object(body)
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ActionError("parse_error", f'the tool call has no "name" string. {CALL_HINT}')
    args = next((obj[k] for k in ("arguments", "parameters", "args") if k in obj), {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise ActionError("parse_error", f'"arguments" is a string that is not JSON ({e.msg}); '
                              'give an object: "arguments": {...}') from None
    if not isinstance(args, dict):
        raise ActionError("parse_error", f'"arguments" must be an object {{...}}, got '
                          f"{type(args).__name__}")
    return {"name": name.strip(), "arguments": args}


def _schema_message(tool_name: str, err: ValidationError, model) -> str:
    allowed = ", ".join(model.model_fields)
    parts = []
    for e in err.errors()[:3]:
        loc = ".".join(str(x) for x in e["loc"]) or "arguments"
        if e["type"] == "missing":
            parts.append(f"missing required argument '{loc}'")
        elif e["type"] == "extra_forbidden":
            parts.append(f"unknown argument '{loc}'")
        else:
            parts.append(f"argument '{loc}': {e['msg']} (got {e.get('input')!r:.40})")
    return f"{tool_name}: {'; '.join(parts)}. Arguments of {tool_name}: {allowed or 'none'}."


def parse_json_action(text: str, tools: dict | None = None) -> ToolCallAction:
    """Parse one ``json``-format action and validate it against ``tools``.

    Args:
        text: the model's turn.
        tools: name -> :class:`~earthrl.envs.tool_registry.Tool`; default the registered
            :data:`~earthrl.envs.tools.TOOLS`.

    Returns:
        :class:`ToolCallAction` with validated arguments.

    Raises:
        ActionError: ``parse_error`` | ``unknown_tool`` (lists the tools) | ``schema_error``
            (names the argument and the tool's arguments).
    """
    if tools is None:
        from earthrl.envs.tools import TOOLS as tools
    call = extract_call(text)
    tool = tools.get(call["name"])
    if tool is None:
        raise ActionError("unknown_tool", f"no tool named {call['name']!r}; tools: "
                          f"{', '.join(tools)}")
    args = validate_arguments(tool, call["arguments"])
    return ToolCallAction(tool.name, args.model_dump(), ignored_calls=count_calls_after_first(text))


def validate_arguments(tool, arguments: dict):
    """``tool.args_model`` instance of ``arguments`` (pydantic validation, defaults filled).

    Raises:
        ActionError: ``schema_error`` naming the argument (missing, unknown, wrong type, out of
            a declared range) and listing the tool's arguments.
    """
    try:
        return tool.args_model.model_validate(arguments)
    except ValidationError as e:
        raise ActionError("schema_error", _schema_message(tool.name, e, tool.args_model)) from None
