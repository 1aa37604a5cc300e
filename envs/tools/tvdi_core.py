"""TVDI arithmetic (numpy only) behind the ``tvdi`` tool of :mod:`earthrl.envs.tools.physics`:
the valid-pixel mask, the NDVI intervals, the dry and wet edges and the per-pixel index.

TVDI after Sandholt, Rasmussen & Andersen (2002), "A simple interpretation of the surface
temperature/vegetation index space for assessment of surface moisture status", Remote Sensing
of Environment 79:213-224: TVDI = (LST - LST_min) / (LST_max - LST_min), with the dry edge
LST_max = a + b·NDVI fitted to the highest LST of each NDVI interval and the wet edge LST_min
either fitted the same way to the lowest LST of each interval or horizontal at the lowest one
(Sandholt's Ts_min). LST in K, NDVI unitless. The defaults and their sources are listed in
:data:`DEFAULTS`' docstring and in docs/science.md (TVDI).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from earthrl.envs.data.artifacts import ToolError

FREEZING_K = 273.15
"""LST below this (K) is a frozen or snow-covered surface; ``exclude_frozen`` leaves it out."""

DEFAULTS = dict(ndvi_step=0.01, bins=None, ndvi_min=0.0, ndvi_max=1.0, lst_min=200.0, lst_max=350.0,
                exclude_frozen=False, min_pixels=None, fit="ols", wet_edge="fit", min_valid_share=0.0)
"""The conventions of the ``tvdi`` tool and their defaults, with their sources:

- ``ndvi_step`` 0.01: 100 NDVI intervals of 0.01 over [0, 1], as in Schirmbeck, Fontana &
  Schirmbeck (2018, Scientia Agricola 75(2):111-120, doi:10.1590/1678-992X-2016-0315) and in
  Earth-Bench's reference ``compute_tvdi`` (100 intervals over each date's NDVI range); ``bins`` = n equal intervals instead.
- ``ndvi_min``/``ndvi_max`` 0/1: water (NDVI < 0) is off the triangle (Sandholt et al. 2002 use
  land pixels only; Earth-Bench's tool keeps 0 <= NDVI <= 1).
- ``lst_min``/``lst_max`` 200/350 K: the physical plausibility range of LST (the step verifier's
  180-350 K, narrowed at the cold end); ``exclude_frozen`` additionally drops LST < 273.15 K.
- ``min_pixels`` None (auto): an interval enters the fits with >= clip(ceil(0.002·N), 5, 500)
  valid pixels, N the valid pixels of the date: 500 from N = 250,000 up (a 500×500 MODIS 1 km
  scene; the count of a textbook computation on Earth-Bench's MODIS dates that agreed per date
  to 0.003 in mean TVDI with these conventions), 5 on EarthRL's 41×41 Landsat samples. This scaling is EarthRL's choice; no paper fixes the count.
- ``fit`` "ols" and ``wet_edge`` "fit": least-squares lines through the per-interval maxima (dry)
  and minima (wet), the common practice and Earth-Bench's tool; ``wet_edge="min"`` is Sandholt
  et al.'s (2002) horizontal wet edge at Ts_min.
- ``min_valid_share`` 0: no per-date quality rule unless asked for.
"""


@dataclass
class Edges:
    """Fitted edges, LST = a + b·NDVI (K): ``dry``/``wet`` as (a, b), ``span`` the NDVI range of
    the intervals used, ``intervals`` how many were used of ``total``, ``min_pixels`` the count
    each needed."""

    dry: tuple[float, float]
    wet: tuple[float, float]
    span: tuple[float, float]
    intervals: int
    total: int
    min_pixels: int


def tvdi_valid(ndvi: np.ndarray, lst: np.ndarray, ndvi_min: float = 0.0, ndvi_max: float = 1.0,
               lst_min: float = 200.0, lst_max: float = 350.0, exclude_frozen: bool = False) -> np.ndarray:
    """Boolean mask of the pixels TVDI uses: finite, ndvi_min <= NDVI <= ndvi_max and
    lst_min <= LST <= lst_max (K); with ``exclude_frozen`` also LST >= 273.15 K."""
    lo = max(lst_min, FREEZING_K) if exclude_frozen else lst_min
    with np.errstate(invalid="ignore"):
        return (ndvi >= ndvi_min) & (ndvi <= ndvi_max) & (lst >= lo) & (lst <= lst_max)


def ndvi_intervals(ndvi_min: float = 0.0, ndvi_max: float = 1.0, ndvi_step: float = 0.01,
                   bins: int | None = None) -> np.ndarray:
    """Interval edges over [ndvi_min, ndvi_max]: ``bins`` equal intervals when given, else steps of
    ``ndvi_step`` from ndvi_min (the last one ends at ndvi_max). Intervals are [lo, hi), the last
    closed."""
    if bins:
        return np.linspace(ndvi_min, ndvi_max, bins + 1)
    n = max(1, math.ceil((ndvi_max - ndvi_min) / ndvi_step - 1e-9))
    return np.minimum(ndvi_min + ndvi_step * np.arange(n + 1), ndvi_max)


def auto_min_pixels(n_valid: int) -> int:
    """The default pixels per interval: clip(ceil(0.002·n_valid), 5, 500) (see :data:`DEFAULTS`)."""
    return int(min(500, max(5, math.ceil(0.002 * n_valid))))


def tvdi_edges(ndvi: np.ndarray, lst: np.ndarray, *, ndvi_step: float = 0.01, bins: int | None = None,
               ndvi_min: float = 0.0, ndvi_max: float = 1.0, lst_min: float = 200.0, lst_max: float = 350.0,
               exclude_frozen: bool = False, min_pixels: int | None = None, fit: str = "ols",
               wet_edge: str = "fit") -> Edges:
    """Dry and wet edges of the NDVI-LST space (Sandholt et al. 2002, RSE 79:213-224).

    Pixels outside :func:`tvdi_valid` are left out; the NDVI intervals are :func:`ndvi_intervals`
    over the *fixed* range [ndvi_min, ndvi_max] (so edges of different dates are comparable); an
    interval enters the fits with >= ``min_pixels`` pixels (None: :func:`auto_min_pixels`); the
    dry edge is a line fit (``fit``: ``"ols"``, ``scipy.stats.linregress``, or ``"theil_sen"``,
    ``scipy.stats.theilslopes``) of each interval's maximum LST (K) against the interval centres;
    the wet edge (``wet_edge``) the same fit of the minima (``"fit"``) or horizontal at the lowest
    minimum (``"min"``). Crossing edges are not an error here: :func:`tvdi_index` gives NaN where
    the wet edge is not below the dry edge.

    Raises:
        ToolError: ``tool_error`` — ndvi_min >= ndvi_max or lst_min >= lst_max; ``empty_raster`` —
            fewer than 3 intervals hold ``min_pixels`` valid pixels (names the counts and what to
            relax).
    """
    from scipy.stats import linregress, theilslopes

    if ndvi_min >= ndvi_max or lst_min >= lst_max:
        raise ToolError("tool_error", f"ndvi_min {ndvi_min} / lst_min {lst_min} must be below ndvi_max "
                        f"{ndvi_max} / lst_max {lst_max}; swap or widen them")
    ok = np.isfinite(ndvi) & np.isfinite(lst) & tvdi_valid(ndvi, lst, ndvi_min, ndvi_max, lst_min, lst_max,
                                                           exclude_frozen)
    x, y = ndvi[ok].astype(np.float64), lst[ok].astype(np.float64)
    edges = ndvi_intervals(ndvi_min, ndvi_max, ndvi_step, bins)
    total = edges.size - 1
    idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, total - 1)
    need = auto_min_pixels(x.size) if min_pixels is None else int(min_pixels)
    keep = np.flatnonzero(np.bincount(idx, minlength=total) >= need)
    if keep.size < 3:
        how = f"{bins} bins" if bins else f"NDVI step {ndvi_step:g}"
        raise ToolError("empty_raster", (
            f"min_pixels: only {keep.size} of {total} NDVI intervals ({how} over [{ndvi_min:g}, {ndvi_max:g}]) "
            f"hold >= {need} valid pixels ({x.size} valid pixels with NDVI in range and LST in "
            f"[{lst_min:g}, {lst_max:g}] K); use a lower min_pixels, a larger ndvi_step or fewer bins, "
            "wider ranges or a larger area"))
    order = np.argsort(idx, kind="stable")
    starts = np.searchsorted(idx[order], keep)
    ends = np.searchsorted(idx[order], keep, side="right")
    ys = y[order]
    dry = np.array([ys[s:e].max() for s, e in zip(starts, ends)])
    wet = np.array([ys[s:e].min() for s, e in zip(starts, ends)])
    cx = 0.5 * (edges[keep] + edges[keep + 1])

    def line(v):
        if fit == "theil_sen":
            slope, icpt = theilslopes(v, cx)[:2]
            return float(icpt), float(slope)
        r = linregress(cx, v)
        return float(r.intercept), float(r.slope)

    w = line(wet) if wet_edge == "fit" else (float(wet.min()), 0.0)
    return Edges(line(dry), w, (float(edges[keep[0]]), float(edges[keep[-1] + 1])), int(keep.size), total, need)


def tvdi_index(ndvi: np.ndarray, lst: np.ndarray, e: Edges, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-pixel TVDI = (LST - wet(NDVI)) / (dry(NDVI) - wet(NDVI)) clipped to [0, 1] (0 wet, 1 dry),
    float32, NaN outside ``valid`` and where the edges cross (wet edge >= dry edge at the pixel's
    NDVI: TVDI is undefined there). Returns ``(tvdi, crossed)``, ``crossed`` the boolean mask of the
    valid pixels left NaN for crossing edges."""
    (ad, bd), (aw, bw) = e.dry, e.wet
    with np.errstate(all="ignore"):
        wet = aw + bw * ndvi.astype(np.float64)
        gap = ad + bd * ndvi.astype(np.float64) - wet
        crossed = valid & ~(gap > 0)
        out = np.clip((lst - wet) / gap, 0, 1)
    return np.where(valid & ~crossed, out, np.nan).astype(np.float32), crossed
