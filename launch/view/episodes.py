"""The episodes of a run or evaluation folder, as the viewer shows them (``earthrl view``).

A training run folder (``runs/<exp>``) holds ``rollouts.jsonl`` (:func:`earthrl.launch.step_batch.dump_rollouts`:
each step's episodes with their reward, correctness, per-turn rewards and advantages); an evaluation folder
(``runs/eval/<name>``) holds ``trajectories.jsonl`` (:class:`earthrl.launch.eval.EvalJob`: whole
:class:`~earthrl.rollout.trajectory.Trajectory` records, judged here with the outcome check,
:func:`earthrl.rewards.outcome.answer_correct`, against the tasks of the folder's ``config.yaml``). Both may hold
``metrics.jsonl`` (:class:`earthrl.rollout.run_logger.RunLogger`), the training curves.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from earthrl.envs.core.pool import episode_dirname
from earthrl.envs.core.tasks import load_suite
from earthrl.envs.errors import ConfigError
from earthrl.envs.paths import data_dir
from earthrl.launch.eval import read_trajectories
from earthrl.launch.step_batch import read_rollouts
from earthrl.rewards.outcome import answer_correct
from earthrl.rollout.run_logger import read_step_log
from earthrl.rollout.trajectory import Trajectory

EPISODE_FILES = ("rollouts.jsonl", "trajectories.jsonl")
"""The files a folder's episodes are read from: a training run's, then an evaluation's."""


def outcome(correct: bool | None, faulted: bool, answer) -> str:
    """The outcome class a list filters on: ``"faulted"`` (a fault outside the agent ended it), ``"correct"``,
    ``"wrong"`` (answered, judged wrong), ``"no answer"``, or ``"not judged"`` (no task reference at hand)."""
    if faulted:
        return "faulted"
    if correct is None:
        return "not judged"
    if correct:
        return "correct"
    return "wrong" if answer is not None else "no answer"


def _tasks(folder: Path) -> tuple[dict[str, dict], str]:
    """The tasks of the folder's ``config.yaml`` (``tasks.name`` over every split, scenes of ``tasks.data``) by id —
    for a run's held-out folder ``<run>/heldout/step_N``, the run's —
    and "" — or {} and why they could not be read (then skills and correctness stay unknown)."""
    from omegaconf import OmegaConf  # lazy: the CLI starts fast

    # an evaluation folder holds its own; a run's held-out reports (<run>/heldout/step_N) use the run's
    config = next((f / "config.yaml" for f in (folder, folder.parent, folder.parent.parent)
                   if (f / "config.yaml").is_file()), folder / "config.yaml")
    if not config.is_file():
        return {}, f"no config.yaml in {folder}: skills and correctness of evaluation episodes are unknown"
    try:
        cfg = OmegaConf.load(config)
        tasks = load_suite(str(cfg.tasks.name), split=None, data_root=data_dir(str(cfg.tasks.data)))
    except Exception as exc:  # any unreadable suite: the episodes still show, unjudged
        return {}, f"the tasks of {config} could not be read ({type(exc).__name__}: {exc}): skills and correctness unknown"
    return {t.id: t.model_dump() for t in tasks}, ""


def _verdicts(turns: list[dict]) -> dict[str, int]:
    return dict(Counter(t["verdict"] for t in turns if t.get("verdict")))


@dataclass
class Folder:
    """The episodes of one run or evaluation folder.

    Attributes:
        path: the folder. kind: ``"run"`` (rollouts.jsonl) or ``"eval"`` (trajectories.jsonl).
        episodes: one dict per episode in file order (:meth:`summary` + ``turns``, :meth:`episode`).
        note: why skills or correctness are unknown, else "".
    """

    path: Path
    kind: str
    episodes: list[dict] = field(default_factory=list)
    note: str = ""

    @classmethod
    def load(cls, path: Path) -> Folder:
        """Read ``path``.

        Raises:
            ConfigError: no such folder, or none of :data:`EPISODE_FILES` with an episode there (names the folder
                and what to give instead); a line of those files that is not JSON.
        """
        path = Path(path)
        if not path.is_dir():
            raise ConfigError(f"RUN_OR_EVAL_FOLDER {path}: no such folder; give a training run folder (runs/<exp>) "
                              "or an evaluation folder (runs/eval/<name>)")
        for name in EPISODE_FILES:
            if (path / name).is_file():
                try:
                    folder = cls._read_run(path) if name == "rollouts.jsonl" else cls._read_eval(path)
                except ValueError as exc:
                    raise ConfigError(str(exc)) from None
                if folder.episodes:
                    return folder
        raise ConfigError(f"RUN_OR_EVAL_FOLDER {path}: no episodes there (neither rollouts.jsonl nor "
                          "trajectories.jsonl with a line); give the folder `earthrl train` or `earthrl eval` wrote")

    @classmethod
    def _read_run(cls, path: Path) -> Folder:
        tasks, note = _tasks(path)
        episodes = []
        for i, r in enumerate(read_rollouts(path / "rollouts.jsonl")):
            turn_rewards = r.get("turn_rewards") or []
            turns = [{"role": u.get("role", "agent"), "adapter": u.get("adapter", ""), "node": u.get("node", ""),
                      "candidate": u.get("candidate", 0), "node_state": u.get("node_state", ""),
                      "subgoal": u.get("subgoal"), "action": u.get("response", ""), "observation": u.get("observation", ""),
                      "tool_call": u.get("tool_call"), "tool_calls": u.get("tool_calls", []), "error": bool(u.get("error")),
                      "error_kind": u.get("error_kind"), "verdict": u.get("verdict"),
                      "verdict_reasons": u.get("verdict_reasons", []),
                      "reward": turn_rewards[k] if k < len(turn_rewards) else None, "advantage": u.get("advantage")}
                     for k, u in enumerate(r.get("turns", []))]
            task = tasks.get(r["task_id"], {})
            episodes.append(_episode(i, r["task_id"], task, r.get("step"), None, None, r.get("reward"), r.get("correct"),
                                     r.get("answer"), bool(r.get("faulted")), r.get("failure"), None, turns,
                                     r.get("record") or {}, r.get("agent_stats") or {}, r.get("episode_id", "")))
        return cls(path, "run", episodes, note)

    @classmethod
    def _read_eval(cls, path: Path) -> Folder:
        tasks, note = _tasks(path)
        episodes = []
        for i, e in enumerate(read_trajectories(path / "trajectories.jsonl")):
            traj = Trajectory.from_dict(e["trajectory"])
            task = tasks.get(e["task_id"], {})
            correct = None if not task else (False if traj.faulted else answer_correct(traj.answer, task["answer"]))
            turns = [{"role": u.role, "adapter": u.adapter, "node": u.node, "candidate": u.candidate,
                      "node_state": u.node_state, "subgoal": u.subgoal, "action": u.response_text,
                      "observation": u.observation, "tool_call": u.tool_call, "tool_calls": u.tool_calls,
                      "error": u.error, "error_kind": u.error_kind, "verdict": u.verdict,
                      "verdict_reasons": u.verdict_reasons, "reward": None, "advantage": None} for u in traj.turns]
            episodes.append(_episode(i, e["task_id"], task, None, e.get("mode"), e.get("sample"), None, correct,
                                     traj.answer, traj.faulted, traj.failure, traj.failure_detail, turns, traj.record,
                                     traj.agent_stats, traj.episode_id))
        return cls(path, "eval", episodes, note)

    def summary(self, i: int) -> dict:
        """The list row of episode ``i``: every field but its turns."""
        return {k: v for k, v in self.episodes[i].items() if k != "turns"}

    def metrics(self) -> list[dict]:
        """The lines of the folder's ``metrics.jsonl`` (each ``{"step", <name>: value, …}``); [] without one. A
        line that is not JSON (a torn write) is left out."""
        return read_step_log(self.path / "metrics.jsonl")

    def workspace(self, i: int) -> str | None:
        """The name of episode ``i``'s workspace folder under ``<folder>/workspaces`` when the run kept it
        (``env.keep_workspaces=true``), else None (episodes of a pool remove theirs when they close)."""
        eid = self.episodes[i]["episode_id"]
        if not eid:
            return None
        name = episode_dirname(eid)
        ws = self.path / "workspaces" / name
        return name if ws.is_dir() and not ws.is_symlink() and not (self.path / "workspaces").is_symlink() else None


def _episode(i, task_id, task, step, mode, sample, reward, correct, answer, faulted, failure, failure_detail, turns,
             record, agent_stats, episode_id) -> dict:
    played = [t for t in turns if not t["candidate"]]
    return {"id": i, "task_id": task_id, "skill": task.get("skill", ""), "question": task.get("question", {}).get(mode or "IF", ""),
            "reference_answer": task.get("answer"), "step": step, "mode": mode, "sample": sample, "reward": reward,
            "correct": correct, "outcome": outcome(correct, faulted, answer), "answer": answer, "faulted": faulted,
            "failure": failure, "failure_detail": failure_detail, "num_turns": len(played),
            "error_turns": sum(t["error"] for t in played), "verdicts": _verdicts(played),
            "roles": sorted({t["role"] for t in turns}), "artifacts": record.get("artifacts", []),
            "agent_stats": agent_stats, "episode_id": episode_id, "turns": turns}
