"""init_local_ray: the benchmarks' Ray workers run at the driver's niceness (Ray's default is 15)."""

import os
import subprocess
import sys

import pytest

PROBE = """
import os, ray
from earthrl.bench.local_ray import init_local_ray
started = init_local_ray(1)
again = init_local_ray(1)
@ray.remote
def niceness():
    return os.nice(0)
print(started, again, os.nice(0), ray.get(niceness.remote()))
ray.shutdown()
"""


def _probe(extra_nice: int, env: dict) -> list[str]:
    out = subprocess.run(["nice", "-n", str(extra_nice), sys.executable, "-c", PROBE], capture_output=True,
                         text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()[-4:]


MAX_NICE = 19  # niceness stops there: a driver at 19 cannot tell its workers' increments apart


def _need_room(driver_nice: int) -> None:
    if driver_nice >= MAX_NICE:
        pytest.skip(reason=f"needs the Ray driver below nice {MAX_NICE} (here it would run at "
                           f"{min(driver_nice, MAX_NICE)}, where the workers' niceness cannot be told apart): run "
                           "pytest at a lower niceness (not under `nice -n 15` or more)")


@pytest.mark.parametrize("extra_nice", [0, 4])
def test_workers_run_at_the_driver_niceness(extra_nice):
    _need_room(os.nice(0) + extra_nice)
    env = {k: v for k, v in os.environ.items() if k != "RAY_worker_niceness"}
    started, again, driver, worker = _probe(extra_nice, env)
    assert (started, again) == ("True", "False")  # the second call finds Ray running
    assert int(driver) == os.nice(0) + extra_nice
    assert int(worker) == int(driver)  # not Ray's default 15


def test_a_user_set_niceness_wins():
    _need_room(os.nice(0))
    _, _, driver, worker = _probe(0, {**os.environ, "RAY_worker_niceness": "7"})
    # Ray adds the user's increment to the niceness inherited from the driver (7 under a driver at 0)
    assert int(driver) == os.nice(0) and int(worker) == min(int(driver) + 7, MAX_NICE)
