"""Skill tree with progressive disclosure (RS-Claw-Evolution §III, "skills → tool catalogue →
tool docs").

Seven skills (shared contract ids). Each names its allowed tools (candidates; only the registered
ones count, plus every tool whose :attr:`Tool.skills` names the skill), order dependencies
(``tool -> tools of which one must have run earlier in the episode``, e.g. index before
threshold, threshold before area) and parameter constraints (``(tool, argument) -> [lo, hi]``,
e.g. an NDVI/NDWI threshold lies in [-1, 1]).

What EarthRL does with them (documented choice):

- order dependencies and the allowed-tool set are checked only for skills the agent has opened
  (:func:`order_problems`, used by the step verifier → verdict ``"fail"``; the call still runs);
- parameter constraints of an opened skill are checked before the call runs: a value outside the
  range is an error observation ``out_of_range`` (E=1) naming the argument and the range;
- the skill actions ``list_skills``, ``open_skill``, ``read_tool_doc`` are env-level actions
  (:mod:`earthrl.envs.core.actions`), callable in every action format.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SKILL_IDS = ("spectral_index", "lst_inversion", "water_flood", "vegetation_drought",
             "change_trend", "land_cover", "cloud_masking")


@dataclass(frozen=True)
class Skill:
    """One skill-tree node.

    Attributes:
        id: one of :data:`SKILL_IDS`.
        description: one line shown by ``list_skills``.
        tools: candidate tool names (unregistered names are ignored).
        order: ``{tool: (earlier, ...)}`` — ``tool`` needs one of ``earlier`` to have run first
            (only the registered ``earlier`` tools count; none registered → no constraint).
        constraints: ``{(tool, argument): (lo, hi)}`` inclusive numeric range.
    """

    id: str
    description: str
    tools: tuple[str, ...]
    order: dict[str, tuple[str, ...]] = field(default_factory=dict)
    constraints: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)


_INDEX = ("spectral_index", "band_math", "ndvi", "ndwi", "mndwi", "ndbi", "evi", "savi", "nbr", "ndsi")
_MASK = ("threshold_mask", "qa_mask", "cloud_mask", "water_mask", "vegetation_mask",
         "change_detection", "kmeans_classify", "random_forest_classify")
_INDEX_RANGE = (-1.0, 1.0)
_TS = ("index_time_series",)

SKILLS: dict[str, Skill] = {s.id: s for s in (
    Skill("spectral_index", "Spectral indices (NDVI, NDWI, ...) of a scene and their statistics.",
          ("list_files", "read_metadata", "radiometric_calibration", *_INDEX, "raster_stats",
           "percentiles", "share_above"),
          order={"raster_stats": _INDEX, "share_above": _INDEX},
          constraints={("share_above", "value"): _INDEX_RANGE}),
    Skill("lst_inversion", "Land surface temperature (K) from thermal bands.",
          ("list_files", "read_metadata", "radiometric_calibration", "ndvi", "spectral_index",
           "land_surface_temperature", "raster_stats", "percentiles"),
          # calibration before index: the emissivity of single-channel LST comes from NDVI
          order={"ndvi": ("radiometric_calibration",), "spectral_index": ("radiometric_calibration",)},
          constraints={("share_above", "value"): (180.0, 350.0)}),
    Skill("water_flood", "Water / flood extent: water index, threshold, area.",
          ("list_files", "read_metadata", "qa_mask", "cloud_mask", "ndwi", "mndwi",
           "spectral_index", "band_math", "water_mask", "threshold_mask", "mask_area",
           "pixel_share", "class_area", "change_detection"),
          order={"threshold_mask": _INDEX, "mask_area": _MASK, "pixel_share": _MASK,
                 "class_area": _MASK},
          constraints={("threshold_mask", "value"): _INDEX_RANGE}),
    Skill("vegetation_drought", "Vegetation vigour and dryness (NDVI, FVC, TVDI).",
          ("list_files", "read_metadata", "ndvi", "evi", "savi", "spectral_index", "band_math",
           "fvc", "land_surface_temperature", "tvdi", "threshold_mask", "vegetation_mask",
           "pixel_share", "raster_stats"),
          order={"threshold_mask": _INDEX, "pixel_share": _MASK, "fvc": _INDEX,
                 "tvdi": ("land_surface_temperature",)},
          constraints={("threshold_mask", "value"): _INDEX_RANGE}),
    Skill("change_trend", "Change between dates and trends over a time series.",
          ("list_files", "read_metadata", *_INDEX, "raster_difference", "percent_change",
           "change_detection", "raster_stats", "index_time_series", "linear_trend",
           "mann_kendall", "stl_decompose", "change_points"),
          order={"raster_difference": _INDEX, "linear_trend": _TS, "mann_kendall": _TS,
                 "stl_decompose": _TS, "change_points": _TS},
          constraints={("mann_kendall", "alpha"): (0.001, 0.2)}),
    Skill("land_cover", "Land-cover classes and their shares.",
          ("list_files", "read_metadata", "ndvi", "ndbi", "ndwi", "spectral_index",
           "kmeans_classify", "random_forest_classify", "slic_segments", "threshold_mask",
           "class_area", "pixel_share", "mask_area"),
          order={"class_area": _MASK, "pixel_share": _MASK, "mask_area": _MASK}),
    Skill("cloud_masking", "Cloud / shadow masks from QA bands and clear-sky shares.",
          ("list_files", "read_metadata", "qa_mask", "cloud_mask", "pixel_share", "mask_area"),
          order={"pixel_share": ("qa_mask", "cloud_mask"), "mask_area": ("qa_mask", "cloud_mask")}),
)}


def skill_tools(skill_id: str, tools: dict) -> list[str]:
    """Registered tools of skill ``skill_id``: its candidates present in ``tools`` (name -> Tool),
    then every other tool of EarthRL's own surface whose ``skills`` metadata names the skill
    (Earth-Agent's tools, surface ``earthagent``, are shown by ``env.toolset=earthbench`` only).

    Raises:
        KeyError: unknown skill (names the seven ids).
    """
    if skill_id not in SKILLS:
        raise KeyError(f"unknown skill {skill_id!r}; skills: {', '.join(SKILL_IDS)}")
    names = [t for t in SKILLS[skill_id].tools if t in tools]
    return names + [n for n, t in tools.items()
                    if skill_id in t.skills and n not in names and t.surface == "earthrl"]


def order_problems(tool: str, done_tools: list[str], open_skills: list[str], tools: dict) -> list[str]:
    """Order dependencies of the opened skills that calling ``tool`` now breaks.

    Args:
        tool: the tool being called; done_tools: tools that ran without error earlier;
        open_skills: skill ids opened so far; tools: the registry (name -> Tool).

    Returns:
        one reason per broken dependency, e.g.
        ``"skill water_flood: threshold_mask needs one of spectral_index, band_math first"``.
    """
    out = []
    for sid in open_skills:
        need = [t for t in SKILLS[sid].order.get(tool, ()) if t in tools]
        if need and not any(t in done_tools for t in need):
            out.append(f"skill {sid}: {tool} needs one of {', '.join(need)} first")
    return out


def constraint_problems(tool: str, arguments: dict, open_skills: list[str]) -> list[str]:
    """Parameter constraints of the opened skills that ``arguments`` break, one message each,
    naming the argument, its value and the allowed range."""
    out = []
    for sid in open_skills:
        for (t, arg), (lo, hi) in SKILLS[sid].constraints.items():
            v = arguments.get(arg)
            if t == tool and isinstance(v, (int, float)) and not lo <= v <= hi:
                out.append(f"argument '{arg}' = {v:g} is outside [{lo:g}, {hi:g}] "
                           f"(skill {sid}); give a value in that range")
    return out
