"""Checks on validated tool arguments that a JSON schema cannot express (run before a call;
each failure is an error observation, E=1).

- ``empty_aoi``: an AOI / bounding-box argument (``aoi``, ``bbox``, ``bounds``, ``window``) that is
  empty or has zero area (``[xmin, ymin, xmax, ymax]`` needs xmin < xmax and ymin < ymax).
"""

from __future__ import annotations

AOI_FIELDS = ("aoi", "bbox", "bounds", "window")
_AOI_FIX = "give [xmin, ymin, xmax, ymax] with xmin < xmax and ymin < ymax"


def _empty_box(v) -> bool:
    if v is None:
        return False
    if isinstance(v, dict):
        v = [v.get(k) for k in ("xmin", "ymin", "xmax", "ymax")] if v else []
    if isinstance(v, str):
        return not v.strip()
    if isinstance(v, (list, tuple)):
        if len(v) == 0:
            return True
        if len(v) == 4 and all(isinstance(x, (int, float)) for x in v):
            return not (v[0] < v[2] and v[1] < v[3])
    return False


def argument_problems(arguments: dict) -> list[tuple[str, str]]:
    """``(error_kind, message)`` for each failed check of ``arguments`` (validated values)."""
    return [("empty_aoi", f"argument '{k}' = {arguments[k]!r} is an empty AOI; {_AOI_FIX}")
            for k in AOI_FIELDS if k in arguments and _empty_box(arguments[k])]
