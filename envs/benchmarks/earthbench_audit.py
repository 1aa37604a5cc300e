"""``earthrl audit earthbench --data DIR``: re-run Earth-Bench reference workflows with EarthRL's
tools on a folder of Earth-Bench's rasters (shared parts: :mod:`earthrl.envs.core.audit`).

A task runs when every reference call (``get_filelist`` aside) maps to an EarthRL tool
(:data:`~earthrl.envs.benchmarks.earthbench_map.EARTHBENCH_MAP`) with Earth-Bench's own argument
names and single files (:func:`~earthrl.envs.benchmarks.earthbench_map.follows_signature`), and
the files it reads are under ``DIR`` (``DIR/questionN/<file>`` or ``DIR/data/questionN/<file>``,
the names as Earth-Bench lists them). Otherwise the task is reported ``could_not_run`` with the
reason: the tools without a counterpart, the batched/renamed calls (quirks 3 and 4 of
:mod:`earthrl.envs.benchmarks.earthbench`) or the missing files. Counted on commit 5df54a934f3e:
4 of the 247 reference workflows are fully mapped (questions 2, 4, 182, 183); 182 and 183 end in
an NDTI raster with no value to compare (their averaging is in an unmapped tool).

Running: the data files are read (nodata → NaN, float32) and registered in the episode as raster
artifacts under their file stems (:func:`~earthrl.envs.benchmarks.earthbench_map.safe_path`),
units guessed from the name (``LST`` → K, an index name → index); each mapped call is one json
action in :class:`~earthrl.envs.core.env.RSEnv` (execute mode); its output artifact is also
registered under the stem of Earth-Bench's output path, so that later calls find it. The value is
the last call's number (:data:`VALUE_KEYS`), the answer given back is the option nearest to it.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from earthrl.envs.benchmarks.earthbench_map import follows_signature, map_call, output_names, safe_path
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

#: result field holding the value of a workflow's last call, by EarthRL tool.
VALUE_KEYS = {"share_above": "share_pct", "pixel_share": "share_pct", "mask_area": "area",
              "raster_stats": "mean", "percent_change": "percent_change"}
_INDEX = re.compile(r"(?i)(^|[_\-])(ndvi|evi|ndwi|mndwi|nbr|ndti|ndsi|savi|tvdi)([_\-.]|$)")


def data_file(path: str) -> str | None:
    """``questionN/<file>`` of an Earth-Bench input path (``benchmark/data/questionN/…``), or None
    for a path that is not an input (an output under ``benchmark/out``)."""
    m = re.search(r"(?:^|/)data/(question\d+/.+)$", str(path))
    return m.group(1) if m else None


def _strings(v) -> list[str]:
    return [s for x in (v if isinstance(v, list) else [v]) for s in ([x] if isinstance(x, str) else [])]


def plan(task: TaskSpec, data: Path) -> tuple[list[dict], list[Path], str | None]:
    """The mapped EarthRL calls of ``task``, the data files they read, and why the task cannot
    run (None when it can).

    Returns:
        ``(steps, files, reason)``: ``steps`` are ``{"eb", "call"}`` (the Earth-Bench call and
        its EarthRL call), in order.
    """
    calls = [c.model_dump() for c in task.reference if not c.name.endswith("get_filelist")]
    if not calls:
        return [], [], "the reference has no tool call besides get_filelist"
    unmapped = sorted({c["name"] for c in calls if map_call(c["name"], c["arguments"]) is None})
    if unmapped:
        return [], [], f"no EarthRL counterpart for {', '.join(unmapped)}"
    quirky = sorted({c["name"] for c in calls if not follows_signature(c["name"], c["arguments"])})
    if quirky:
        return [], [], (f"batched calls or argument names of another tool in {', '.join(quirky)} "
                        "(Earth-Bench quirks 3-4; EarthRL does not guess)")
    steps = [{"eb": c, "call": map_call(c["name"], c["arguments"])} for c in calls]
    rel = sorted({f for c in calls for v in c["arguments"].values() for s in _strings(v) if (f := data_file(s))})
    files, missing = [], []
    for r in rel:
        hit = next((p for p in (data / r, data / "data" / r) if p.is_file()), None)
        (files.append(hit) if hit else missing.append(r))
    if missing:
        more = f" (+{len(missing) - 3} more)" if len(missing) > 3 else ""
        return steps, files, f"data files missing under {data}: {', '.join(missing[:3])}{more}"
    return steps, files, None


def units_of(stem: str) -> str:
    """Units guessed from an Earth-Bench file name: ``K`` for LST, ``index`` for an index name,
    else ``""``."""
    if re.search(r"(?i)(^|[_\-])lst([_\-.]|$)", stem):
        return "K"
    return "index" if _INDEX.search(stem) else ""


def register_inputs(reg, files: list[Path]) -> None:
    """Register each file as a float32 raster artifact (nodata → NaN) named by its safe stem."""
    import rasterio  # lazy: rasterio at import; only the Earth-Bench audit reads raw files

    for f in files:
        with rasterio.open(f) as src:
            arr = src.read(1).astype(np.float32)
            if src.nodata is not None and not np.isnan(src.nodata):
                arr[arr == np.float32(src.nodata)] = np.nan
            crs = src.crs.to_string() if src.crs else None
            reg.write(Path(safe_path(f.name)).stem, arr, kind="raster", crs=crs, transform=src.transform,
                      units=units_of(f.stem), parents=[], call=None)


class EarthBenchAuditor(Auditor):
    """Replays mapped Earth-Bench workflows in one RSEnv (toolset ``all``).

    Args:
        data: the folder of Earth-Bench's rasters.
        data_root: EarthRL's data root (for the env; its scenes are not used).
        workspace: folder for the episodes' outputs; judge: the answer checker.
    """

    def __init__(self, data: Path, data_root: Path, workspace: Path, judge: Judge):
        self.data, self.judge = Path(data), judge
        self.env = RSEnv(data_root, Path(workspace) / "earthbench", toolset="all")

    def calls(self, task: TaskSpec) -> list[dict]:
        """The mapped EarthRL calls of ``task`` (empty when it cannot run)."""
        steps, _, reason = plan(task, self.data)
        return [] if reason else [s["call"] for s in steps]

    def __call__(self, task: TaskSpec, conv: Convention | None) -> Evaluation:
        """Run ``task``'s mapped workflow (with ``conv``'s overrides) and judge its value."""
        steps, files, reason = plan(task, self.data)
        if reason:
            return Evaluation(reason=reason)
        calls = with_overrides([s["call"] for s in steps], conv)
        env = self.env
        env.reset(task.model_copy(update={"data": [], "reference": []}), "IF")
        try:
            register_inputs(env.registry, files)
            results = []
            for k, (step, call) in enumerate(zip(steps, calls), 1):
                try:
                    (res,) = play(env, [call])
                except ReplayError as e:
                    raise ReplayError(k, call, e.message) from None
                results.append(res)
                made = res.get("artifact")
                for stem in output_names(step["eb"]["name"], step["eb"]["arguments"]) if made else []:
                    art = env.registry.artifacts[made]
                    env.registry.artifacts.setdefault(stem, replace(art, name=stem))
        except ReplayError as e:
            return Evaluation(reason=str(e))
        except Exception as e:  # an unreadable data file
            return Evaluation(reason=f"{type(e).__name__}: {e}")
        key = VALUE_KEYS.get(calls[-1]["name"])
        if key is None or key not in results[-1]:
            return Evaluation(reason=f"the workflow ends with {calls[-1]['name']}, which gives no single "
                                     "value to compare with the answer")
        computed = float(results[-1][key])
        nearest = nearest_choice(computed, task.answer.options)
        given = nearest if task.answer.kind == "choice" else computed
        return Evaluation(computed, nearest, judge_answer(env, given, task.answer.model_dump(), self.judge))

    def close(self) -> None:
        """Close the env (its workspace is removed)."""
        self.env.close()


def audit_earthbench(tasks: list[TaskSpec], data: Path, data_root: Path, judge: Judge,
                     conventions: tuple[Convention, ...] = CONVENTIONS) -> list[TaskAudit]:
    """Audit Earth-Bench ``tasks`` on the raster folder ``data``.

    Raises:
        FileNotFoundError: ``data`` is not a folder.
    """
    if not Path(data).is_dir():
        raise FileNotFoundError(f"--data {data}: not a folder; give the folder of Earth-Bench's rasters "
                                "(questionN/… or data/questionN/…)")
    with tempfile.TemporaryDirectory(prefix="earthrl-audit-eb-") as tmp:
        auditor = EarthBenchAuditor(data, data_root, Path(tmp), judge)
        try:
            return [audit_task(t, auditor, conventions) for t in tasks]
        finally:
            auditor.close()
