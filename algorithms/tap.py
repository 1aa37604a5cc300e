"""TAP: RS-Claw-Evolution's turn-level advantage protection (§IV-C).

Standard GRPO broadcasts the trajectory advantage Â_i to every turn. TAP keeps Â_{i,t} = Â_i
except that a turn with E(a_t, o_t) = 1 never receives a positive advantage:

    Â_{i,t} = min(Â_i, 0)   if E_t = 1

so an error turn inside a successful trajectory is not reinforced, while an error turn inside a
failed trajectory is still penalised. The paper also says valid recovery actions should not be
"penalised by errors"; its exact rule is in an unpublished appendix. EarthRL's interpretation,
off by default (``protect_recovery``): a *recovery turn* is a turn with E = 0 right after a turn
with E = 1, and it never receives a negative advantage, Â_{i,t} = max(Â_i, 0).
"""

from __future__ import annotations

import torch


def tap_advantages(turn_advantages: torch.Tensor, error: torch.Tensor, prev_error: torch.Tensor, *,
                   protect_recovery: bool = False) -> torch.Tensor:
    """Apply TAP to per-turn advantages.

    Args:
        turn_advantages: (M,) float, the trajectory advantage broadcast to each turn.
        error: (M,) bool, E = 1 on the turn.
        prev_error: (M,) bool, E = 1 on the previous turn of the same trajectory (False on first turns).
        protect_recovery: also clamp recovery turns (E = 0 after E = 1) to ≥ 0.

    Returns:
        (M,) float32 turn advantages.
    """
    adv = torch.where(error, turn_advantages.clamp(max=0.0), turn_advantages)
    if protect_recovery:
        adv = torch.where(~error & prev_error, adv.clamp(min=0.0), adv)
    return adv.to(torch.float32)
