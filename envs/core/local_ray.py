"""A local Ray instance for the benchmarks, its workers at the driver's CPU priority.

Ray starts its worker processes at nice 15 by default (``RAY_worker_niceness``). A benchmark that
compares a Ray-hosted runner (the EarthRL engines, EnvPool actors) with one in the driver's own
process tree (bare transformers, standalone vLLM) is then fair only on an idle machine: any other
load takes CPU from the Ray side alone (measured: EarthRL's vLLM engine at 0.40× standalone
vLLM under a background job, 1.01× on the idle machine). :func:`init_local_ray` starts Ray with
the workers at the driver's own niceness unless the user set ``RAY_worker_niceness`` (an increment
Ray adds to the niceness its processes inherit from the driver; 0 keeps the driver's).
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager


@contextmanager
def keep_stop_handlers():
    """Keep this process's SIGINT/SIGTERM handlers across the block: ``ray.init`` installs its own SIGTERM
    handler (exit at once), which would bypass the run's clean stop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            if handler is not None:
                signal.signal(s, handler)


def init_local_ray(num_cpus: int, **kwargs) -> bool:
    """Start a local Ray instance unless one is running, its workers at this process's niceness.

    Args:
        num_cpus: logical CPUs of the instance.
        **kwargs: more ``ray.init`` keywords (defaults: no dashboard, no driver logs).

    Returns:
        True when this call started Ray (the caller shuts it down), False when Ray was running.
    """
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_worker_niceness", "0")
    with keep_stop_handlers():
        ray.init(num_cpus=num_cpus, **{"include_dashboard": False, "log_to_driver": False, **kwargs})
    return True
