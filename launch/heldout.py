"""The held-out stage of ``earthrl train``'s step loop (``trainer.heldout``): the current weights on the
held-out tasks, their evaluation report (:mod:`earthrl.rewards.metrics.report`) and one console line."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from earthrl.launch.config_schema import to_settings
from earthrl.models.checkpoint import rng_state, set_rng_state
from earthrl.rewards.metrics.report import build_report, write_report
from earthrl.rollout.run_logger import flat_metrics
from earthrl.rollout.runtime import RolloutRuntime


@dataclass(frozen=True)
class HeldoutEval:
    """The held-out stage of the step loop (``trainer.heldout``): after every ``every``-th step and the last
    one, the held-out tasks rolled out with the current weights, their report written to
    ``<output_dir>/heldout/step_NNNNNN/`` and one console line."""

    cfg: DictConfig  # trainer.heldout, trainer.steps, seed, env.action_format
    tasks: list[dict]  # TrainInputs.heldout_tasks
    output_dir: Path  # the run folder
    runtime: RolloutRuntime  # holds the policy's current weights

    def due(self, step: int) -> bool:
        """Whether the held-out tasks run after step ``step`` (1-based)."""
        every = int(self.cfg.trainer.heldout.every)
        return every > 0 and (step % every == 0 or step == int(self.cfg.trainer.steps))

    def after_step(self, bar, step: int) -> dict[str, float]:
        """Evaluate when :meth:`due`, with one line on ``bar``; returns the ``heldout/…`` metrics ({} when not due)."""
        if not self.due(step):
            return {}
        m = self.evaluate(step)
        bar.write(f"held-out ({len(self.tasks)} {self.cfg.trainer.heldout.split} tasks): "
                  f"accuracy {m.get('heldout/accuracy', 0.0):.1%}, EIR {m.get('heldout/eir', 0.0):.3f}, "
                  f"turns {m.get('heldout/avg_turns', 0.0):.2f}")
        return m

    def evaluate(self, step: int) -> dict[str, float]:
        """Roll out the held-out tasks with the current weights and write their report to
        ``<output_dir>/heldout/step_NNNNNN/``; returns its metrics as ``heldout/…``. The RNG state is
        restored afterwards: evaluating must not change what training does next (exact resume)."""
        saved = rng_state()
        try:
            ho = self.cfg.trainer.heldout
            trajs, _ = self.runtime.rollout(self.tasks, int(ho.samples), step, to_settings(ho.sampling), ho.phrasing,
                                            int(self.cfg.seed), group_prefix="heldout/")
            entries = [{"task_id": t.task_id, "mode": ho.phrasing, "action_format": self.cfg.env.action_format,
                        "trajectory": t.to_dict()} for t in trajs]
            report = build_report(entries, {t["id"]: t for t in self.tasks}, n_resamples=int(ho.bootstrap),
                                  seed=int(self.cfg.seed))
            folder = self.output_dir / "heldout" / f"step_{step:06d}"
            folder.mkdir(parents=True, exist_ok=True)
            with (folder / "trajectories.jsonl").open("w") as f:
                f.writelines(json.dumps(e) + "\n" for e in entries)
            write_report(report, folder, plots=False)
            return flat_metrics(report, "heldout")
        finally:
            set_rng_state(saved)
