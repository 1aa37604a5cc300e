"""Broadcast of trajectory (or turn) advantages onto the tokens that earn them."""

from __future__ import annotations

import torch


def broadcast_to_tokens(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Put each trajectory's scalar advantage on its model-generated tokens.

    Args:
        advantages: (B,) float, one advantage per trajectory.
        response_mask: (B, T) {0,1}, 1 on generated tokens.

    Returns:
        (B, T) float32: ``advantages[b]`` where ``response_mask[b, t] == 1``, else 0.

    Raises:
        ValueError: if B differs between the two.
    """
    if advantages.shape[0] != response_mask.shape[0]:
        raise ValueError(f"{advantages.shape[0]} advantages for {response_mask.shape[0]} sequences")
    return advantages.to(torch.float32)[:, None] * response_mask.to(torch.float32)
