"""Statistics tools (HiRS family SAA): percentiles, percentage change, share above/below a value
and correlation of two rasters. Values over valid (finite) pixels, float64 accumulation.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.tools.common import fmt, load_layer, same_grid, valid_values
from earthrl.envs.tools.mini_toolset import OPS
from earthrl.envs.tools.registry import Args, ToolContext, ToolResult, register_tool

_SA = dict(domain="Spatio-Temporal Analysis", family="SAA")


class PctArgs(Args):
    name: str = Field(description="raster")
    q: list[float] = Field([10, 50, 90], min_length=1, max_length=20, description="percentiles 0-100")


@register_tool("percentiles", args=PctArgs, description="Percentiles of a raster's valid pixels.",
               skills=["spectral_index", "lst_inversion", "vegetation_drought"], output_kind="number", **_SA)
def percentiles(ctx: ToolContext, args: PctArgs) -> ToolResult:
    """``numpy.percentile`` (linear interpolation) of the valid pixels at each ``q`` (0-100).

    Raises:
        ToolError: a q outside 0-100 (field ``q``), all-NaN raster.
    """
    bad = [x for x in args.q if not 0 <= x <= 100]
    if bad:
        raise ToolError("tool_error", f"q: {bad} outside 0-100; give percentiles like [10, 50, 90]")
    layer = load_layer(ctx.registry, args.name)
    p = np.percentile(valid_values(layer, "name"), args.q)
    d = {f"p{x:g}": float(v) for x, v in zip(args.q, p)}
    return ToolResult(f"{layer.source}: " + ", ".join(f"{k} {fmt(v)}" for k, v in d.items()), d)


class ChangePctArgs(Args):
    before: str = Field(description="raster at date 1")
    after: str = Field(description="raster at date 2")


@register_tool("percent_change", args=ChangePctArgs, description="Percent change of the mean between two rasters.",
               skills=["change_trend", "vegetation_drought", "water_flood"], output_kind="number", **_SA)
def percent_change(ctx: ToolContext, args: ChangePctArgs) -> ToolResult:
    """100 · (mean(after) - mean(before)) / |mean(before)|, each mean over its own valid pixels
    (the rasters may differ in grid).

    Raises:
        ToolError: all-NaN input; mean(before) = 0 (undefined).
    """
    b, a = load_layer(ctx.registry, args.before), load_layer(ctx.registry, args.after)
    mb, ma = valid_values(b, "before").mean(), valid_values(a, "after").mean()
    if mb == 0:
        raise ToolError("tool_error", "before: mean is 0, percent change undefined; compare differences instead")
    pct = 100.0 * (ma - mb) / abs(mb)
    return ToolResult(f"mean {fmt(mb)} -> {fmt(ma)}: {fmt(pct)} %",
                      {"percent_change": float(pct), "mean_before": float(mb), "mean_after": float(ma)})


class ShareArgs(Args):
    name: str = Field(description="raster")
    op: Literal[">", ">=", "<", "<="] = ">"
    value: float


@register_tool("share_above", args=ShareArgs, description="Percent of valid pixels above/below a value.",
               skills=["spectral_index", "lst_inversion", "water_flood", "vegetation_drought"], output_kind="number", valid_range=(0.0, 100.0), **_SA)
def share_above(ctx: ToolContext, args: ShareArgs) -> ToolResult:
    """Share (%) of valid pixels with ``raster <op> value`` (no mask written).

    Raises:
        ToolError: all-NaN raster.
    """
    layer = load_layer(ctx.registry, args.name)
    v = valid_values(layer, "name")
    n = int(OPS[args.op](v, args.value).sum())
    pct = 100.0 * n / v.size
    return ToolResult(f"{layer.source}: {fmt(pct)} % of {v.size} valid px {args.op} {args.value:g}",
                      {"share_pct": pct, "count_px": n, "valid_px": int(v.size)})


class CorrArgs(Args):
    a: str
    b: str


@register_tool("correlation", args=CorrArgs, description="Pearson and Spearman correlation of two rasters.",
               skills=["vegetation_drought", "lst_inversion", "change_trend"], output_kind="number", **_SA)
def correlation(ctx: ToolContext, args: CorrArgs) -> ToolResult:
    """Pearson r and Spearman rho (``scipy.stats``) over pixels valid in both rasters.

    Raises:
        ToolError: different grids; fewer than 3 common valid pixels.
    """
    from scipy.stats import pearsonr, spearmanr

    la, lb = load_layer(ctx.registry, args.a), load_layer(ctx.registry, args.b)
    same_grid([la, lb])
    ok = np.isfinite(la.arr) & np.isfinite(lb.arr)
    if ok.sum() < 3:
        raise ToolError("empty_raster", "a/b: fewer than 3 pixels valid in both; check the inputs")
    x, y = la.arr[ok].astype(np.float64), lb.arr[ok].astype(np.float64)
    d = {"pearson_r": float(pearsonr(x, y)[0]), "spearman_rho": float(spearmanr(x, y)[0]), "n": int(ok.sum())}
    return ToolResult(f"pearson r {fmt(d['pearson_r'])}, spearman rho {fmt(d['spearman_rho'])}, n {d['n']}", d)
