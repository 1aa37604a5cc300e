"""Spatio-Temporal Analysis tools (SimCRAFT domain; HiRS family SAA): an index time series over
the task's scenes (clear pixels only), a series from any dated rasters or per-date values
(TVDI, LST ...), linear trend (scipy), Mann-Kendall with Sen's slope
(pymannkendall), STL decomposition (statsmodels), change points (ruptures) and two-date change
detection. Series are ``series`` artifacts: JSON ``{"dates", "values", ...}``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.data.catalog import read_band
from earthrl.envs.tools.common import (
    call_hash,
    decimal_years,
    fmt,
    layer_source,
    load_layer,
    load_series,
    out_name,
    parents,
    same_grid,
    write_raster,
)
from earthrl.envs.tools.mini_toolset import _spyndex_index, compute_index
from earthrl.envs.tools.preprocess import bqa_field
from earthrl.envs.tools.registry import Args, ToolContext, ToolResult, register_tool

_ST = dict(domain="Spatio-Temporal Analysis", family="SAA")


def clear_pixels(s) -> np.ndarray | None:
    """Boolean clear-sky mask of scene ``s`` from its QA (Fmask codes 0 clear land / 1 water;
    BQA: no cloud bit, cloud/cirrus/shadow confidence not high, not fill), or None (no QA)."""
    if s.qa_kind is None:
        return None
    raw, _ = read_band(s, s.qa_band)
    if s.qa_kind == "fmask":
        return np.isin(raw, [0, 1])

    bad = (bqa_field(raw, "fill") == 1) | (bqa_field(raw, "cloud") == 1)
    for f in ("cloud_confidence", "cirrus_confidence", "cloud_shadow_confidence"):
        bad |= bqa_field(raw, f) == 3
    return ~bad


class SeriesArgs(Args):
    index: str = Field("NDVI", description="spectral index, e.g. NDVI")
    scenes: list[str] | None = Field(None, description="scene ids; default all task scenes")
    clear_only: bool = Field(True, description="use clear pixels only (QA)")


def index_time_series_name(ctx: ToolContext, args: SeriesArgs) -> str:
    """``ts_<index>_<call hash>``, the index as spyndex spells it, lower case.

    Raises:
        ToolError: unknown index.
    """
    return out_name("ts", _spyndex_index(args.index).short_name.lower(), call_hash(ctx))


@register_tool("index_time_series", args=SeriesArgs,
               description="Per-scene mean of an index over clear pixels, as a dated series.",
               skills=["change_trend", "vegetation_drought", "water_flood"], output_kind="series",
               sensors=["landsat-5", "landsat-7", "landsat-8", "sentinel-2"],
               output_name=index_time_series_name, **_ST)
def index_time_series(ctx: ToolContext, args: SeriesArgs) -> ToolResult:
    """For each scene (date order): the index (:func:`earthrl.envs.tools.mini_toolset.compute_index`, spyndex)
    averaged over valid pixels that are clear (:func:`clear_pixels`) when ``clear_only``; a scene
    without such pixels gets null. Writes series ``ts_<index>_<hash>`` with ``dates``, ``values``,
    ``scenes``, ``clear_px``.

    Raises:
        ToolError: unknown scene/index, a scene lacking a band, no scene at all.
    """
    reg = ctx.registry
    scenes = [reg.scene(s) for s in args.scenes] if args.scenes else list(reg.scenes.values())
    if not scenes:
        raise ToolError("tool_error", "scenes: the task has no scenes; pass scene ids")
    scenes.sort(key=lambda s: s.date)
    dates, values, counts = [], [], []
    for s in scenes:
        arr, _, idx = compute_index(reg, s, args.index)
        ok = np.isfinite(arr)
        clear = clear_pixels(s) if args.clear_only else None
        if clear is not None:
            ok &= clear
        n = int(ok.sum())
        dates.append(s.date)
        values.append(float(arr[ok].astype(np.float64).mean()) if n else None)
        counts.append(n)
    obj = {"index": idx.short_name, "dates": dates, "values": values,
           "scenes": [s.id for s in scenes], "clear_px": counts}
    art = reg.write_json(index_time_series_name(ctx, args), obj, "series",
                         units="index", parents=[s.id for s in scenes], call=ctx.call)
    n_ok = sum(v is not None for v in values)
    return ToolResult(f"saved {art.name} ({len(values)} dates {dates[0]}..{dates[-1]}, {n_ok} with clear px)",
                      {"artifact": art.name, **obj}, art.name)


#: statistic of a raster's valid pixels -> numpy reduction (float64).
SERIES_STATS = {"mean": np.mean, "median": np.median, "min": np.min, "max": np.max, "std": np.std,
                "sum": np.sum}


class RasterSeriesArgs(Args):
    rasters: list[str] | None = Field(None, min_length=1, max_length=1000,
                                      description="dated rasters: artifacts (e.g. per-date TVDI, LST) or scene:band")
    date_values: list[float] | None = Field(None, min_length=1, max_length=1000,
                                            description="per-date statistics instead of rasters (with dates)")
    dates: list[str] | None = Field(None, description="ISO dates, one per raster/value; default each raster's date")
    stat: Literal["mean", "median", "min", "max", "std", "sum"] = "mean"
    mask: str | None = Field(None, description="mask artifact: only its 1-pixels count")
    units: str | None = Field(None, max_length=40, description="units of date_values")
    aggregate: Literal["year", "season"] | None = Field(
        None, description="group the per-date values by calendar year, or by meteorological season "
        "(DJF, MAM, JJA, SON; December counts with the next year's DJF); null keeps every date")
    aggregate_stat: Literal["mean", "median", "min", "max", "sum"] = Field(
        "mean", description="statistic of the per-date values within each year/season")


#: meteorological season of each month (1-12) and the month it starts in.
SEASONS = {12: "DJF", 1: "DJF", 2: "DJF", 3: "MAM", 4: "MAM", 5: "MAM", 6: "JJA", 7: "JJA", 8: "JJA",
           9: "SON", 10: "SON", 11: "SON"}
_SEASON_START = {"DJF": 12, "MAM": 3, "JJA": 6, "SON": 9}


def period_of(iso: str, by: str) -> tuple[str, str]:
    """``(label, start date)`` of the year or meteorological season of ISO date ``iso``:
    ``("2019", "2019-01-01")``; ``("2020-DJF", "2019-12-01")`` for 2019-12-15 and 2020-02-01
    (a DJF season is labelled by the year of its January)."""
    y, m = int(iso[:4]), int(iso[5:7])
    if by == "year":
        return str(y), f"{y:04d}-01-01"
    season = SEASONS[m]
    year = y + 1 if m == 12 else y
    start = _SEASON_START[season]
    return f"{year}-{season}", f"{year - 1 if start == 12 else year:04d}-{start:02d}-01"


def aggregate_series(dates: list[str], values: list, by: str, stat: str) -> dict:
    """Per-date ``values`` (None for no value; ``dates`` sorted ISO) grouped by year or season
    (:func:`period_of`): ``{"dates": period starts, "values": stat of the non-null values (None
    when a period has none), "periods": labels, "n_dates": non-null values per period}``, in
    date order; ``stat`` one of :data:`SERIES_STATS` (float64)."""
    groups: dict[tuple[str, str], list[float]] = {}
    for d, v in zip(dates, values):
        group = groups.setdefault(period_of(d, by), [])
        if v is not None:
            group.append(v)
    keys = sorted(groups, key=lambda k: k[1])
    vals = [float(SERIES_STATS[stat](np.asarray(groups[k], dtype=np.float64))) if groups[k] else None for k in keys]
    return {"dates": [k[1] for k in keys], "values": vals, "periods": [k[0] for k in keys],
            "n_dates": [len(groups[k]) for k in keys]}


def _iso(d: str, field: str) -> str:
    import datetime as dt

    try:
        return dt.date.fromisoformat(str(d)[:10]).isoformat()
    except ValueError:
        raise ToolError("tool_error", f"{field}: {d!r} is not an ISO date (YYYY-MM-DD)") from None


def _raster_values(reg, args: RasterSeriesArgs) -> tuple[list, list, list, str, list[str]]:
    """``(dates, values, valid_px, units, parents)`` of ``args.rasters``."""
    mask = load_layer(reg, args.mask) if args.mask else None
    if mask is not None and mask.kind != "mask":
        raise ToolError("wrong_kind", f"mask: {mask.source} is a {mask.kind}, not a mask; make one with threshold_mask")
    dates, values, counts, units, layers = [], [], [], set(), []
    for i, ref in enumerate(args.rasters):
        layer = load_layer(reg, ref)
        date = args.dates[i] if args.dates else layer.date
        if date is None:
            raise ToolError("tool_error", f"rasters[{i}]: {layer.source} has no date (it mixes dates or has "
                            "none); pass dates, one per raster")
        ok = np.isfinite(layer.arr)
        if mask is not None:
            same_grid([mask, layer])
            ok &= mask.arr == 1
        v = layer.arr[ok].astype(np.float64)
        dates.append(_iso(date, f"dates[{i}]" if args.dates else f"rasters[{i}] date"))
        values.append(float(SERIES_STATS[args.stat](v)) if v.size else None)
        counts.append(int(v.size))
        units.add(layer.units)
        layers.append(layer.source)  # not the pixels: a long series would hold every raster at once
    if len(units) > 1:
        raise ToolError("tool_error", f"rasters: units differ ({', '.join(sorted(units))}); a series holds one "
                        "quantity, pass rasters of one product")
    return dates, values, counts, units.pop(), parents(layers + ([mask.source] if mask else []))


def raster_series_name(ctx: ToolContext, args: RasterSeriesArgs) -> str:
    """``series_<stat>_<call hash>`` (stat ``given`` for ``date_values``)."""
    return out_name("series", args.stat if args.rasters else "given", call_hash(ctx))


@register_tool("raster_series", args=RasterSeriesArgs,
               description="Series from dated rasters (any product: TVDI, LST, an index) or per-date values.",
               skills=["change_trend", "vegetation_drought", "lst_inversion"], output_kind="series",
               output_name=raster_series_name, **_ST)
def raster_series(ctx: ToolContext, args: RasterSeriesArgs) -> ToolResult:
    """A ``series`` artifact from per-date rasters, so that the trend tools (:func:`linear_trend`,
    :func:`mann_kendall`, :func:`stl_decompose`, :func:`change_points`) apply to any raster
    product: for each raster (artifact or ``scene:band``) the ``stat`` (numpy mean, median, min,
    max, std or sum, float64) of its valid pixels (finite; with ``mask`` only where the mask is 1),
    dated by ``dates`` or the raster's own date; or ``date_values`` given per date. Entries are
    sorted by date; a raster without valid pixels gets null. Writes ``series_<stat>_<hash>`` with
    ``dates``, ``values``, ``sources``, ``valid_px``, ``stat``; units of the rasters. With
    ``aggregate`` (``"year"`` or ``"season"``: meteorological DJF/MAM/JJA/SON, December with the
    next year's DJF) the per-date values are grouped (:func:`aggregate_series`): ``values`` is
    the ``aggregate_stat`` of each period's non-null values, ``dates`` the periods' first days,
    plus ``periods`` (``"2019"``, ``"2020-DJF"``), ``n_dates`` and ``per_date`` (the ungrouped
    ``dates``/``values``); the trend tools then see one value per period.

    Raises:
        ToolError: neither or both of rasters / date_values; dates of the wrong length or not ISO;
            a raster without a date; rasters of different units; a mask on another grid.
    """
    reg = ctx.registry
    if (args.rasters is None) == (args.date_values is None):
        raise ToolError("tool_error", "give rasters (dated rasters) or date_values with dates, not "
                        f"{'both' if args.rasters else 'neither'}")
    n = len(args.rasters or args.date_values)
    if (args.dates is not None or args.date_values is not None) and len(args.dates or []) != n:
        raise ToolError("tool_error", f"dates: {len(args.dates or [])} dates for {n} "
                        f"{'rasters' if args.rasters else 'date_values'}; give one date each")
    if args.rasters:
        dates, values, counts, units, par = _raster_values(reg, args)
        sources = [str(r) for r in args.rasters]
    else:
        if not all(np.isfinite(args.date_values)):
            raise ToolError("tool_error", "date_values: every value must be a finite number")
        dates = [_iso(d, f"dates[{i}]") for i, d in enumerate(args.dates)]
        values, counts, units, par = [float(v) for v in args.date_values], None, args.units or "value", []
        sources = None
    order = sorted(range(n), key=lambda i: dates[i])
    obj = {"stat": args.stat if args.rasters else "given", "dates": [dates[i] for i in order],
           "values": [values[i] for i in order]}
    if sources is not None:
        obj.update(sources=[sources[i] for i in order], valid_px=[counts[i] for i in order])
    what = f"{n} dates"
    if args.aggregate:
        per_date = {"dates": obj["dates"], "values": obj["values"]}
        obj.update(aggregate_series(obj["dates"], obj["values"], args.aggregate, args.aggregate_stat),
                   aggregate=args.aggregate, aggregate_stat=args.aggregate_stat, per_date=per_date)
        what = f"{len(obj['dates'])} {'years' if args.aggregate == 'year' else 'seasons'} ({args.aggregate_stat} of {n} dates)"
    art = reg.write_json(raster_series_name(ctx, args), obj, "series", units=units,
                         parents=par, call=ctx.call)
    n_ok = sum(v is not None for v in obj["values"])
    return ToolResult(f"saved {art.name} ({what} {obj['dates'][0]}..{obj['dates'][-1]}, {n_ok} valid, "
                      f"{obj['stat']} in {units})", {"artifact": art.name, "units": units, **obj}, art.name)


class SeriesRef(Args):
    series: str = Field(description="series artifact")


@register_tool("linear_trend", args=SeriesRef, description="Least-squares linear trend of a series (per year).",
               skills=["change_trend", "vegetation_drought"], output_kind="number", **_ST)
def linear_trend(ctx: ToolContext, args: SeriesRef) -> ToolResult:
    """OLS fit value = a + b·t over decimal years t (``scipy.stats.linregress``): slope b (units
    per year), intercept, r, p-value, n. Null values are dropped.

    Raises:
        ToolError: fewer than 3 valid values (``empty_series``), wrong kind.
    """
    from scipy.stats import linregress

    dates, v, _ = load_series(ctx.registry, args.series)
    r = linregress(decimal_years(dates), v)
    d = {"slope_per_year": float(r.slope), "intercept": float(r.intercept), "r": float(r.rvalue),
         "p_value": float(r.pvalue), "n": int(v.size)}
    return ToolResult(f"slope {fmt(d['slope_per_year'])} per year, r {fmt(d['r'])}, p {fmt(d['p_value'])}, "
                      f"n {v.size}", d)


class MkArgs(SeriesRef):
    alpha: float = Field(0.05, gt=0, lt=1, description="significance level")


@register_tool("mann_kendall", args=MkArgs, description="Mann-Kendall trend test with Sen's slope.",
               skills=["change_trend", "vegetation_drought"], output_kind="number", **_ST)
def mann_kendall(ctx: ToolContext, args: MkArgs) -> ToolResult:
    """Mann-Kendall test (``pymannkendall.original_test``, values in date order): trend
    (increasing/decreasing/no trend), p, z, Kendall tau, S; Sen's slope per observation step
    (pymannkendall) and per year over the real dates (Theil-Sen, ``scipy.stats.theilslopes``).

    Raises:
        ToolError: fewer than 4 valid values (``empty_series``).
    """
    import pymannkendall as mk
    from scipy.stats import theilslopes

    dates, v, _ = load_series(ctx.registry, args.series, min_len=4)
    r = mk.original_test(v, alpha=args.alpha)
    per_year = float(theilslopes(v, decimal_years(dates))[0])
    d = {"trend": r.trend, "p_value": float(r.p), "z": float(r.z), "tau": float(r.Tau), "s": float(r.s),
         "sen_slope_per_step": float(r.slope), "sen_slope_per_year": per_year, "n": int(v.size)}
    return ToolResult(f"{r.trend} (p {fmt(d['p_value'])}, tau {fmt(d['tau'])}), Sen's slope "
                      f"{fmt(per_year)} per year", d)


class StlArgs(SeriesRef):
    period: int = Field(12, ge=2, le=24, description="season length in months")


def stl_decompose_name(ctx: ToolContext, args: StlArgs) -> str:
    """``stl_<series>``."""
    return out_name("stl", ctx.registry.get(args.series).name)


@register_tool("stl_decompose", args=StlArgs, description="STL trend/seasonal decomposition of a series.",
               skills=["change_trend", "vegetation_drought"], output_kind="series", output_name=stl_decompose_name,
               **_ST)
def stl_decompose(ctx: ToolContext, args: StlArgs) -> ToolResult:
    """STL (``statsmodels.tsa.seasonal.STL``, robust) of the series after resampling to monthly
    means (months without data linearly interpolated). Writes series ``stl_<series>`` (monthly
    ``dates``, ``values`` = trend, plus ``seasonal``, ``resid``, ``observed``); reports the trend
    change first-to-last and the seasonal amplitude (max - min).

    Raises:
        ToolError: fewer than two periods of months (``empty_series``).
    """
    import pandas as pd
    from statsmodels.tsa.seasonal import STL

    dates, v, art = load_series(ctx.registry, args.series)
    s = pd.Series(v, index=pd.to_datetime(dates)).resample("MS").mean().interpolate("linear")
    if len(s) < 2 * args.period + 1:
        raise ToolError("empty_series", f"period: {art.name} spans {len(s)} months; STL needs more than "
                        f"2 x period = {2 * args.period}; lower period or use a longer series")
    r = STL(s, period=args.period, robust=True).fit()
    obj = {"dates": [d.date().isoformat() for d in s.index], "values": [float(x) for x in r.trend],
           "seasonal": [float(x) for x in r.seasonal], "resid": [float(x) for x in r.resid],
           "observed": [float(x) for x in s]}
    out = ctx.registry.write_json(stl_decompose_name(ctx, args), obj, "series", units=art.units,
                                  parents=[art.name], call=ctx.call)
    d = {"artifact": out.name, "trend_change": float(r.trend.iloc[-1] - r.trend.iloc[0]),
         "seasonal_amplitude": float(r.seasonal.max() - r.seasonal.min()), "months": len(s)}
    return ToolResult(f"saved {out.name}; trend change {fmt(d['trend_change'])}, seasonal amplitude "
                      f"{fmt(d['seasonal_amplitude'])} over {len(s)} months", d, out.name)


class CpArgs(SeriesRef):
    penalty: float = Field(1.0, gt=0, le=1e6, description="PELT penalty (higher = fewer)")
    model: Literal["l2", "l1", "rbf"] = "l2"


@register_tool("change_points", args=CpArgs, description="Change points of a series (PELT).",
               skills=["change_trend"], output_kind="number", **_ST)
def change_points(ctx: ToolContext, args: CpArgs) -> ToolResult:
    """Change points by PELT (``ruptures.Pelt(model).fit(values).predict(pen=penalty)``, min
    segment 2): the dates where a new segment starts, and the mean of each segment.

    Raises:
        ToolError: fewer than 4 valid values.
    """
    import ruptures as rpt

    dates, v, _ = load_series(ctx.registry, args.series, min_len=4)
    bkps = rpt.Pelt(model=args.model, min_size=2, jump=1).fit(v.reshape(-1, 1)).predict(pen=args.penalty)
    starts = [0] + bkps[:-1]
    d = {"change_dates": [dates[i] for i in bkps[:-1]], "indices": [int(i) for i in bkps[:-1]],
         "segment_means": [float(v[a:b].mean()) for a, b in zip(starts, bkps)]}
    return ToolResult(f"{len(d['change_dates'])} change points: {', '.join(d['change_dates']) or 'none'}; "
                      f"segment means {', '.join(fmt(m) for m in d['segment_means'])}", d)


class ChangeArgs(Args):
    before: str = Field(description="raster at date 1")
    after: str = Field(description="raster at date 2")
    threshold: float = Field(ge=0, description="min |after-before| that counts as change")
    direction: Literal["decrease", "increase", "both"] = "both"


def change_detection_name(ctx: ToolContext, args: ChangeArgs) -> str:
    """``chg_<direction>_<before>_<after>``."""
    reg = ctx.registry
    return out_name("chg", args.direction, layer_source(reg, args.before), layer_source(reg, args.after))


@register_tool("change_detection", args=ChangeArgs, description="Change mask between two dates.",
               skills=["change_trend", "water_flood", "vegetation_drought"], output_kind="mask",
               output_name=change_detection_name, **_ST)
def change_detection(ctx: ToolContext, args: ChangeArgs) -> ToolResult:
    """uint8 mask of change between two co-registered rasters: d = after - before; 1 where
    d < -threshold (decrease), d > threshold (increase) or |d| > threshold (both); 255 where
    either is nodata. Reports the changed share (%) and area (km², from the pixel size).

    Raises:
        ToolError: grids differ (names both rasters).
    """
    b, a = load_layer(ctx.registry, args.before), load_layer(ctx.registry, args.after)
    same_grid([b, a])
    d = a.arr - b.arr
    with np.errstate(invalid="ignore"):
        hit = {"decrease": d < -args.threshold, "increase": d > args.threshold,
               "both": np.abs(d) > args.threshold}[args.direction]
    m = hit.astype(np.uint8)
    m[np.isnan(d)] = 255
    res = write_raster(ctx, change_detection_name(ctx, args), m, [b, a], kind="mask",
                       units="mask")
    valid = m != 255
    n = int((m == 1).sum())
    pct = 100.0 * n / max(int(valid.sum()), 1)
    km2 = b.area_m2(m == 1) / 1e6
    res.data.update(changed_px=n, changed_pct=pct, changed_km2=km2)
    res.text += f"; changed {n} px = {fmt(pct)} % = {fmt(km2)} km2"
    return res
