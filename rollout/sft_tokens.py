"""Token ids and per-turn label masks of SFT trajectories (RS-Claw-Evolution error-turn masking).

A text record (:class:`~earthrl.rollout.sft_data.SFTTrajectory`) becomes the token layout the agent
loop (:func:`earthrl.rollout.agent_loop.run_episode`) produces for the same episode, built from the
same :class:`~earthrl.rollout.chat.ChatCodec` deltas: ``prompt_ids(system, user)``, then per turn the
action's ids (followed by the end-of-turn id unless the action ends in one of the format's stop
strings, where the engine stops without it) and, except after the last turn, the template delta of the
observation (``observation_ids``; a user message after a clarification turn, which supplies the end-of-turn token on the observation side when
the response lacks it). The result is a :class:`~earthrl.rollout.trajectory.Trajectory`, so its
``token_ids()`` and ``response_mask()`` are the learner's.

Labels (:func:`label_mask`): 1 on the assistant tokens that are supervised, 0 on system, user and
observation tokens. Modes (:data:`MASK_MODES`): ``oracle`` and ``unmasked`` supervise every assistant
turn; ``masked`` leaves out the turns with E = 1 (their tokens and observations stay in the context,
the recovery turns after them are supervised). The -100 ids of Hugging Face labels are
:func:`hf_labels`.
"""

from __future__ import annotations

from dataclasses import dataclass

from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.sft_data import CLARIFY_ROLE, SFTTrajectory
from earthrl.rollout.trajectory import Trajectory, Turn

MASK_MODES = ("oracle", "unmasked", "masked")
IGNORE_INDEX = -100


def check_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`MASK_MODES`.

    Raises:
        ValueError: another value (names the modes).
    """
    if mode not in MASK_MODES:
        raise ValueError(f"sft.mode={mode!r}: use one of {', '.join(MASK_MODES)}")
    return mode


def response_ids(codec: ChatCodec, action: str, stop_strings: tuple[str, ...] = ()) -> list[int]:
    """Ids of one assistant action as the engine returns them: the text's ids, then the end-of-turn
    id unless the text ends in a stop string (the engine stops on the token that completes it)."""
    ids = list(codec.tokenizer(action, add_special_tokens=False)["input_ids"])
    return ids if any(action.endswith(s) for s in stop_strings if s) else ids + [codec.eos_id]


def to_trajectory(record: SFTTrajectory, codec: ChatCodec, stop_strings: tuple[str, ...] = ()) -> Trajectory:
    """The agent loop's token layout of ``record`` (module doc); ``turn.error`` is the record's E."""
    traj = Trajectory(task_id=record.task_id, group=f"sft/{record.task_id}",
                      prompt_ids=codec.prompt_ids(record.system, record.user), answer=record.answer)
    for i, t in enumerate(record.turns):
        ids = response_ids(codec, t.action, stop_strings)
        turn = Turn(response_ids=ids, response_logprobs=[0.0] * len(ids), response_text=t.action,
                    observation=t.observation, error=t.error, error_kind=t.error_kind, role=t.role)
        if i + 1 < len(record.turns):
            role = "user" if t.role == CLARIFY_ROLE else None  # the user's reply to a clarification question
            turn.observation_ids = codec.observation_ids(t.observation, ids, role=role)
        traj.turns.append(turn)
    return traj


def label_mask(traj: Trajectory, mode: str) -> list[int]:
    """1 on supervised assistant tokens, 0 elsewhere; aligned with ``traj.token_ids()`` (module doc).

    Raises:
        ValueError: an unknown mode.
    """
    masked = check_mode(mode) == "masked"
    mask = [0] * len(traj.prompt_ids)
    for t in traj.turns:
        mask += ([0] * len(t.context_ids) + [0 if (masked and t.error) else 1] * len(t.response_ids)
                 + [0] * len(t.observation_ids))
    return mask


def hf_labels(ids: list[int], mask: list[int]) -> list[int]:
    """Hugging Face style labels: the id where ``mask`` is 1, :data:`IGNORE_INDEX` (-100) elsewhere."""
    return [i if m else IGNORE_INDEX for i, m in zip(ids, mask)]


@dataclass
class SFTExample:
    """One tokenised trajectory: ``input_ids``, ``label_mask`` (same length), its task and E count."""

    task_id: str
    input_ids: list[int]
    label_mask: list[int]
    error_turns: int

    @property
    def supervised_tokens(self) -> int:
        """Tokens with label 1."""
        return sum(self.label_mask)


def encode(records: list[SFTTrajectory], codec: ChatCodec, mode: str, stop_strings: tuple[str, ...] = (),
           max_tokens: int | None = None) -> tuple[list[SFTExample], dict]:
    """Tokenise ``records`` for ``mode``; records longer than ``max_tokens`` or with no supervised
    token are left out (counted).

    Returns:
        (examples, counts ``{"records", "kept", "too_long", "no_labels", "tokens", "supervised_tokens",
        "masked_error_turns"}``).
    """
    check_mode(mode)
    out = []
    counts = dict.fromkeys(("too_long", "no_labels", "tokens", "supervised_tokens", "masked_error_turns"), 0)
    for rec in records:
        traj = to_trajectory(rec, codec, stop_strings)
        ids, mask = traj.token_ids(), label_mask(traj, mode)
        if max_tokens is not None and len(ids) > max_tokens:
            counts["too_long"] += 1
            continue
        if not any(mask):
            counts["no_labels"] += 1
            continue
        out.append(SFTExample(rec.task_id, ids, mask, traj.num_error_turns))
        counts["tokens"] += len(ids)
        counts["supervised_tokens"] += sum(mask)
        counts["masked_error_turns"] += traj.num_error_turns if mode == "masked" else 0
    return out, {"records": len(records), "kept": len(out), **counts}
