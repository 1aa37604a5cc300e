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

from earthrl.rollout.ray_signals import keep_stop_handlers


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
