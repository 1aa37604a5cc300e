"""Failure-aware SFT trajectories (RS-Claw-Evolution §III-B, hint-guided failure-aware trajectories).

Each trajectory is a task's reference workflow in which one step is first tried with a wrong call
— a hallucinated artifact, a wrong band or argument, an unknown tool or broken JSON
(:data:`FAULT_KINDS`) — that the real :class:`~earthrl.envs.core.env.RSEnv` answers with its real
error observation (E = 1); the next turn carries a hint derived from that error and the correct
call, and the workflow goes on to the answer. The hint names the error's class as the paper does:
a *dependency* (an artifact that an earlier call makes), a *constraint* (an argument's allowed
value, a required argument) or an *error pattern* (tool names, call syntax), the error message
itself, and the fix (:func:`error_hint`). Only trajectories whose wrong call really was an error
and whose answer the caller's judge accepts are kept.

Documented choices: the faulty step and kind cycle over the tasks (task ``i`` starts at kind
``(i + seed) % 4`` and takes the first kind that applies and errors); a hallucinated artifact is
``<producing tool>_output`` (the scene id of a first step becomes ``<scene>_output``); a wrong
band/argument changes the last character of an ``index``/``band``/``classes``/``op``/``unit`` value
to ``X`` and otherwise drops the call's last argument; an unknown tool is ``compute_<tool>``; bad
JSON drops the call's closing brace (codeact: the closing parenthesis, a Python syntax error).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.reference_actions import codeact_action
from earthrl.rollout.sft_data import Judge, SFTTrajectory, call_text, finish, reference_calls, route_action, start, step

FAULT_KINDS = ("hallucinated_artifact", "wrong_argument", "unknown_tool", "bad_json")
DEPENDENCY, CONSTRAINT, PATTERN = "dependency", "constraint", "error pattern"
_MUTABLE_KEYS = ("index", "band", "bands", "classes", "op", "unit")


@dataclass(frozen=True)
class Fault:
    """A wrong version of reference step ``index`` (0-based): ``kind`` in :data:`FAULT_KINDS`, the
    wrong call ``{"name", "arguments"}`` (None for bad JSON: ``text`` is the broken action body)."""

    kind: str
    index: int
    call: dict | None
    json_text: str | None = None


def _mutated(value):
    if isinstance(value, str) and value:
        return value[:-1] + ("X" if value[-1] != "X" else "Y")
    if isinstance(value, list) and value and isinstance(value[0], str):
        return [_mutated(value[0])] + value[1:]
    return None


def make_fault(kind: str, calls: list[dict], index: int, artifacts: dict[str, str]) -> Fault | None:
    """The wrong call of ``kind`` for ``calls[index]``, or None where the kind does not apply.

    Args:
        calls: the reference calls (without the answer).
        artifacts: artifact name → tool that made it, of the steps before ``index``.
    """
    right = calls[index]
    args = right["arguments"]
    if kind == "hallucinated_artifact":
        ref = next((k for k, v in args.items() if isinstance(v, str) and v in artifacts), None)
        if ref is not None:
            return Fault(kind, index, {"name": right["name"], "arguments": {**args, ref: f"{artifacts[args[ref]]}_output"}})
        if "scene" in args and isinstance(args["scene"], str):
            return Fault(kind, index, {"name": right["name"], "arguments": {**args, "scene": f"{args['scene']}_output"}})
        return None
    if kind == "wrong_argument":
        key = next((k for k in _MUTABLE_KEYS if k in args and _mutated(args[k]) is not None), None)
        if key is not None:
            return Fault(kind, index, {"name": right["name"], "arguments": {**args, key: _mutated(args[key])}})
        if not args:
            return None
        return Fault(kind, index, {"name": right["name"], "arguments": dict(list(args.items())[:-1])})
    if kind == "unknown_tool":
        return Fault(kind, index, {"name": f"compute_{right['name']}", "arguments": dict(args)})
    if kind == "bad_json":
        body = json.dumps({"name": right["name"], "arguments": args})
        return Fault(kind, index, None, json_text=body[:-1])
    raise ValueError(f"fault kind {kind!r}: use one of {', '.join(FAULT_KINDS)}")


def _error_message(observation: str, kind: str) -> str:
    """The error's message: the first line after ``Error (<kind>):``, or the exception line (the last one)
    of a Python traceback (codeact)."""
    text = observation.split(f"Error ({kind}): ", 1)[-1] if kind else observation
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip() and not ln.strip().startswith("…")]
    if not lines:
        return ""
    line = lines[-1] if lines[0].startswith(("File \"", "Traceback")) else lines[0]
    return line[:160]


_CODE_ERRORS = ("code_error", "syntax_error")


def hint_category(error_kind: str) -> str:
    """The paper's class of an error kind: :data:`DEPENDENCY` for ``hallucinated_path`` (an artifact no earlier
    call made), :data:`PATTERN` for tool names and call syntax (``unknown_tool``, ``parse_error``, Python
    errors), :data:`CONSTRAINT` for the rest (``schema_error``, ``out_of_range``, ``tool_error``, …)."""
    if error_kind == "hallucinated_path":
        return DEPENDENCY
    if error_kind in ("unknown_tool", "parse_error", *_CODE_ERRORS):
        return PATTERN
    return CONSTRAINT


def error_hint(error_kind: str, observation: str, wrong: dict | None, right: dict) -> str:
    """The hint a recovery turn carries, derived from the env's error (module doc).

    Args:
        error_kind: ``StepResult.error_kind`` of the wrong call.
        observation: its real error observation.
        wrong: the wrong call (None for a call that did not parse).
        right: the correct call.
    """
    category = hint_category(error_kind)
    changed = [k for k in right["arguments"] if wrong is None or wrong["arguments"].get(k) != right["arguments"][k]]
    if wrong is None and error_kind in _CODE_ERRORS:
        fix = f"fix the Python error; the step calls {right['name']} with {json.dumps(right['arguments'])}"
    elif wrong is None:
        fix = "write the call as valid JSON with balanced braces and double quotes"
    elif wrong["name"] != right["name"]:
        fix = f"the tool is named '{right['name']}'"
    elif category == DEPENDENCY:
        fix = "; ".join(f"'{k}' must name an existing artifact or scene: '{right['arguments'][k]}'" for k in changed)
    else:
        fix = "; ".join((f"'{k}' must be {json.dumps(right['arguments'][k])}" if k in wrong["arguments"]
                         else f"give the required argument '{k}' = {json.dumps(right['arguments'][k])}") for k in changed)
    return f"Hint ({category}): the last call failed with {error_kind}: {_error_message(observation, error_kind)} Fix: {fix}."


# ------------------------------------------------------------------------------- rendering


def _json_wrong(fault: Fault) -> str:
    return f"<tool_call>{fault.json_text}</tool_call>" if fault.call is None else call_text(fault.call)


def _code_block(calls: list[dict], comment: str | None = None, answer: dict | None = None) -> str:
    """A codeact block printing each call's result (the oracle's rendering), ending in the ``answer``
    call when given; ``comment`` (the hint) as comment lines at its top."""
    lines = codeact_action({"reference": calls, "answer": answer["arguments"] if answer else {"value": 0}}).split("\n")
    if answer is None:
        lines = lines[:-2] + lines[-1:]  # drop the answer line
    if comment:
        lines.insert(1, "\n".join(f"# {c}" for c in comment.splitlines()))
    return "\n".join(lines)


def failure_trajectory(env: RSEnv, task: dict, judge: Judge, kind: str, index: int,
                       phrasing: str = "IF") -> SFTTrajectory | None:
    """The failure-aware trajectory of ``task`` with fault ``kind`` at reference step ``index``, or None
    when the kind does not apply there, the wrong call was not an error, or the answer is not correct."""
    calls = reference_calls(task)
    tools, answer = calls[:-1], calls[-1]
    fmt = env.format.name
    traj = start(env, task, phrasing, "failure")
    artifacts: dict[str, str] = {}
    if fmt == "codeact":
        return _codeact_failure(env, traj, task, judge, kind, index, tools, answer)
    for i, right in enumerate(tools):
        if i == index:
            fault = make_fault(kind, tools, i, artifacts)
            if fault is None:
                return None
            wrong_text = _json_wrong(fault)
            if fmt == "hierarchical":
                step(env, traj, route_action(right), "manager")
            res = step(env, traj, wrong_text, "specialist" if fmt == "hierarchical" else "agent")
            if not res.error:
                return None
            hint = error_hint(res.error_kind, res.observation, fault.call, right)
            if fmt == "hierarchical":
                step(env, traj, hint + "\n" + route_action(right, f"retry {right['name']}: {hint}"), "manager", hint)
                res = step(env, traj, call_text(right), "specialist")
            else:
                res = step(env, traj, hint + "\n" + call_text(right), "agent", hint)
        else:
            if fmt == "hierarchical":
                step(env, traj, route_action(right), "manager")
            res = step(env, traj, call_text(right), "specialist" if fmt == "hierarchical" else "agent")
        if res.error:
            return None
        made = (env.history[-1].result or {}).get("artifact")
        if made:
            artifacts[made] = right["name"]
    step(env, traj, call_text(answer), "manager" if fmt == "hierarchical" else "agent")
    finish(traj, task, judge)
    return traj if traj.correct else None


def _codeact_failure(env, traj, task, judge, kind, index, tools, answer) -> SFTTrajectory | None:
    fault = make_fault(kind, tools, index, {})
    if fault is None or (kind == "hallucinated_artifact" and index > 0 and fault.call["arguments"] == tools[index]["arguments"]):
        return None
    if fault.call is None:  # bad "JSON" in code: an unclosed call
        wrong = _code_block(tools[:index] + [tools[index]])
        wrong = wrong[: wrong.rindex(")")] + "\n```"
    else:
        wrong = _code_block(tools[:index] + [fault.call])
    res = step(env, traj, wrong)
    if not res.error:
        return None
    hint = error_hint(res.error_kind, res.observation, fault.call, tools[index])
    step(env, traj, _code_block(copy.deepcopy(tools[index:]), hint, answer), hint=hint)
    finish(traj, task, judge)
    return traj if traj.correct and traj.turns[-1].error is False else None


def build_failure(env: RSEnv, tasks: list[dict], judge: Judge, phrasing: str = "IF",
                  seed: int = 0) -> tuple[list[SFTTrajectory], dict]:
    """One failure-aware trajectory per task where one can be made (module doc).

    Returns:
        (trajectories, counts ``{"tasks", "kept", "skipped"}`` and ``by_kind``/``by_error`` counts).
    """
    out, counts = [], {"tasks": len(tasks), "kept": 0, "skipped": 0, "by_kind": {}, "by_error": {}}
    for n, task in enumerate(tasks):
        steps = len(task["reference"])
        made = None
        for j in range(len(FAULT_KINDS)):
            kind = FAULT_KINDS[(n + seed + j) % len(FAULT_KINDS)]
            for index in [(n + seed) % max(steps, 1)] + list(range(steps)):
                made = failure_trajectory(env, task, judge, kind, index, phrasing) if steps else None
                if made is not None:
                    break
            if made is not None:
                counts["by_kind"][kind] = counts["by_kind"].get(kind, 0) + 1
                break
        if made is None:
            counts["skipped"] += 1
            continue
        err = next(t.error_kind for t in made.turns if t.error)
        counts["by_error"][err] = counts["by_error"].get(err, 0) + 1
        out.append(made)
    counts["kept"] = len(out)
    return out, counts


# ------------------------------------------------------------- hints from a played episode


def reference_step(task: dict, done: list[str], wrong: dict | None) -> dict:
    """The reference call a failed call stood for: the first reference call (answer included) of ``wrong``'s tool
    not yet among ``done`` (names of the calls that ran without error before), else the first reference call whose
    tool is not in ``done``, else the answer call."""
    calls = reference_calls(task)
    left = list(calls)
    for name in done:
        hit = next((c for c in left if c["name"] == name), None)
        if hit is not None:
            left.remove(hit)
    if wrong is not None:
        same = next((c for c in left if c["name"] == wrong["name"]), None)
        if same is not None:
            return same
    return left[0] if left else calls[-1]


def observed_hint(history: list, task: dict, after: int = 0) -> str | None:
    """The :func:`error_hint` of the first error turn of a played episode, or None when no turn erred.

    Args:
        history: the episode's :class:`~earthrl.envs.core.env.StepResult` s (``RSEnv.history``).
        task: the task dict; its reference workflow names the call the failed one stood for
            (:func:`reference_step`; RS-Claw-Evolution builds its hints with the reference code, §VI).
        after: error turns before this index are passed over (a replayed prefix).
    """
    done: list[str] = []
    for i, res in enumerate(history):
        if res.error and i >= after:
            bad = next((c for c in res.tool_calls if c.get("error")), None)
            wrong = {"name": bad["name"], "arguments": dict(bad.get("arguments") or {})} if bad else None
            return error_hint(res.error_kind or "error", res.observation, wrong, reference_step(task, done, wrong))
        done += [c["name"] for c in res.tool_calls if not c.get("error")]
    return None


def workflow_hint(history: list, task: dict) -> str:
    """The hint of an episode that erred nowhere yet ended wrong or without an answer: a *dependency* hint naming
    the tools it called and the reference workflow's tool order (no argument, no value)."""
    called = [c["name"] for res in history for c in res.tool_calls if not c.get("error")]
    ended = "with a wrong answer" if any(res.answer is not None for res in history) else "without an answer"
    order = " -> ".join(c["name"] for c in reference_calls(task))
    return (f"Hint ({DEPENDENCY}): the last attempt ended {ended} after calling "
            f"{', '.join(called) or 'no tool'}. Fix: the workflow is {order}, each step on the artifact of the one before.")
