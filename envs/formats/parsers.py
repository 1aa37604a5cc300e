"""Action parsers. ``json`` format (Qwen / hermes style)::

    <tool_call>
    {"name": "spectral_index", "arguments": {"scene": "S2_T33UUU_20170216", "index": "NDVI"}}
    </tool_call>

Lenient: whitespace, a missing closing tag, a fenced ```json block, text around the call, and a
bare JSON object without tags are all accepted; ``arguments`` may also be a JSON-encoded string
(OpenAI style) or be spelled ``parameters``/``args``. Only the first tool call of a turn is used.

Input bounds (checked in linear time before any JSON is decoded; ``json`` recurses per nesting
level and ``int()`` refuses more than 4300 digits): an action is at most :data:`MAX_ACTION_CHARS`
characters, JSON nests at most :data:`MAX_JSON_DEPTH` levels, an integer has at most
:data:`MAX_INT_DIGITS` digits. Each breach is a ``parse_error`` naming the limit and the fix. No
regex here can backtrack: tags and fences are found with ``str.find``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from pydantic import ValidationError

from earthrl.envs.tools.arg_bounds import MAX_DEPTH, MAX_INT_DIGITS, argument_problems, problem_message
from earthrl.envs.tools.registry import TOOLS

#: longest action (characters) any format accepts (a turn of ~8k tokens; ``RSEnv.step`` checks it).
MAX_ACTION_CHARS = 32_000
#: deepest JSON nesting (``[``/``{`` levels) of a tool call; real calls nest 3 deep. The same
#: bound as that of one argument's value (:data:`earthrl.envs.tools.arg_bounds.MAX_DEPTH`).
MAX_JSON_DEPTH = MAX_DEPTH
#: most digits of one number (Python's ``int()`` refuses > 4300; real arguments use < 20):
#: :data:`earthrl.envs.tools.arg_bounds.MAX_INT_DIGITS`.
_BRACKET_RE = re.compile(r"[\[\]{}]")
_DIGITS_RE = re.compile(r"[0-9]+")
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


def check_action_length(text: str) -> None:
    """Raise ``parse_error`` when ``text`` is longer than :data:`MAX_ACTION_CHARS` characters."""
    if len(text) > MAX_ACTION_CHARS:
        raise ActionError("parse_error", f"the action is {len(text)} characters; the largest allowed "
                          f"is {MAX_ACTION_CHARS}: write one short call (or code block) per turn")


def check_json_bounds(text: str, what: str = "the tool call") -> None:
    """Linear-time bounds on JSON ``text`` before it is decoded: at most :data:`MAX_JSON_DEPTH`
    nested ``[``/``{`` (counted ignoring strings, so never under-counted) and no digit run longer
    than :data:`MAX_INT_DIGITS`.

    Raises:
        ActionError: ``parse_error`` naming the limit, the value found and the fix.
    """
    depth = 0
    for m in _BRACKET_RE.finditer(text):
        depth = depth + 1 if m.group() in "[{" else max(0, depth - 1)
        if depth > MAX_JSON_DEPTH:
            raise ActionError("parse_error", f"{what} nests deeper than {MAX_JSON_DEPTH} levels of "
                              "[ ] / { }; the largest allowed depth is "
                              f"{MAX_JSON_DEPTH}: give flat arguments")
    longest = max((m.end() - m.start() for m in _DIGITS_RE.finditer(text)), default=0)
    if longest > MAX_INT_DIGITS:
        raise ActionError("parse_error", f"{what} has a {longest}-digit number; the largest allowed "
                          f"is {MAX_INT_DIGITS} digits: shorten it (e.g. 1e300 notation for large values)")


def _decode_at(text: str, start: int):
    """``json.JSONDecoder().raw_decode(text, start)``; a RecursionError or a ValueError of
    ``int()`` (both excluded by :func:`check_json_bounds`, caught as a second line) become a
    JSONDecodeError at ``start``."""
    try:
        return json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError:
        raise
    except (RecursionError, ValueError) as e:
        raise json.JSONDecodeError(f"undecodable value ({type(e).__name__})", text, start) from None


def count_calls_after_first(text: str) -> int:
    """How many further top-level ``{"name": …}`` call objects follow the first JSON object of
    ``text`` (a model that writes its whole plan in one turn); 0 when the first does not parse.
    Linear: after a failed decode the scan goes on where the decoder stopped."""
    start = text.find("{")
    if start < 0:
        return 0
    try:
        check_json_bounds(text[start:])
        _, pos = _decode_at(text, start)
    except (json.JSONDecodeError, ActionError):
        return 0
    count = 0
    while (start := text.find("{", pos)) >= 0:
        try:
            obj, pos = _decode_at(text, start)
        except json.JSONDecodeError as e:
            pos = max(e.pos, start + 1)
            continue
        count += isinstance(obj, dict) and isinstance(obj.get("name"), str)
    return count


def first_json_object(text: str) -> dict:
    """Decode the JSON object that starts at the first ``{``. Only that one is tried, so an inner
    object of a broken call is never mistaken for a call.

    Raises:
        ActionError: ``parse_error``: no ``{``, a bound of :func:`check_json_bounds` breached,
            invalid JSON, or not an object.
    """
    start = text.find("{")
    if start < 0:
        raise ActionError("parse_error", f"no tool call found. {CALL_HINT}")
    check_json_bounds(text[start:])
    try:
        obj, _ = _decode_at(text, start)
    except json.JSONDecodeError as e:
        raise ActionError("parse_error", f"invalid JSON in the tool call: {e.msg} (char "
                          f"{e.pos - start}). Use double quotes and balanced braces. "
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
    check_action_length(text)
    body = strip_fence(tag_body(text, "tool_call") or text)
    obj = first_json_object(body)
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ActionError("parse_error", f'the tool call has no "name" string. {CALL_HINT}')
    args = next((obj[k] for k in ("arguments", "parameters", "args") if k in obj), {})
    if isinstance(args, str):
        check_json_bounds(args, '"arguments"')
        try:
            args = _decode_at(args.strip(), 0)[0] if args.strip() else {}
        except json.JSONDecodeError as e:
            raise ActionError("parse_error", f'"arguments" is a string that is not JSON ({e.msg}); '
                              'give an object: "arguments": {...}') from None
    if not isinstance(args, dict):
        raise ActionError("parse_error", f'"arguments" must be an object {{...}}, got '
                          f"{type(args).__name__}")
    return {"name": name.strip(), "arguments": args}


def tag_body(text: str, tag: str) -> str | None:
    """The stripped text after the first ``<tag>`` up to ``</tag>`` (or the end when the closing
    tag is missing); None when there is no ``<tag>``. ``str.find`` only: linear time."""
    start = text.find(f"<{tag}>")
    if start < 0:
        return None
    start += len(tag) + 2
    end = text.find(f"</{tag}>", start)
    return text[start:].strip() if end < 0 else text[start:end].strip()


def strip_fence(body: str) -> str:
    """``body`` without a leading ```` ```json ```` / ```` ``` ```` fence and a trailing ```` ``` ````."""
    body = body.strip()
    if body.startswith("```"):
        body = body[3:]
        body = body[4:] if body.startswith("json") else body
        body = body.lstrip()
    if body.endswith("```"):
        body = body[:-3].rstrip()
    return body


def _short_repr(value, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters; never raises (an int of > 4300 digits)."""
    try:
        return repr(value)[:limit]
    except ValueError:
        return f"<{type(value).__name__}>"


def _schema_message(tool_name: str, err: ValidationError, model) -> str:
    allowed = ", ".join(model.model_fields)
    parts = []
    for e in err.errors()[:3]:
        loc = ".".join(str(x) for x in e["loc"]) or "arguments"
        if e["type"] == "missing":
            parts.append(f"missing required argument '{loc}'")
        elif e["type"] == "extra_forbidden":
            parts.append(f"unknown argument '{loc}'")
        elif not e["loc"] and e["type"] == "value_error":  # a check across arguments
            parts.append(e["msg"].removeprefix("Value error, "))
        else:
            parts.append(f"argument '{loc}': {e['msg']} (got {_short_repr(e.get('input'))})")
    return f"{tool_name}: {'; '.join(parts)}. Arguments of {tool_name}: {allowed or 'none'}."


def parse_json_action(text: str, tools: dict | None = None) -> ToolCallAction:
    """Parse one ``json``-format action and validate it against ``tools``.

    Args:
        text: the model's turn.
        tools: name -> :class:`~earthrl.envs.tools.registry.Tool`; default the registered
            :data:`~earthrl.envs.tools.registry.TOOLS`.

    Returns:
        :class:`ToolCallAction` with validated arguments.

    Raises:
        ActionError: ``parse_error`` | ``unknown_tool`` (lists the tools) | ``schema_error``
            (names the argument and the tool's arguments).
    """
    if tools is None:
        tools = TOOLS
    call = extract_call(text)
    tool = tools.get(call["name"])
    if tool is None:
        raise ActionError("unknown_tool", f"no tool named {call['name']!r}; tools: "
                          f"{', '.join(tools)}")
    args = validate_arguments(tool, call["arguments"])
    return ToolCallAction(tool.name, args.model_dump(), ignored_calls=count_calls_after_first(text))


def validate_arguments(tool, arguments: dict):
    """``tool.args_model`` instance of ``arguments`` (pydantic validation, defaults filled),
    after the bounds of :mod:`earthrl.envs.tools.arg_bounds` (nesting depth, integer digits,
    string length), which are checked first so that no recursion or conversion sees a value
    past them.

    Raises:
        ActionError: ``schema_error`` naming the argument (past a bound, missing, unknown, wrong
            type, not a finite number, out of a declared range) and listing the tool's arguments.
    """
    problems = argument_problems(arguments)
    if problems:
        raise ActionError("schema_error", problem_message(tool.name, problems))
    try:
        return tool.args_model.model_validate(arguments)
    except ValidationError as e:
        raise ActionError("schema_error", _schema_message(tool.name, e, tool.args_model)) from None
