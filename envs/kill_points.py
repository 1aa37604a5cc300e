"""Test hook of the kill-anywhere resume test: SIGKILL the process at a chosen point of a chosen step.

Lowest layer, because the points sit in the rollout runtime, the learner's update and the checkpoint
writer (:mod:`earthrl.models.checkpoint`) alike.
"""

from __future__ import annotations

import os
import signal
import sys
import time

#: ``EARTHRL_TEST_KILL_AT=<point>:<step>`` SIGKILLs the process at that point of that (1-based) step.
KILL_ENV = "EARTHRL_TEST_KILL_AT"
KILL_POINTS = ("rollout", "update", "checkpoint")  # and rollout/<prefix> (rollout/eval) for a rollout other than training's
#: ``EARTHRL_TEST_PAUSE_AT=<point>:<step>`` prints ``test pause at <point>:<step>`` and waits there (up to a
#: minute) for the signal a stop test sends.
PAUSE_ENV = "EARTHRL_TEST_PAUSE_AT"


def kill_point(point: str, step: int) -> None:
    """Test hook: SIGKILL this process when ``EARTHRL_TEST_KILL_AT`` is ``<point>:<step>``; wait there for a
    signal when ``EARTHRL_TEST_PAUSE_AT`` is.

    Lets the kill-anywhere resume test stop a real run at a chosen point (``rollout``,
    ``update``, ``checkpoint``) of a chosen 1-based step; without the variable it does nothing.
    """
    if os.environ.get(KILL_ENV) == f"{point}:{step}":
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(PAUSE_ENV) == f"{point}:{step}":
        print(f"test pause at {point}:{step}", flush=True)
        end = time.monotonic() + 60
        while time.monotonic() < end:  # the signal's handler raises here
            time.sleep(0.05)
