"""SimCRAFT's synthesis roles as functions of an engine (§3.4.1–3.4.2 and App. D).

The paper's roles: a **user simulator** (expert or novice request, then the answer to a clarification question), a
**clarification agent** (asks for the missing critical slots), and four trajectory agents on a shared state
machine — **planning** (a roadmap of tools), **execution** (one tool call per step), **reflection** (rewrites a call
the Mock Execution Engine rejected) and **summary** (reports the result). Each role here is a function
``role(engine, ctx, ...) -> str`` that writes the role's chat messages and asks ``engine`` for the reply:

- :class:`ScriptedEngine` (the default, and what tests use): the role's reply written from the seed task's
  reference workflow — the expert request, the masked request, the clarification question, the manifest as the
  user's answer, the reference tool sequence, its calls, the answer call;
- :class:`ChatEngine`: any :data:`~earthrl.rollout.sft_teacher.Chat` (an OpenAI-compatible endpoint through
  :func:`~earthrl.rollout.sft_teacher.openai_chat`, e.g. ``earthrl serve`` or vLLM's server) plays every role from
  the messages.

In mock mode a tool returns no values, so the summary role is given the seed task's result (its reference
workflow's answer, computed in execute mode when the suite was built): SimCRAFT's summary aggregates the results of
an execution that the mock engine stands in for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from earthrl.rollout.sft_data import call_text, reference_calls
from earthrl.rollout.sft_teacher import Chat, cut_at_stop
from earthrl.rollout.simcraft_users import CLARIFY_QUESTION, Slots, clarify_reply, mask_question

ROLES = ("user", "clarify", "user_reply", "plan", "execute", "reflect", "summary")
"""The roles an engine is asked to play (the ``role`` argument of an engine call)."""


@dataclass
class SynthContext:
    """What the roles of one synthesised episode share (the state machine's state).

    Attributes:
        task: the seed TaskSpec dict. mode: ``"expert"`` | ``"novice"``. slots: its critical slots.
        manifest: the data manifest (``Data (scene | sensor | date | bands): …``).
        system: the agent's system prompt (tool schemas). tools: tool names the agent may call.
        plan: the planner's tool names (``answer`` left out). step: the index of the executed step.
        stop_strings: where an action is cut (``env.stop_strings``).
        sop_context: the SOP block retrieved for the seed request (``env.sops.retrieve``; "" without retrieval), given
            to the planning agent: SimCRAFT grounds synthesis in the SOP knowledge base (§3.4).
    """

    task: dict
    mode: str
    slots: Slots
    manifest: str
    system: str
    tools: list[str]
    stop_strings: tuple[str, ...]
    plan: list[str] = field(default_factory=list)
    step: int = 0
    sop_context: str = ""


Engine = Callable[[str, list[dict], SynthContext], str]
"""``engine(role, messages, ctx) -> reply text``: one of :data:`ROLES`, the role's OpenAI-style messages, the state."""


class ScriptedEngine:
    """The roles' replies written from the seed task's reference workflow (module doc); ignores ``messages``."""

    def __call__(self, role: str, messages: list[dict], ctx: SynthContext) -> str:
        calls = reference_calls(ctx.task)
        if role == "user":
            ap = ctx.task["question"]["AP"]
            return mask_question(ap, ctx.slots) if ctx.mode == "novice" else f"{ap}\n\n{ctx.manifest}"
        if role == "clarify":
            return CLARIFY_QUESTION
        if role == "user_reply":
            return clarify_reply(ctx.manifest)
        if role == "plan":
            return json.dumps([c["name"] for c in calls[:-1]])
        if role in ("execute", "reflect"):
            return call_text(calls[ctx.step])
        if role == "summary":
            return call_text(calls[-1])
        raise ValueError(f"role {role!r}: use one of {', '.join(ROLES)}")


@dataclass
class ChatEngine:
    """Every role played by ``chat`` (:data:`~earthrl.rollout.sft_teacher.Chat`, e.g. an OpenAI-compatible endpoint)."""

    chat: Chat

    def __call__(self, role: str, messages: list[dict], ctx: SynthContext) -> str:
        return self.chat(messages)


def _msgs(system: str, user: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def simulate_user(engine: Engine, ctx: SynthContext) -> str:
    """The user simulator's request (expert: every slot stated; novice: area, sensor and time left out)."""
    ap = ctx.task["question"]["AP"]
    if ctx.mode == "expert":
        ask = f"Write this remote-sensing request as an expert would, keeping every detail:\n{ap}\n\n{ctx.manifest}"
    else:
        ask = ("Write this remote-sensing request as a novice would: keep the goal and any options, but do not "
               f"mention the scene ids, the satellite or sensor, the dates or years, or the site.\n{ap}")
    return engine("user", _msgs("You simulate a user of a remote-sensing assistant. Reply with the request only.",
                                ask), ctx).strip()


def ask_clarification(engine: Engine, ctx: SynthContext, query: str) -> str:
    """The clarification agent's question for the slots the request lacks (area/scene, sensor, time range)."""
    return engine("clarify", _msgs("You are a remote-sensing assistant. The request below lacks details you need. "
                                   "Ask one short question for the area or scene, the sensor and the date or time "
                                   "range. Do not guess them.", query), ctx).strip()


def answer_clarification(engine: Engine, ctx: SynthContext, question: str) -> str:
    """The simulated user's answer to ``question``: the slots, given as the data manifest."""
    return engine("user_reply", _msgs("You simulate the user. Answer the assistant's question with the data below, "
                                      f"copying its lines exactly.\n{ctx.manifest}", question), ctx).strip()


def plan_workflow(engine: Engine, ctx: SynthContext, dialogue: str) -> list[str]:
    """The planning agent's roadmap: tool names in order (``answer`` left out); [] when the reply holds no JSON
    list of names. Its system prompt holds the tool inventory (``ctx.system``) and the retrieved SOPs (``ctx.sop_context``)."""
    grounding = f"\n\n{ctx.sop_context}" if ctx.sop_context else ""
    reply = engine("plan", _msgs(f"{ctx.system}{grounding}\n\nPlan the workflow: reply with a JSON list of tool names "
                                 "in call order (leave out answer).", dialogue), ctx)
    m = re.search(r"\[[^\[\]]*\]", reply)
    try:
        names = json.loads(m.group(0)) if m else []
    except json.JSONDecodeError:
        return []
    return [n for n in names if isinstance(n, str) and n != "answer"]


def execute_step(engine: Engine, ctx: SynthContext, messages: list[dict]) -> str:
    """The execution agent's call for plan step ``ctx.step`` (cut after the first stop string)."""
    hint = {"role": "user", "content": f"Next step of the plan: {ctx.plan[ctx.step]}. Reply with one tool call."}
    return cut_at_stop(engine("execute", [*messages, hint], ctx), ctx.stop_strings).strip()


def reflect(engine: Engine, ctx: SynthContext, messages: list[dict], action: str, error: str) -> str:
    """The reflection agent's rewrite of ``action`` after the mock engine's ``error`` observation."""
    fix = {"role": "user", "content": f"Your call\n{action}\nfailed: {error}\nReply with the corrected tool call."}
    return cut_at_stop(engine("reflect", [*messages, fix], ctx), ctx.stop_strings).strip()


def summarize(engine: Engine, ctx: SynthContext, messages: list[dict]) -> str:
    """The summary agent's ``answer`` call, given the seed task's result (module doc)."""
    ans = ctx.task["answer"]
    got = {"role": "user", "content": f"The workflow's result is {ans['value']} {ans.get('unit', '')}. Reply with "
                                      "the answer tool call."}
    return cut_at_stop(engine("summary", [*messages, got], ctx), ctx.stop_strings).strip()
