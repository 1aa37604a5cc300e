"""The teacher loop: hint-guided re-exploration of a teacher's failed attempts (RS-Claw-Evolution §III-B,
hint-guided failure-aware trajectory generation).

Per task the teacher (any :data:`~earthrl.rollout.sft_teacher.Chat`: a rollout engine in process or an
OpenAI-compatible endpoint) plays one episode in the real :class:`~earthrl.envs.core.env.RSEnv`. An episode that
ends correct without an error turn is kept as it is. Otherwise its first real error observation becomes a hint
(:func:`~earthrl.rollout.sft_failures.observed_hint`: the error's class — *constraint*, *dependency* or *error
pattern* —, its kind and message, and the fix the task's reference call gives; an episode with no error turn that
ended wrong or without an answer gets the reference workflow's tool order,
:func:`~earthrl.rollout.sft_failures.workflow_hint`), and the teacher re-explores the task up to ``attempts`` times
with the hint in its context: the first episode's turns up to and including its first error turn are replayed
(the record keeps that error turn with its real observation, E = 1, which error-turn masking leaves out of the
loss), the hint follows that observation in the teacher's messages only, and the teacher goes on from there. A
re-exploration that fails again adds the hint of its own first new error. The first re-exploration that ends
correct is kept; else the first episode when it ended correct (its error turns masked); else none.

Documented choices where the paper is silent: the hint is shown to the teacher and kept out of the record's
text (the student learns to recover from the environment's observation, which is all it sees at inference;
``SFTTurn.hint`` notes it on the teacher's first turn after it); the prefix is replayed up to the first error
turn only; a first error on the episode's last allowed turn re-explores from the start, the hint after the
first user message.
"""

from __future__ import annotations

from earthrl.envs.core.env import RSEnv
from earthrl.rollout.sft_data import Judge, SFTTrajectory, SFTTurn
from earthrl.rollout.sft_failures import observed_hint, workflow_hint
from earthrl.rollout.sft_teacher import Chat, endpoint_episode

SOURCE = "teacher_loop"
OUTCOMES = ("kept_first_try", "kept_after_hint", "kept_first_try_with_errors", "dropped_wrong", "dropped_no_answer")
"""What became of a task: kept as first played, kept from a hinted re-exploration, kept as first played with its
error turns (no re-exploration ended correct), dropped (the last episode answered wrong / gave no answer)."""


def error_prefix(traj: SFTTrajectory) -> list[SFTTurn] | None:
    """``traj``'s turns up to and including its first error turn, or None when no turn erred."""
    first = next((i for i, t in enumerate(traj.turns) if t.error), None)
    return None if first is None else traj.turns[: first + 1]


def teacher_loop_task(env: RSEnv, task: dict, chat: Chat, judge: Judge, *, attempts: int = 2, phrasing: str = "IF",
                      max_turns: int = 5, stop_strings: tuple[str, ...] = ()
                      ) -> tuple[SFTTrajectory | None, str, list[str], int]:
    """The teacher loop on one task (module doc).

    Returns:
        (the kept trajectory or None, its outcome in :data:`OUTCOMES`, the hints given, episodes played).
    """
    play = dict(phrasing=phrasing, max_turns=max_turns, stop_strings=stop_strings, source=SOURCE)
    first = endpoint_episode(env, task, chat, judge, **play)
    if first.correct and first.num_error_turns == 0:
        return first, "kept_first_try", [], 1
    hints = [observed_hint(env.history, task) or workflow_hint(env.history, task)]
    prefix = error_prefix(first)
    if prefix is not None and len(prefix) >= max_turns:
        prefix = None
    last, n = first, 1
    for _ in range(attempts):
        last, n = endpoint_episode(env, task, chat, judge, prefix=prefix, hint="\n".join(hints), **play), n + 1
        if last.correct:
            return last, "kept_after_hint", hints, n
        new = observed_hint(env.history, task, after=len(prefix or []))
        if new is not None and new not in hints:
            hints.append(new)
    if first.correct:
        return first, "kept_first_try_with_errors", hints, n
    return None, ("dropped_wrong" if last.answer is not None else "dropped_no_answer"), hints, n


def hint_class(hint: str) -> str:
    """The class a hint names (``"Hint (dependency): …"`` → ``"dependency"``)."""
    return hint.split("(", 1)[1].split(")", 1)[0] if hint.startswith("Hint (") else "other"


def build_teacher_loop(env: RSEnv, tasks: list[dict], chat: Chat, judge: Judge, *, attempts: int = 2,
                       phrasing: str = "IF", max_turns: int = 5,
                       stop_strings: tuple[str, ...] = (), on_task=None) -> tuple[list[SFTTrajectory], dict]:
    """The teacher loop over ``tasks`` (module doc).

    Args:
        attempts: hinted re-explorations per task at most (0: the first episodes only, kept when correct).
        on_task: called after each task as ``on_task(done, task, outcome, episodes)`` (progress of a long build).

    Returns:
        (kept trajectories, counts: ``tasks``, ``episodes``, ``kept``, each of :data:`OUTCOMES`, and ``hints``:
        the first hint's class per task that got one, ``{"constraint": n, "dependency": n, "error pattern": n}``).
    """
    if attempts < 0:
        raise ValueError(f"attempts={attempts}: give 0 or more hinted re-explorations per task")
    kept: list[SFTTrajectory] = []
    counts: dict = {"tasks": len(tasks), "episodes": 0, "kept": 0, **dict.fromkeys(OUTCOMES, 0), "hints": {}}
    for done, task in enumerate(tasks, 1):
        rec, outcome, hints, n = teacher_loop_task(env, task, chat, judge, attempts=attempts, phrasing=phrasing,
                                                   max_turns=max_turns, stop_strings=stop_strings)
        counts["episodes"] += n
        counts[outcome] += 1
        if hints:
            cls = hint_class(hints[0])
            counts["hints"][cls] = counts["hints"].get(cls, 0) + 1
        if rec is not None:
            kept.append(rec)
        if on_task is not None:
            on_task(done, task, outcome, n)
    counts["kept"] = len(kept)
    return kept, counts
