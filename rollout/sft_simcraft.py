"""SimCRAFT's trajectory synthesis with Mock Execution Engine validation (§3.4 and App. C–D), as SFT records.

For each seed task and user mode (:mod:`earthrl.rollout.simcraft_users`) the roles of
:mod:`earthrl.rollout.simcraft_roles` write one episode in the json action format, played in an
:class:`~earthrl.envs.core.env.RSEnv` in ``mock`` mode (schema legality, registered-path dependencies,
sensor/tool compatibility; no pixels):

1. the user simulator writes the request (the record's first user message);
2. novice mode: the clarification agent asks for the masked slots (a :data:`~earthrl.rollout.sft_data.CLARIFY_ROLE`
   turn) and the simulated user answers with them;
3. the planning agent writes the tool roadmap, which heads the first action (``Plan: a -> b -> answer``); with SOP
   retrieval (an env built with ``sops``, ``env.sops.retrieve=true``) its prompt holds the SOPs retrieved for the
   expert request, in both user modes (the record keeps them only where the env put them: the expert request);
4. the execution agent writes one call per plan step; a call the mock engine rejects goes to the reflection agent
   once, and only the rewritten call enters the record (reflection intercepts local errors before they propagate);
5. the summary agent writes the ``answer`` call.

A candidate enters the corpus only when every check passes; otherwise it is counted under the first failing reason
of :data:`REJECT_REASONS`. The last check (:func:`validate`) replays the finished record's actions in a fresh mock
episode and requires zero error observations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.sops import split_sops
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.data.scene import scene_line
from earthrl.rollout.sft_data import CLARIFY_ROLE, Judge, SFTTrajectory, SFTTurn
from earthrl.rollout.simcraft_roles import (
    Engine,
    ScriptedEngine,
    SynthContext,
    answer_clarification,
    ask_clarification,
    execute_step,
    plan_workflow,
    reflect,
    simulate_user,
    summarize,
)
from earthrl.rollout.simcraft_users import leaked, manifest_text, maskable, slots_of

SOURCE = "simcraft"
USER_MODES = ("expert", "novice")
MODE_CHOICES = (*USER_MODES, "both")

REJECT_REASONS = ("slot_leak", "clarification", "parse", "mock_error", "no_answer", "wrong_answer")
"""Why a candidate is rejected, in the order checked: ``slot_leak`` a novice request or the clarification question
names a masked slot value; ``clarification`` the simulated user's answer lacks a slot; ``parse`` the plan or a call
does not parse (``parse_error``) even after reflection; ``mock_error`` the mock engine rejects a call after reflection
(schema, unregistered path, sensor) or the replay of the finished record (:func:`validate`) shows an error;
``no_answer`` the episode ends without an ``answer``; ``wrong_answer`` the judge rejects the answer."""


class Rejected(Exception):
    """A candidate failed a check: ``reason`` (one of :data:`REJECT_REASONS`) and a one-line ``detail``."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def modes_of(choice: str) -> tuple[str, ...]:
    """The user modes of ``choice`` (``both``: expert and novice, SimCRAFT's best 50/50 mix, §4.7).

    Raises:
        ValueError: another value (names the choices).
    """
    if choice not in MODE_CHOICES:
        raise ValueError(f"mode {choice!r}: use one of {', '.join(MODE_CHOICES)}")
    return USER_MODES if choice == "both" else (choice,)


def _check(res, action: str) -> None:
    if res.error:
        raise Rejected("parse" if res.error_kind == "parse_error" else "mock_error",
                       f"{res.error_kind}: {res.observation[:160]} (action {action[:80]!r})")


def _play(env: RSEnv, engine: Engine, ctx: SynthContext, messages: list[dict], action: str, rec: SFTTrajectory):
    """Step ``action``; on an error observation ask the reflection agent once; append the accepted turn."""
    res = env.step(action)
    if res.error:
        action = reflect(engine, ctx, messages, action, res.observation)
        res = env.step(action)
    _check(res, action)
    rec.turns.append(SFTTurn(action=action, observation=res.observation, role=res.role or "agent"))
    messages += [{"role": "assistant", "content": action}, {"role": "user", "content": res.observation}]
    return res


def synthesize(env: RSEnv, task: dict, mode: str, engine: Engine, judge: Judge,
               stop_strings: tuple[str, ...]) -> SFTTrajectory:
    """One validated episode of ``task`` in user ``mode`` (module doc); ``env`` must be a json-format mock env;
    an engine's action is cut after the first of ``stop_strings`` (``env.stop_strings``).

    Raises:
        Rejected: the first failed check.
    """
    expert_user = env.reset(TaskSpec.model_validate(task), "AP")
    slots = slots_of(task, env.scenes)
    ctx = SynthContext(task=task, mode=mode, slots=slots, manifest=manifest_text(task, env.scenes, scene_line),
                       system=env.system_prompt(), tools=env.callable_tools(), stop_strings=tuple(stop_strings),
                       sop_context=sop_block(expert_user))
    query = simulate_user(engine, ctx)
    if mode == "novice" and leaked(query, slots):
        raise Rejected("slot_leak", f"the novice request names {leaked(query, slots)[:3]}")
    rec = SFTTrajectory(task_id=task["id"], source=SOURCE, action_format="json", phrasing="AP", system=ctx.system,
                        user=query if mode == "novice" else expert_user, user_mode=mode)
    messages = [{"role": "system", "content": ctx.system}, {"role": "user", "content": rec.user}]
    if mode == "novice":
        question = ask_clarification(engine, ctx, query)
        if leaked(question, slots):
            raise Rejected("slot_leak", f"the clarification question names {leaked(question, slots)[:3]}")
        reply = answer_clarification(engine, ctx, question)
        missing = slots.missing_from(reply)
        if missing:
            raise Rejected("clarification", f"the user's answer lacks {missing[:3]}")
        rec.turns.append(SFTTurn(action=question, observation=reply, role=CLARIFY_ROLE))
        messages += [{"role": "assistant", "content": question}, {"role": "user", "content": reply}]
    ctx.plan = plan_workflow(engine, ctx, "\n".join(m["content"] for m in messages[1:]))
    if not ctx.plan:
        raise Rejected("parse", "the planner's reply holds no JSON list of tool names")
    head = "Plan: " + " -> ".join([*ctx.plan, "answer"]) + "\n"
    res = None
    for i in range(len(ctx.plan)):
        ctx.step = i
        action = execute_step(engine, ctx, messages)
        res = _play(env, engine, ctx, messages, head + action if ctx.step == 0 else action, rec)
        if res.done:
            break
    if res is None or not res.done:
        res = _play(env, engine, ctx, messages, summarize(engine, ctx, messages), rec)
    if not res.done:
        raise Rejected("no_answer", "the summary did not call answer")
    rec.answer = res.answer
    rec.correct = bool(judge(rec.answer, task["answer"]))
    if not rec.correct:
        raise Rejected("wrong_answer", f"answer {rec.answer} against {task['answer'].get('value')}")
    errors = [r for r in validate(env, rec, task) if r.error]
    if errors:
        raise Rejected("mock_error", f"replay: {errors[0].error_kind}: {errors[0].observation[:160]}")
    return rec


def sop_block(user: str) -> str:
    """The SOP block :meth:`~earthrl.envs.core.env.RSEnv.reset` appended to ``user`` ("" when it holds none)."""
    rest = user[len(split_sops(user)):]
    return rest.strip()


def validate(env: RSEnv, rec: SFTTrajectory, task: dict) -> list:
    """The Mock Execution Engine check of a finished record: its actions (clarification turns left out, no env
    runs them) replayed in a fresh episode of ``task`` in ``env``; returns the
    :class:`~earthrl.envs.core.env.StepResult` of each (a valid record has no ``error``)."""
    env.reset(TaskSpec.model_validate(task), "AP")
    return [env.step(t.action) for t in rec.turns if t.role != CLARIFY_ROLE]


def build_simcraft(env: RSEnv, tasks: list[dict], judge: Judge, *, stop_strings: tuple[str, ...], mode: str = "both",
                   engine: Engine | None = None,
                   on_reject: Callable[[dict, str, Rejected], None] | None = None) -> tuple[list[SFTTrajectory], dict]:
    """Synthesised records of ``tasks`` in the user modes of ``mode`` (one candidate per task and mode).

    Args:
        env: an RSEnv in ``mock`` mode with the ``json`` action format.
        stop_strings: where an engine's action is cut (``env.stop_strings``, e.g. ``("</tool_call>",)``).
        engine: plays the roles (default :class:`~earthrl.rollout.simcraft_roles.ScriptedEngine`).
        on_reject: called with ``(task, mode, rejection)`` for each rejected candidate.

    Returns:
        (records, counts ``{"candidates", "kept", "expert", "novice", "not_maskable", "rejected": {reason: n}}``);
        ``not_maskable``: tasks left out of novice mode because their answer names a slot
        (:func:`~earthrl.rollout.simcraft_users.maskable`).

    Raises:
        ValueError: ``env`` is not a json-format mock env, or an unknown ``mode``.
    """
    if env.mode != "mock" or env.format.name != "json":
        raise ValueError(f"SimCRAFT synthesis needs env.mode=mock and the json action format, got "
                         f"{env.mode}/{env.format.name}")
    engine = engine or ScriptedEngine()
    out, kept, rejected, not_maskable, n = [], Counter(), Counter(), 0, 0
    for task in tasks:
        for m in modes_of(mode):
            if m == "novice" and not maskable(task, slots_of(task, env.scenes)):
                not_maskable += 1
                continue
            n += 1
            try:
                out.append(synthesize(env, task, m, engine, judge, stop_strings))
                kept[m] += 1
            except Rejected as exc:
                rejected[exc.reason] += 1
                if on_reject is not None:
                    on_reject(task, m, exc)
    return out, {"candidates": n, "kept": len(out), "expert": kept["expert"], "novice": kept["novice"],
                 "not_maskable": not_maskable, "rejected": {r: rejected[r] for r in REJECT_REASONS}}
