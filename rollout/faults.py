"""Faults of a training run: per-step counts, the consecutive-failure stop (the test kill points: :mod:`earthrl.envs.kill_points`).

A fault is anything that hits an episode without being the agent's doing (the kinds of
:data:`earthrl.rollout.trajectory.FAILURE_KINDS`); its trajectory is marked ``faulted`` and
excluded from the loss. The run counts them per step (``faults/…`` in metrics.jsonl, ``| faults N
(env 1, engine 1)`` in the step line) and stops with one line after
``trainer.max_consecutive_failures`` steps in a row in which every episode failed.
"""

from __future__ import annotations

from collections import Counter

from earthrl.envs.errors import ConfigError
from earthrl.rollout.trajectory import FAILURE_KINDS

# short names of the kinds in the step line
SHORT = {"env_failure": "env", "env_timeout": "timeout", "engine_failure": "engine", "internal_error": "internal"}


class RunStopped(ConfigError):
    """The run stopped because faults hit every episode of too many steps in a row."""


def fault_counts(trajs) -> dict[str, float]:
    """``faults/<kind>`` for every kind and ``faults/total`` over a step's trajectories."""
    counts = Counter(t.failure for t in trajs if t.faulted)
    out = {f"faults/{kind}": float(counts.get(kind, 0)) for kind in FAILURE_KINDS}
    out["faults/total"] = float(sum(1 for t in trajs if t.faulted))
    return out


def format_faults(m: dict) -> str:
    """`` | faults 2 (env 1, engine 1)`` from a step's metrics, or "" when none."""
    total = int(m.get("faults/total", 0))
    if total == 0:
        return ""
    parts = [f"{SHORT[k]} {int(m[f'faults/{k}'])}" for k in FAILURE_KINDS if m.get(f"faults/{k}", 0)]
    return f" | faults {total} ({', '.join(parts)})"


class FailureGuard:
    """Stops a run that only fails instead of letting it spin.

    Args:
        limit: consecutive steps in which every episode failed before the run stops
            (``trainer.max_consecutive_failures``); 0 never stops.

    Raises:
        ConfigError: a negative limit.
    """

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ConfigError(f"trainer.max_consecutive_failures={limit} must be 0 (never stop) or more")
        self.limit = limit
        self.streak = 0

    def check(self, step: int, trajs) -> None:
        """Record step ``step``'s trajectories.

        Raises:
            RunStopped: the limit was reached; the message names the fault kinds and the fix.
        """
        if trajs and all(t.faulted for t in trajs):
            self.streak += 1
        else:
            self.streak = 0
        if self.limit and self.streak >= self.limit:
            m = fault_counts(trajs)
            kinds = ", ".join(f"{k} {int(m[f'faults/{k}'])}" for k in FAILURE_KINDS if m[f"faults/{k}"])
            raise RunStopped(f"stopped at step {step}: every episode of the last {self.streak} steps failed outside the "
                             f"agent (last step: {kinds}); see internal_errors.jsonl and the log above, fix the cause and "
                             f"resume with trainer.resume=auto (or raise trainer.max_consecutive_failures)")
