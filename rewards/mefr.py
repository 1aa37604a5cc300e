"""MEFR: RS-Claw-Evolution's multi-dimensional environment-feedback reward (§IV-B).

    R(τ) = α_success·1[correct] + α_fail·1[incorrect] − λ·T − μ·N_err
           + ω_data·P_data + ω_doc·P_doc + ω_skill·P_skill

with the paper's numbers α_success = 10, α_fail = −1, λ = 0.1 per turn, μ = 0.25 per error
turn, ω_data = 1.0, ω_doc = 0.25, ω_skill = 0.2 (§V-A "RL phase"). The paper defers the exact
progress definitions to an unpublished appendix; EarthRL computes them from the environment's
episode record (``trajectory.record``) and the task's reference workflow as follows:

- **P_data** (data-flow progress): the reference data-flow steps are the reference tool calls
  (the final ``answer`` call excluded) whose tool writes a data artifact — EarthRL tools with
  ``output_kind`` in ``data_output_kinds`` (raster, mask, classes, segments, vector, series, table;
  not numbers, metadata or quick-look images), plus tools EarthRL does not know
  (Earth-Bench tools, assumed to write files). A step is *produced* when the episode registered an
  artifact made by the same tool; artifacts are matched to steps one-to-one per tool (two
  reference ``spectral_index`` steps need two ``spectral_index`` artifacts). P_data = produced /
  data-flow steps (0 when the reference has none). ``data_output_kinds=None`` counts every
  reference step.
- **P_doc** (document reading progress): share of the distinct reference tools whose full docs
  the agent opened (``record["docs_opened"]``).
- **P_skill** (skill-tree progress): share of the needed skill-tree nodes opened
  (``record["skills_opened"]``); needed = ``{task["skill"]}`` unless ``needed_skills`` is given.
- T = assistant turns, N_err = turns with E = 1; "incorrect" includes "never answered".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from earthrl.envs.tools.registry import TOOLS
from earthrl.rewards.outcome import answer_correct, reference_steps
from earthrl.rewards.registry import REWARDS

DATA_OUTPUT_KINDS = ("raster", "mask", "classes", "segments", "vector", "series", "table")


def _share(needed: set, got: set) -> float:
    return len(needed & got) / len(needed) if needed else 0.0


def data_progress(record: dict, task: dict, *, data_output_kinds: Sequence[str] | None = DATA_OUTPUT_KINDS) -> float:
    """P_data ∈ [0, 1]: share of the reference data-flow steps whose tool produced an artifact (see module doc)."""
    def is_data_step(name: str) -> bool:
        tool = TOOLS.get(name)
        return data_output_kinds is None or tool is None or tool.output_kind in data_output_kinds

    needed = Counter(s["name"] for s in reference_steps(task) if is_data_step(s["name"]))
    made = Counter(a.get("tool") for a in record.get("artifacts", []))
    total = sum(needed.values())
    return sum(min(n, made[name]) for name, n in needed.items()) / total if total else 0.0


def doc_progress(record: dict, task: dict) -> float:
    """P_doc ∈ [0, 1]: share of the distinct reference tools whose docs were opened."""
    return _share({s["name"] for s in reference_steps(task)}, set(record.get("docs_opened", [])))


def skill_progress(record: dict, task: dict, *, needed_skills: Sequence[str] | None = None) -> float:
    """P_skill ∈ [0, 1]: share of the needed skill-tree nodes opened (needed = ``{task["skill"]}`` by default)."""
    needed = set(needed_skills) if needed_skills is not None else {task["skill"]}
    return _share(needed, set(record.get("skills_opened", [])))


@REWARDS.register("mefr")
def mefr_reward(trajectory, task: dict, *, alpha_success: float = 10.0, alpha_fail: float = -1.0,
                turn_penalty: float = 0.1, error_penalty: float = 0.25, w_data: float = 1.0,
                w_doc: float = 0.25, w_skill: float = 0.2,
                data_output_kinds: Sequence[str] | None = DATA_OUTPUT_KINDS,
                needed_skills: Sequence[str] | None = None) -> float:
    """MEFR trajectory reward (RS-Claw-Evolution §IV-B, numbers of §V-A); pure (sets nothing).

    Args:
        trajectory: :class:`earthrl.rollout.trajectory.Trajectory` with ``record`` filled by the env.
        task: the TaskSpec as a dict (``answer``, ``reference``, ``skill``).
        alpha_success, alpha_fail: α_success, α_fail.
        turn_penalty: λ per assistant turn; error_penalty: μ per turn with E = 1.
        w_data, w_doc, w_skill: ω_data, ω_doc, ω_skill.
        data_output_kinds, needed_skills: progress definitions, see the module docstring.

    Returns:
        R(τ) as a float (e.g. a correct 3-turn episode with all progress: 10 − 0.3 + 1.45 = 11.15).
    """
    correct = answer_correct(trajectory.answer, task["answer"])
    record = trajectory.record or {}
    return ((alpha_success if correct else alpha_fail)
            - turn_penalty * trajectory.num_turns - error_penalty * trajectory.num_error_turns
            + w_data * data_progress(record, task, data_output_kinds=data_output_kinds)
            + w_doc * doc_progress(record, task)
            + w_skill * skill_progress(record, task, needed_skills=needed_skills))
