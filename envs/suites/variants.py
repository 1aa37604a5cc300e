"""Train/test splits and multiple-choice variants of built suite tasks.

Split (no instance in both): a template working on Landsat 5/7 scenes draws each task's scenes
from one split of a scene-level split (a quarter of the scenes, ranked by sha256 of the id, are
test scenes; :class:`~earthrl.envs.suites.templates.SuiteData`), so no Landsat scene is in both
splits. Other instances (the single Sentinel-2 or Landsat 8 scene with an index/threshold/band,
or a time series) are grouped by instance key; per skill a quarter of the keys (at least one)
ranked by sha256 go to test. Tasks sharing an instance key (the water share and water area of
``NDWI > 0``) share the split.

Multiple-choice variants (Earth-Bench style): a numeric task of an ``mc_group`` gets a choice
twin whose distractors are the answers of the nearest other tasks of the same group and split
(values from nearby thresholds, other indices or other scenes), each at least 2 tolerances
away from the right value, so exactly one option is right.
"""

from __future__ import annotations

from dataclasses import replace

from earthrl.envs.suites.templates import TEST_SHARE, Skeleton, options_line, rank

MC_SHARE = 3  # one task in MC_SHARE of an mc_group gets a choice twin
N_DISTRACTORS = 3


def assign_splits(skels: list[Skeleton]) -> dict[str, str]:
    """Skeleton id -> ``"train"``/``"test"`` (template-fixed split, else hash split of the
    instance keys per skill)."""
    by_skill: dict[str, list[str]] = {}
    for s in skels:
        if s.split is None:
            keys = by_skill.setdefault(s.skill, [])
            if s.instance not in keys:
                keys.append(s.instance)
    split = {}
    for keys in by_skill.values():
        ranked = sorted(keys, key=rank)
        n_test = max(1, round(len(keys) * TEST_SHARE)) if len(keys) > 1 else 0
        split.update({k: ("test" if i < n_test else "train") for i, k in enumerate(ranked)})
    return {s.id: s.split or split[s.instance] for s in skels}


def _fmt(v: float, decimals: int) -> str:
    return f"{v:.{decimals}f}"


def choice_variants(built: list[tuple[Skeleton, str, float, float]]) -> list[tuple[Skeleton, str]]:
    """Choice twins (id ``<id>/mc``) of a third of the numeric tasks of each ``mc_group``.

    Args:
        built: ``(skeleton, split, value, tolerance)`` of the numeric tasks built so far.

    Returns:
        ``(choice skeleton, split)`` pairs. The options are the right value and the
        :data:`N_DISTRACTORS` nearest values of other tasks of the group and split that lie
        more than 2 tolerances from it (and more than 1 tolerance from each other); the letter
        of the right value is placed by sha256 of the id. A task without enough such values
        gets no twin.
    """
    groups: dict[tuple[str, str], list[tuple[Skeleton, float, float]]] = {}
    for sk, split, v, tol in built:
        if sk.mc_group and sk.kind == "numeric":
            groups.setdefault((sk.mc_group, split), []).append((sk, v, tol))
    out = []
    for (_, split), members in groups.items():
        for sk, v, tol in members:
            if int(rank(sk.id + "/mc")[:4], 16) % MC_SHARE:
                continue
            picked: list[float] = []
            for o in sorted((o for m, o, _ in members if m.id != sk.id), key=lambda x: abs(x - v)):
                if abs(o - v) > 2 * tol and all(abs(o - p) > tol for p in picked):
                    picked.append(o)
                if len(picked) == N_DISTRACTORS:
                    break
            if len(picked) < N_DISTRACTORS:
                continue
            pos = int(rank(sk.id)[:4], 16) % (N_DISTRACTORS + 1)
            vals = picked[:pos] + [v] + picked[pos:]
            unit = f" {sk.unit}" if sk.unit else ""
            opts = {"ABCD"[i]: _fmt(x, sk.decimals) + unit for i, x in enumerate(vals)}
            ol = options_line(opts)
            q = {k: f"{text.rsplit(' Round to', 1)[0]} {ol} Answer with the letter."
                 for k, text in sk.question.items() if k in ("IF", "AP")}
            letter = "ABCD"[pos]
            out.append((replace(
                sk, id=sk.id + "/mc", template=sk.template + "_mc", question=q, kind="choice",
                options=opts, value=lambda res, letter=letter: letter, mc_group=None, unit="",
                hint=f"<letter of the option that matches {sk.hint[1:-1]}>"), split))
    return out
