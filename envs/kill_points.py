"""Test hook of the kill-anywhere resume test: SIGKILL the process at a chosen point of a chosen step.

Lowest layer, because the points sit in the rollout runtime, the learner's update and the checkpoint
writer (:mod:`earthrl.models.checkpoint`) alike.
"""

from __future__ import annotations

import os
import signal
import sys

#: ``EARTHRL_TEST_KILL_AT=<point>:<step>`` SIGKILLs the process at that point of that (1-based) step.
KILL_ENV = "EARTHRL_TEST_KILL_AT"
KILL_POINTS = ("rollout", "update", "checkpoint")


def kill_point(point: str, step: int) -> None:
    """Test hook: SIGKILL this process when ``EARTHRL_TEST_KILL_AT`` is ``<point>:<step>``.

    Lets the kill-anywhere resume test stop a real run at a chosen point (``rollout``,
    ``update``, ``checkpoint``) of a chosen 1-based step; without the variable it does nothing.
    """
    if os.environ.get(KILL_ENV) == f"{point}:{step}":
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
