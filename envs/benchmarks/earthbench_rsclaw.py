"""RS-Claw-Evolution's Earth-Bench split as the suite ``earthbench-rsclaw``: 12 train and 176 test tasks.

RS-Claw-Evolution (seeds/001, §IV-A "Dataset and Evaluation Scope") selects "a subset of 188 tasks
from Earth-Bench that contain real tool execution workflows", trains on 12 of them and holds out
the other 176; the ids and the filtering criteria are in its supplementary Appendix A, which is not
public. EarthRL's choice, fixed and reproducible:

- **The 188 tasks**: questions 1–189 without question 43. Questions 190–248 (59 tasks, the RGB
  slice) answer from detection and classification models (``MSCN``, ``SM3Det``, ``InstructSAM``,
  ``ChangeOS`` …) rather than tools that compute on the rasters, and question 43 has no reference
  calls in ``extracted_tool_calls_GT.json``; what is left is exactly 188 tasks.
- **The 12 training tasks** (:data:`TRAIN_IDS`): the paper's training tasks span many tools (28);
  EarthRL picks, 12 times, the task whose reference adds the most tool names not yet covered, ties
  broken by the order of a shuffle with seed :data:`SEED` (:func:`choose_train_ids`). They cover 36
  tool names and five skills. :data:`TRAIN_IDS` is that result written down; the tests recompute it.

The tasks are Earth-Bench's (:func:`~earthrl.envs.benchmarks.earthbench.build_earthbench`, read from
``tasks.data`` or ``$EARTHRL_EARTHBENCH``), with ``split`` set to ``train`` or ``test``.
"""

from __future__ import annotations

import random
from pathlib import Path

from earthrl.envs.benchmarks.earthbench import ID_PREFIX, build_earthbench
from earthrl.envs.core.tasks import TaskSpec, register_suite

SEED = 0
N_TRAIN = 12
#: Questions 1-189 without 43 (module docstring).
POOL_IDS = tuple(f"{ID_PREFIX}{i}" for i in range(1, 190) if i != 43)
TRAIN_IDS = tuple(f"{ID_PREFIX}{i}" for i in (14, 30, 40, 70, 90, 119, 134, 148, 161, 167, 175, 181))


def choose_train_ids(tasks: list[TaskSpec], n: int = N_TRAIN, seed: int = SEED) -> list[str]:
    """The ``n`` training task ids chosen from ``tasks`` (the pool): greedily the task whose reference
    adds the most tool names not yet covered, ties broken by a ``random.Random(seed)`` shuffle of the
    pool's order. Returned in question order."""
    order = [t.id for t in tasks]
    random.Random(seed).shuffle(order)
    tools = {t.id: {c.name for c in t.reference} for t in tasks}
    chosen: list[str] = []
    covered: set[str] = set()
    for _ in range(min(n, len(order))):
        best = max((tid for tid in order if tid not in chosen), key=lambda tid: len(tools[tid] - covered))
        chosen.append(best)
        covered |= tools[best]
    return sorted(chosen, key=lambda tid: int(tid.removeprefix(ID_PREFIX)))


@register_suite("earthbench-rsclaw")
def build_earthbench_rsclaw(data_root: Path) -> list[TaskSpec]:
    """Suite builder: the 188 tasks of :data:`POOL_IDS`, the 12 of :data:`TRAIN_IDS` in split ``train``, the
    other 176 in ``test``.

    Raises:
        FileNotFoundError: no Earth-Bench folder (see :func:`~earthrl.envs.benchmarks.earthbench.build_earthbench`).
    """
    pool = set(POOL_IDS)
    return [t.model_copy(update={"split": "train" if t.id in TRAIN_IDS else "test"})
            for t in build_earthbench(data_root) if t.id in pool]
