"""Independent re-derivation of threshold answers for ``earthrl audit`` (earthrl-mini share and
area tasks: ``[spectral_index] -> threshold_mask -> pixel_share | mask_area``, and
``water_mask | vegetation_mask -> pixel_share | mask_area``).

The value is recomputed from the raw DN of the scene files with numpy in float64 and this
module's own formulas, not through the tools: a normalized difference (a − b)/(a + b) of two
bands (the DN scale cancels), AWEInsh = 4·(G − S1) − (0.25·N + 2.75·S2) (Feyisa et al. 2014,
RSE 140:23) and a band's reflectance DN / 10000. Every term before the last division is a sum
of integer DN multiples of 1/4, exact in float64, so the value is the float64 nearest its exact
value, and rounding to nearest is monotone: comparing it with the float64 threshold gives the
exact comparison, a pixel exactly on the threshold counting as equal (in for ``>=``, out for
``>``). Fill: DN 0 for Sentinel-2 and the file's nodata; 20 m bands are repeated 2 × 2 onto the
10 m grid. Area: pixel count weighted by the true area of each cell, nominal cell area divided by
the projection's areal scale factor at the cell centre (``pyproj.Proj.get_factors``).
"""

from __future__ import annotations

import operator
from pathlib import Path

import numpy as np

#: index -> (a, b) of the normalized difference (a − b)/(a + b), spyndex band symbols.
NORMALIZED_DIFFERENCES = {
    "NDVI": ("N", "R"),    # Rouse et al. 1974
    "NDWI": ("G", "N"),    # McFeeters 1996
    "MNDWI": ("G", "S1"),  # Xu 2006
    "NDBI": ("S1", "N"),   # Zha et al. 2003
    "NDSI": ("G", "S1"),   # Hall et al. 1995
    "NDMI": ("N", "S1"),   # Gao 1996
}
#: sensor -> spyndex symbol -> band name of the sample data (Sentinel-2 L1C, Landsat 5/7 lsts).
BANDS = {"sentinel-2": {"G": "B03", "R": "B04", "N": "B08", "S1": "B11", "S2": "B12"},
         "landsat-5": {"R": "b3", "N": "b4", "S1": "b5"},
         "landsat-7": {"R": "b3", "N": "b4", "S1": "b5"}}
#: mask tools that threshold an index themselves: tool -> (default index, default threshold).
_MASK_TOOLS = {"water_mask": ("NDWI", 0.0), "vegetation_mask": ("NDVI", 0.3)}
_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
        "==": operator.eq, "!=": operator.ne}


class _Grid:
    """Raw DN of one scene's bands on the finest grid (float64, fill -> NaN)."""

    def __init__(self, scene):
        self.scene, self.crs, self.transform, self.shape = scene, None, None, None

    def dn(self, band: str) -> np.ndarray:
        import rasterio

        with rasterio.open(Path(self.scene.bands[band])) as src:
            a = src.read(1).astype(np.float64)
            bad = a == src.nodata if src.nodata is not None else np.zeros(a.shape, bool)
            if self.scene.sensor == "sentinel-2":
                bad |= a == 0
            a[bad] = np.nan
            if self.shape is None or a.size > np.prod(self.shape):
                self.crs, self.transform, self.shape = src.crs, src.transform, a.shape
        return a

    def bands(self, symbols: list[str]) -> list[np.ndarray]:
        arrs = [self.dn(BANDS[self.scene.sensor][s]) for s in symbols]
        rows = max(a.shape[0] for a in arrs)
        return [np.repeat(np.repeat(a, rows // a.shape[0], 0), rows // a.shape[0], 1) for a in arrs]

    def cell_areas_m2(self) -> np.ndarray:
        from pyproj import CRS, Proj

        rows, cols = self.shape
        t = self.transform
        x = t.c + t.a * (np.arange(cols) + 0.5)
        y = t.f + t.e * (np.arange(rows) + 0.5)
        xx, yy = np.meshgrid(x, y)
        crs = CRS.from_user_input(self.crs)
        proj = Proj(crs)
        lon, lat = proj(xx, yy, inverse=True)
        nominal = abs(t.a * t.e)
        return nominal / proj.get_factors(lon, lat).areal_scale


def index_values(scene, index: str) -> tuple[np.ndarray, _Grid] | None:
    """float64 ``index`` of ``scene`` from the raw DN (module docstring), or None when this
    module has no formula for it (or the sensor lacks a band)."""
    g = _Grid(scene)
    name = index.upper()
    with np.errstate(all="ignore"):
        if name in NORMALIZED_DIFFERENCES:
            syms = NORMALIZED_DIFFERENCES[name]
            if not all(s in BANDS.get(scene.sensor, {}) for s in syms):
                return None
            a, b = g.bands(list(syms))
            return (a - b) / (a + b), g
        if name == "AWEINSH" and scene.sensor == "sentinel-2":
            gr, s1, n, s2 = g.bands(["G", "S1", "N", "S2"])
            return (4 * (gr - s1) - (0.25 * n + 2.75 * s2)) / 1e4, g
    return None


def threshold_value(task, scenes: dict) -> float | None:
    """The answer of a threshold task re-derived in float64 (share in % of valid pixels, or area
    in the task's unit), unrounded; None when ``task``'s reference is not
    ``[spectral_index] -> threshold_mask -> pixel_share | mask_area`` on a scene this module
    can compute.

    Args:
        scenes: scene id -> :class:`~earthrl.envs.data.scene.Scene` (the data files).
    """
    calls = [c.model_dump() if hasattr(c, "model_dump") else c for c in task.reference]
    names = [c["name"] for c in calls]
    if len(calls) == 2 and names[0] in _MASK_TOOLS and names[1] in ("pixel_share", "mask_area"):
        a = calls[0]["arguments"]  # water_mask / vegetation_mask: index > threshold
        index, default = _MASK_TOOLS[names[0]]
        calls = [{"name": "spectral_index", "arguments": {"scene": a["scene"], "index": a.get("index", index)}},
                 {"name": "threshold_mask", "arguments": {"op": ">", "value": a.get("threshold", default)}},
                 calls[1]]
        names = [c["name"] for c in calls]
    if names[-2:-1] != ["threshold_mask"] or names[-1] not in ("pixel_share", "mask_area") or len(calls) > 3:
        return None
    thr = calls[-2]["arguments"]
    if len(calls) == 3:
        if names[0] != "spectral_index" or calls[0]["arguments"].get("constants"):
            return None
        scene = scenes.get(calls[0]["arguments"]["scene"])
        got = scene and index_values(scene, calls[0]["arguments"]["index"])
    else:
        sid, _, band = str(thr["name"]).partition(":")
        scene = scenes.get(sid)
        if scene is None or band not in scene.bands or scene.sensor not in BANDS:
            return None
        g = _Grid(scene)
        got = g.dn(band) / 1e4, g
    if not got:
        return None
    v, grid = got
    valid = np.isfinite(v)
    with np.errstate(invalid="ignore"):
        hit = _OPS[thr.get("op", ">")](v, float(thr["value"])) & valid
    if names[-1] == "pixel_share":
        return 100.0 * hit.sum() / valid.sum() if valid.any() else None
    area = float(grid.cell_areas_m2()[hit].sum())
    return area / (1e6 if calls[-1]["arguments"].get("unit", "km2") == "km2" else 1.0)
