"""Step verifier (HiRS-Agent §3, step verification): each executed call gets a verdict
``"pass"`` | ``"uncertain"`` | ``"fail"`` with reasons, from

1. schema validity / execution: any error observation (E=1) → ``fail`` (reason = error kind and
   message);
2. sub-goal consistency: the tool's HiRS family differs from the routed family → ``fail``; a skill
   is open and the tool is in none of the open skills' tools → ``uncertain``; an order dependency
   of an open skill is broken (:func:`earthrl.envs.core.skills.order_problems`) → ``fail``;
3. physical plausibility of the result (:func:`plausibility`): the values must lie in the range
   of their kind — ``Tool.valid_range`` when the tool sets one, else :data:`UNIT_RANGES` by the
   output's units (spectral indices [-1, 1], reflectance [0, 1.2], LST 180–350 K, fractions
   [0, 1], percentages [0, 100]); more than :data:`OUT_OF_RANGE_FAIL` of the valid pixels outside
   → ``fail``, any outside → ``uncertain``; a share of NaN pixels above ``nan_max`` →
   ``uncertain``, all NaN → ``fail``.

The worst level wins (fail > uncertain > pass). HiRS maps the verdict to R_exec ∈ {1, 0, -1}
in the specialist's tiered reward (rewards/ owns that).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

UNIT_RANGES: dict[str, tuple[float, float]] = {
    "index": (-1.0, 1.0), "reflectance": (0.0, 1.2), "K": (180.0, 350.0), "kelvin": (180.0, 350.0),
    "fraction": (0.0, 1.0), "%": (0.0, 100.0), "percent": (0.0, 100.0),
}
OUT_OF_RANGE_FAIL = 0.01   # share of valid pixels outside the range that makes a step fail
NAN_MAX = 0.5              # NaN share above which a raster is "uncertain"
_LEVEL = {"pass": 0, "uncertain": 1, "fail": 2}
_SCALAR_KEYS = ("mean", "median", "value", "lst", "share_pct", "fraction")


@dataclass
class Verdict:
    """A step verdict: ``verdict`` in ``"pass"|"uncertain"|"fail"``, ``reasons`` (empty on pass)."""

    verdict: str = "pass"
    reasons: list[str] = field(default_factory=list)

    def add(self, level: str, reason: str) -> None:
        """Record ``reason``; the verdict becomes ``level`` if that is worse."""
        self.reasons.append(reason)
        if _LEVEL[level] > _LEVEL[self.verdict]:
            self.verdict = level


def value_range(units: str | None, valid_range: tuple[float, float] | None) -> tuple[float, float] | None:
    """The plausible range: ``valid_range`` if given, else by ``units`` (case-insensitive
    lookup in :data:`UNIT_RANGES`; units starting with ``"K"`` such as ``"K (LST)"`` count as K)."""
    if valid_range is not None:
        return tuple(valid_range)
    if not units:
        return None
    u = units.strip()
    return UNIT_RANGES.get(u) or UNIT_RANGES.get(u.lower()) or UNIT_RANGES.get(u.split()[0])


def plausibility(verdict: Verdict, values: np.ndarray, rng: tuple[float, float] | None,
                 label: str, nan_max: float = NAN_MAX) -> None:
    """Check a raster (any shape, float; NaN = nodata) against ``rng``; adds reasons to
    ``verdict`` (see module doc for the thresholds)."""
    v = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(v)
    if v.size == 0 or not finite.any():
        verdict.add("fail", f"{label}: all pixels are nodata")
        return
    nan_share = 1.0 - finite.mean()
    if nan_share > nan_max:
        verdict.add("uncertain", f"{label}: {100 * nan_share:.0f}% nodata pixels (> {100 * nan_max:.0f}%)")
    if rng is None:
        return
    lo, hi = rng
    x = v[finite]
    out = float(((x < lo - 1e-6) | (x > hi + 1e-6)).mean())
    if out > 0:
        level = "fail" if out > OUT_OF_RANGE_FAIL else "uncertain"
        verdict.add(level, f"{label}: {100 * out:.2g}% of values outside [{lo:g}, {hi:g}] "
                           f"(min {x.min():.4g}, max {x.max():.4g})")


def scalar_plausibility(verdict: Verdict, data: dict, rng: tuple[float, float] | None, label: str,
                        nan_max: float = NAN_MAX) -> None:
    """Check the scalar results in ``data`` (keys ``mean``, ``median``, ``value``, ``lst``,
    ``share_pct``, ``fraction``) against ``rng`` (``share_pct`` always against [0, 100],
    ``fraction`` against [0, 1]) and the NaN share ``nodata_px / (valid_px + nodata_px)``."""
    for key in _SCALAR_KEYS:
        x = data.get(key)
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            continue
        r = {"share_pct": UNIT_RANGES["%"], "fraction": UNIT_RANGES["fraction"]}.get(key, rng)
        if not np.isfinite(x):
            verdict.add("fail", f"{label}: {key} is {x}")
        elif r is not None and not r[0] - 1e-6 <= x <= r[1] + 1e-6:
            verdict.add("fail", f"{label}: {key} {x:.4g} outside [{r[0]:g}, {r[1]:g}]")
    valid, nodata = data.get("valid_px"), data.get("nodata_px")
    if isinstance(valid, int) and isinstance(nodata, int) and valid + nodata > 0:
        share = nodata / (valid + nodata)
        if share > nan_max:
            verdict.add("uncertain", f"{label}: {100 * share:.0f}% nodata pixels (> {100 * nan_max:.0f}%)")


def consistency(verdict: Verdict, tool, routed_family: str | None, open_skill_tools: set[str] | None,
                order: list[str]) -> None:
    """Sub-goal consistency of calling ``tool`` (a :class:`~earthrl.envs.tools.registry.Tool`):
    routed family, open skills' tools, broken order dependencies (see module doc)."""
    if routed_family is not None and tool.family != routed_family:
        verdict.add("fail", f"{tool.name} is a {tool.family} tool, the sub-goal was routed to {routed_family}")
    if open_skill_tools and tool.name not in open_skill_tools and tool.name != "answer":
        verdict.add("uncertain", f"{tool.name} is not a tool of the open skills")
    for reason in order:
        verdict.add("fail", reason)
