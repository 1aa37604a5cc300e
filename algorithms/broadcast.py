"""Broadcast of turn values (advantages, role flags) onto the tokens that earn them."""

from __future__ import annotations

import torch


def turn_values_to_tokens(trajs, turn_values: torch.Tensor) -> list[torch.Tensor]:
    """Put per-turn values onto each turn's response tokens (``Trajectory.turn_spans()``).

    One ``repeat_interleave`` over the whole batch (no Python loop over tokens).

    Args:
        trajs: N :class:`~earthrl.rollout.trajectory.Trajectory`.
        turn_values: (M,) float, the turns of all trajectories concatenated in order
            (M = Σ num_turns).

    Returns:
        N float32 tensors, the i-th of shape (len(trajs[i].token_ids()),): the turn's value on its
        response tokens, 0 on prompt, context and observation tokens.

    Raises:
        ValueError: if M differs from the number of turns.
    """
    n_turns = sum(len(t.turns) for t in trajs)
    if turn_values.numel() != n_turns:
        raise ValueError(f"{turn_values.numel()} turn values for {n_turns} turns")
    seg_len: list[int] = []
    seg_turn: list[int] = []  # index into [0, *turn_values]: 0 = the zero segment
    totals: list[int] = []
    k = 0
    for t in trajs:
        seg_len.append(len(t.prompt_ids))
        seg_turn.append(0)
        total = len(t.prompt_ids)
        for turn in t.turns:
            k += 1
            c, r, o = len(turn.context_ids), len(turn.response_ids), len(turn.observation_ids)
            seg_len += [c, r, o]
            seg_turn += [0, k, 0]
            total += c + r + o
        totals.append(total)
    table = torch.cat([torch.zeros(1, dtype=torch.float32), turn_values.to(torch.float32)])
    flat = torch.repeat_interleave(table[torch.tensor(seg_turn, dtype=torch.long)],
                                   torch.tensor(seg_len, dtype=torch.long))
    return list(torch.split(flat, totals))


def turn_runs(response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Turns of padded sequences as maximal runs of 1 in ``response_mask`` (verl's multi-turn layout:
    1 on generated tokens, 0 on tool observations and padding).

    Args:
        response_mask: (B, T) {0,1}.

    Returns:
        ``(token_turn, starts)``: (B, T) int64 global turn id of each token (−1 where the mask is 0),
        and (M, 2) int64 ``[row, column]`` of each turn's first token, turns in row-major order.
    """
    mask = response_mask.bool()
    prev = torch.zeros_like(mask)
    prev[:, 1:] = mask[:, :-1]
    start = mask & ~prev
    token_turn = torch.cumsum(start.flatten().long(), 0).view_as(mask) - 1
    return torch.where(mask, token_turn, torch.full_like(token_turn, -1)), start.nonzero()
