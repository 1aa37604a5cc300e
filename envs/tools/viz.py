"""Visualization tools (matplotlib, Agg backend): quick-look PNG of a raster or true-colour scene,
map with a mask/vector overlay, chart of a series. PNGs are ``image`` artifacts.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.tools.common import (
    Layer,
    align,
    load_layer,
    load_series,
    load_vector,
    out_name,
    parents,
    valid_values,
    write_png,
)
from earthrl.envs.tools.registry import Args, ToolContext, ToolResult, register_tool

_VZ = dict(domain="Visualization", family="SAA")


def _figure():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(5, 4))


def _stretch(arr: np.ndarray, field: str) -> np.ndarray:
    """2-98 % percentile stretch to 0-1 (NaN kept)."""
    lo, hi = np.percentile(valid_values(Layer(arr, "", None, "", field, "raster"), field), [2, 98])
    return np.clip((arr - lo) / (hi - lo if hi > lo else 1), 0, 1)


def _base(ctx: ToolContext, name: str):
    """Image array (H, W[, 3]) and layers of ``name``: a raster, or a scene as true colour."""
    reg = ctx.registry
    if name.strip() in reg.scenes:
        s = reg.scene(name)
        layers = align([load_layer(reg, f"{s.id}:{s.symbols[k]}") for k in ("R", "G", "B") if k in s.symbols])
        if len(layers) == 3:
            return np.dstack([_stretch(l.arr, "name") for l in layers]), layers
        layers = layers[:1]
    else:
        layers = [load_layer(reg, name)]
    return layers[0].arr, layers


class QuickArgs(Args):
    name: str = Field(description="raster, scene:band, or scene id (true colour)")
    cmap: str = Field("viridis", description="matplotlib colormap")


def quicklook_name(ctx: ToolContext, args: QuickArgs) -> str:
    """``ql_<name as given>``."""
    return out_name("ql", args.name)


@register_tool("quicklook", args=QuickArgs, description="Quick-look PNG of a raster or scene.",
               skills=["spectral_index", "land_cover", "water_flood"], output_kind="image", output_name=quicklook_name,
               **_VZ)
def quicklook(ctx: ToolContext, args: QuickArgs) -> ToolResult:
    """PNG of a single-band raster (colormap ``cmap``, colour bar, NaN transparent) or of a scene
    as a true-colour composite (R,G,B bands, 2-98 % stretch). Output ``ql_<name>``.

    Raises:
        ToolError: all-NaN raster; unknown colormap (field ``cmap``).
    """
    import matplotlib

    if args.cmap not in matplotlib.colormaps:
        raise ToolError("tool_error", f"cmap: {args.cmap!r} is not a matplotlib colormap; try viridis, RdYlGn")
    img, layers = _base(ctx, args.name)
    if img.ndim == 2:
        valid_values(layers[0], "name")
    fig, ax = _figure()
    im = ax.imshow(img, cmap=args.cmap if img.ndim == 2 else None)
    if img.ndim == 2:
        fig.colorbar(im, ax=ax, label=layers[0].units)
    ax.set_title(args.name, fontsize=8)
    ax.set_axis_off()
    return write_png(ctx, quicklook_name(ctx, args), fig, parents(layers))


class OverlayMapArgs(Args):
    name: str = Field(description="base raster or scene id")
    overlay: str = Field(description="mask raster or vector (scene:vector)")
    alpha: float = Field(0.5, ge=0, le=1)


def map_overlay_name(ctx: ToolContext, args: OverlayMapArgs) -> str:
    """``map_<name>_<overlay>`` as given."""
    return out_name("map", args.name, args.overlay)


@register_tool("map_overlay", args=OverlayMapArgs, description="PNG map of a raster with a mask or vector overlay.",
               skills=["water_flood", "land_cover", "cloud_masking"], output_kind="image", output_name=map_overlay_name,
               **_VZ)
def map_overlay(ctx: ToolContext, args: OverlayMapArgs) -> ToolResult:
    """Base image (as :func:`quicklook`, grey for one band) in map coordinates with the overlay:
    a mask's 1-pixels in red (``alpha``) or vector outlines (reprojected to the base CRS).
    Output ``map_<name>_<overlay>``."""
    reg = ctx.registry
    img, layers = _base(ctx, args.name)
    l0 = layers[0]
    h, w = l0.arr.shape
    t = l0.transform
    ext = (t.c, t.c + t.a * w, t.f + t.e * h, t.f)
    fig, ax = _figure()
    ax.imshow(img, cmap="gray" if img.ndim == 2 else None, extent=ext)
    extra = []
    if ":" in args.overlay and args.overlay.split(":", 1)[1] in reg.scene(args.overlay.split(":")[0]).vectors:
        gdf, p = load_vector(reg, args.overlay, "overlay")
        gdf.to_crs(l0.crs).boundary.plot(ax=ax, color="red", linewidth=0.8)
        ax.set_xlim(ext[0], ext[1])
        ax.set_ylim(ext[2], ext[3])
        extra = [p]
    elif args.overlay in reg.artifacts and reg.get(args.overlay).kind == "vector":
        gdf, p = load_vector(reg, args.overlay, "overlay")
        gdf.to_crs(l0.crs).boundary.plot(ax=ax, color="red", linewidth=0.8)
        extra = [p]
    else:
        m = load_layer(reg, args.overlay)
        rgba = np.zeros(m.arr.shape + (4,))
        rgba[m.arr == 1] = (1, 0, 0, args.alpha)
        mh, mw = m.arr.shape
        mt = m.transform
        ax.imshow(rgba, extent=(mt.c, mt.c + mt.a * mw, mt.f + mt.e * mh, mt.f))
        extra = parents([m])
    ax.set_title(f"{args.name} + {args.overlay}", fontsize=8)
    return write_png(ctx, map_overlay_name(ctx, args), fig, parents(layers) + extra)


class ChartArgs(Args):
    series: str = Field(description="series artifact")


def plot_series_name(ctx: ToolContext, args: ChartArgs) -> str:
    """``chart_<series>``."""
    return out_name("chart", ctx.registry.get(args.series).name)


@register_tool("plot_series", args=ChartArgs, description="PNG chart of a series over time.",
               skills=["change_trend", "vegetation_drought", "water_flood"], output_kind="image",
               output_name=plot_series_name, **_VZ)
def plot_series(ctx: ToolContext, args: ChartArgs) -> ToolResult:
    """Line chart (dates on x, values on y, markers) of a series artifact, with an OLS trend line.
    Output ``chart_<series>``.

    Raises:
        ToolError: fewer than 2 valid values.
    """
    import pandas as pd

    dates, v, art = load_series(ctx.registry, args.series, min_len=2)
    t = pd.to_datetime(dates)
    fig, ax = _figure()
    ax.plot(t, v, "o-", ms=3)
    x = (t - t[0]).days.values.astype(float)
    b, a = np.polyfit(x, v, 1)
    ax.plot(t, a + b * x, "--", color="gray")
    ax.set_ylabel(art.units)
    ax.set_title(art.name, fontsize=8)
    fig.autofmt_xdate()
    return write_png(ctx, plot_series_name(ctx, args), fig, [art.name])
