"""System prompt of the ``json`` action format (hermes / Qwen2.5 tool-call style), kept short:
a 0.5B model on a 2-core CPU prefills it every turn (about 1,700 characters with the 11 tools,
roughly 500 Qwen tokens at 3.3-3.5 characters per token; not measured with the real tokenizer)."""

from __future__ import annotations

import json

_HEAD = ("You are a remote-sensing analyst. Solve the task by calling tools on the listed "
         "satellite scenes, one call per turn.\nTools:\n<tools>\n")
_TAIL = ("</tools>\nCall a tool like this:\n<tool_call>\n"
         '{"name": "<tool>", "arguments": {...}}\n</tool_call>\n'
         "Use scene ids and artifact names exactly as given. ")
FINISH = "Finish with the answer tool."
"""The closing sentence of the flat loop's prompt (:func:`system_prompt`'s default ``closing``)."""


def _type(p: dict) -> str:
    t = p.get("type", "any")
    if isinstance(t, list):
        return "|".join(t)
    if t == "array":
        return f"list of {_type(p.get('items', {}))}"
    if t == "object" and "additionalProperties" in p:
        return f"object of {_type(p['additionalProperties'])}"
    return t


def compact_schema(schema: dict) -> dict:
    """Token-lean rendering of an OpenAI function schema:
    ``{"name", "description", "arguments": {arg: "type[, one of ...][, default x][, note]"}}``.
    Arguments with a default are optional; all others are required."""
    fn = schema.get("function", schema)
    params = fn.get("parameters", {})
    args = {}
    for k, p in params.get("properties", {}).items():
        text = _type(p)
        if "enum" in p:
            text += ", one of " + " ".join(map(str, p["enum"]))
        if "default" in p:
            text += f", default {p['default']!s}" if p["default"] != "" else ", optional"
        if p.get("description"):
            text += f", {p['description']}"
        args[k] = text
    return {"name": fn["name"], "description": fn.get("description", ""), "arguments": args}


def system_prompt(schemas: list[dict], closing: str = FINISH) -> str:
    """Hermes-style system prompt: role, the tool schemas (one compact JSON per line) inside
    ``<tools></tools>``, how to call, and ``closing``.

    Args:
        schemas: OpenAI function schemas (:func:`earthrl.envs.tools.registry.openai_schema`): all the
            tools shown, or a subset (Earth-Agent-Pro's executor sees only its workflow node's tool).
        closing: the last sentence: "Finish with the answer tool." (:data:`FINISH`) where the agent
            answers, what else it must do where it does not (an executor's node that is not the answer).
    """
    lines = [json.dumps(compact_schema(s), separators=(",", ":"), ensure_ascii=False)
             for s in schemas]
    return _HEAD + "\n".join(lines) + "\n" + _TAIL + closing
