"""Hierarchical action format (HiRS-Agent §3, manager + specialists; VG-HRL): one backbone plays
both roles through role prompts.

Turns alternate. A **manager** turn either routes a sub-goal to a specialist family::

    <route>{"family": "PRA", "subgoal": "compute NDVI of scene X"}</route>

— the env replies with the role prompt of that family's specialist (sub-goal + only that family's
tools) — or finishes with ``<tool_call>{"name": "answer", ...}</tool_call>`` (skill-tree actions
are allowed too). The **specialist** turn that follows emits one hermes tool call; the env runs it
and returns the result to the manager, whatever the outcome (the manager re-routes on failure).

Rules (documented choices):

- a specialist calling a tool of another family: ``out_of_family`` error observation (E=1), the
  tool does not run (HiRS: a hallucinated out-of-domain tool);
- a specialist calling ``answer``, or a manager calling an RS tool: ``wrong_role`` (E=1);
- a manager turn with neither tag, bad JSON, an unknown family or an empty sub-goal:
  ``parse_error`` / ``schema_error`` (E=1), the manager keeps the turn.

``StepResult.role`` is who wrote the turn; ``StepResult.subgoal`` the routed
``{"family", "subgoal"}`` (manager route turns and the specialist turn working on it).
"""

from __future__ import annotations

import json

from earthrl.envs.formats.parsers import ActionError, extract_call, first_json_object, tag_body
from earthrl.envs.formats.prompts import compact_schema
from earthrl.envs.formats.registry import ActionFormat, register_format, run_hermes_call
from earthrl.envs.tools.registry import FAMILIES, openai_schema

FAMILY_ROLES = {
    "SPA": "surface parsing and preprocessing (data access, metadata, masks, thresholds)",
    "PRA": "physical retrieval (spectral indices, band math, reflectance, temperature)",
    "SAA": "statistical and spatio-temporal analytics (statistics, areas, shares, change, trends)",
}
_MANAGER_HINT = ('Route one sub-goal: <route>{"family": "SPA|PRA|SAA", "subgoal": "..."}</route>, '
                 'or finish: <tool_call>{"name": "answer", "arguments": {"value": ..., "unit": "..."}}'
                 '</tool_call>')


def parse_route(text: str) -> dict:
    """``{"family", "subgoal"}`` of a manager's ``<route>`` turn.

    Raises:
        ActionError: ``parse_error`` (no JSON object), ``schema_error`` (family not SPA/PRA/SAA,
            empty or missing subgoal) — naming the field.
    """
    body = tag_body(text, "route")
    obj = first_json_object(text if body is None else body)
    family = str(obj.get("family", "")).strip().upper()
    subgoal = obj.get("subgoal")
    if family not in FAMILIES:
        raise ActionError("schema_error", f"route field 'family' = {obj.get('family')!r}: use one of "
                          f"{', '.join(FAMILIES)}. {_MANAGER_HINT}")
    if not isinstance(subgoal, str) or not subgoal.strip():
        raise ActionError("schema_error", f"route field 'subgoal' must be a non-empty string. {_MANAGER_HINT}")
    return {"family": family, "subgoal": subgoal.strip()}


def _first_tag(text: str) -> str | None:
    hits = [(text.find(t), t) for t in ("<route>", "<tool_call>") if t in text]
    return min(hits)[1] if hits else None


@register_format("hierarchical")
class HierarchicalFormat(ActionFormat):
    """Manager / specialist turns (module doc). State: ``phase`` (``"manager"`` or
    ``"specialist"``) and the current ``subgoal``."""

    def __init__(self, env, **options):
        super().__init__(env, **options)
        self.reset()

    def reset(self) -> None:
        self.phase = "manager"
        self.subgoal: dict | None = None

    def family_tools(self, family: str) -> list[str]:
        """Callable tools of ``family`` (answer excluded)."""
        return [n for n in self.env.callable_tools()
                if n != "answer" and self.env.tools[n].family == family]

    def system_prompt(self) -> str:
        lines = [f"{f}: {FAMILY_ROLES[f]}; tools: {', '.join(self.family_tools(f)) or 'after open_skill'}"
                 for f in FAMILIES]
        return ("You are the manager of remote-sensing specialists. Each turn, route one sub-goal "
                "to a specialist family, or finish with the answer tool.\nFamilies:\n"
                + "\n".join(lines) + "\n" + _MANAGER_HINT
                + "\nUse scene ids and artifact names exactly as given.")

    def role_prompt(self, route: dict) -> str:
        """The specialist's prompt: family, sub-goal, that family's tools, how to call."""
        schemas = [json.dumps(compact_schema(openai_schema(self.env.tools[n])), separators=(",", ":"))
                   for n in self.family_tools(route["family"])]
        return (f"You are the {route['family']} specialist ({FAMILY_ROLES[route['family']]}).\n"
                f"Sub-goal: {route['subgoal']}\nTools:\n<tools>\n" + "\n".join(schemas)
                + '\n</tools>\nCall exactly one tool: <tool_call>{"name": "<tool>", "arguments": '
                  "{...}}</tool_call>")

    def step(self, text: str):
        return self._manager(text) if self.phase == "manager" else self._specialist(text)

    def _manager(self, text: str):
        env = self.env
        tag = _first_tag(text)
        if tag == "<tool_call>" or (tag is None and '"name"' in text):
            try:
                call = extract_call(text)
            except ActionError as e:
                return env.error_result(e.kind, e.message, role="manager")
            if call["name"] != "answer" and call["name"] in env.tools:
                return env.error_result("wrong_role", f"the manager does not call {call['name']}; "
                                        f"route it. {_MANAGER_HINT}", role="manager", tool_call=call)
            out = env.call(call["name"], call["arguments"])
            return env.result_from([out], role="manager")
        try:
            route = parse_route(text)
        except ActionError as e:
            return env.error_result(e.kind, e.message, role="manager")
        self.phase, self.subgoal = "specialist", route
        return env.result_from([], text=self.role_prompt(route), role="manager", subgoal=route)

    def _specialist(self, text: str):
        env, route = self.env, self.subgoal
        self.phase = "manager"
        try:
            name = extract_call(text)["name"]
        except ActionError:
            name = None
        if name == "answer":
            res = env.error_result("wrong_role", "only the manager answers; call one "
                                   f"{route['family']} tool", role="specialist", subgoal=route)
        else:
            res, _ = run_hermes_call(env, text, family=route["family"], role="specialist", subgoal=route)
        res.observation = env.truncate(f"[{route['family']} specialist] {res.observation}\n"
                                       "Manager: route the next sub-goal or answer.")
        return res
