"""A task's reference workflow written as action texts: what a scripted policy says.

Two renderings, both ending with the ``answer`` call that gives the task's stored answer:

- :func:`scripted_actions`: one ``<tool_call>`` a turn in the json format, or the whole workflow as
  one codeact block in which each call runs inside ``try`` (a failing call is printed and the block
  goes on to the answer; the replay of reference workflows in mock mode relies on it);
- :func:`codeact_action`: the workflow as one codeact block that prints each call's result, the
  way an agent writes it (the oracle's SFT rendering and the codeact side of a token count).
"""

from __future__ import annotations

import json


def scripted_actions(task: dict, action_format: str) -> list[str]:
    """The scripted policy: the reference calls, then the answer, as action texts.

    The mock engine names artifacts as the real tools do (:attr:`~earthrl.envs.tools.registry.Tool.output_name`),
    so a reference workflow replays in mock mode without an error observation.

    Args:
        task: a TaskSpec dict (``reference`` and ``answer`` are read).
        action_format: "json" (one ``<tool_call>`` a turn) or "codeact" (one Python block).

    Raises:
        ValueError: another action format.
    """
    answer = {"name": "answer", "arguments": {"value": task["answer"]["value"], "unit": task["answer"].get("unit", "")}}
    calls = list(task["reference"]) + [answer]
    if action_format == "json":
        return ["<tool_call>" + json.dumps({"name": c["name"], "arguments": c["arguments"]}) + "</tool_call>"
                for c in calls]
    if action_format == "codeact":  # a failing call is printed, the block goes on to the answer
        lines = [f"try:\n    {c['name']}(**{c['arguments']!r})\nexcept Exception as exc:\n    print(exc)" for c in calls[:-1]]
        return ["```python\n" + "\n".join(lines + [f"answer(**{answer['arguments']!r})"]) + "\n```"]
    raise ValueError(f"action_format={action_format!r}: scripted reference actions are written in json or codeact")


def codeact_action(task: dict) -> str:
    """The reference workflow as one CodeAct block: ``print(tool(k=v, …))`` per call, then ``answer(…)``."""
    def call(name: str, args: dict) -> str:
        return f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"

    answer = {"value": task["answer"]["value"], "unit": task["answer"].get("unit", "")}
    lines = [f"print({call(c['name'], c['arguments'])})" for c in task["reference"]] + [call("answer", answer)]
    return "```python\n" + "\n".join(lines) + "\n```"
