"""Earth-Agent's number and series tools computed in EarthRL (``env.mode=execute``).

Arithmetic on numbers an earlier call returned, moments of a list (``agent/tools/Statistics.py``'s
definitions, commit ae155eab: ``coefficient_of_variation`` std/mean with ``ddof``, ``skewness`` and
``kurtosis`` from the central moments with the ``bias`` correction), and trends of a series:
least-squares slope, the Mann-Kendall test and Sen's slope (Mann 1945, Kendall 1975, Sen 1968;
``pymannkendall``; Wilks, *Statistical Methods in the Atmospheric Sciences*, 4th ed., §5.3.2).
Answers as Earth-Bench's recorded outputs show them (a number; ``[value, index]``;
``mann_kendall_test``: ``[trend, p, z, tau]``).

:data:`EXECUTE` maps tool name -> ``fn(ctx, args) -> ToolResult``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.tools.earthagent_rasters import result
from earthrl.envs.tools.registry import ToolContext, ToolResult

EXECUTE: dict[str, Callable[[ToolContext, object], ToolResult]] = {}


def _tool(name: str):
    def deco(fn):
        EXECUTE[name] = fn
        return fn
    return deco


def _num(value, field: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ToolError("schema_error", f"{field}: give a number, got {value!r}") from None
    return x


def _series(value, field: str = "x", min_len: int = 1) -> np.ndarray:
    """The list ``value`` as float64, ``null`` entries dropped.

    Raises:
        ToolError: not a list of numbers, or fewer than ``min_len`` of them (``empty_series``).
    """
    if not isinstance(value, list):
        raise ToolError("schema_error", f"{field}: give a list of numbers")
    x = np.array([_num(v, field) for v in value if v is not None], dtype=np.float64)
    if x.size < min_len:
        raise ToolError("empty_series", f"{field}: needs at least {min_len} numbers, got {x.size}")
    return x


@_tool("mean")
def mean(ctx: ToolContext, args) -> ToolResult:
    """Arithmetic mean of ``x``."""
    return result(float(np.mean(_series(args.x))))


@_tool("difference")
def difference(ctx: ToolContext, args) -> ToolResult:
    """``|a - b|``."""
    return result(abs(_num(args.a, "a") - _num(args.b, "b")))


@_tool("division")
def division(ctx: ToolContext, args) -> ToolResult:
    """``b / a`` (Earth-Agent's order: the recorded ``division(a=91727487, b=425034.2)`` is 0.004634).

    Raises:
        ToolError: ``a`` is 0.
    """
    if args.a == 0:
        raise ToolError("out_of_range", "a=0: division b / a by zero")
    return result(args.b / args.a)


@_tool("multiply")
def multiply(ctx: ToolContext, args) -> ToolResult:
    """``a · b``."""
    return result(_num(args.a, "a") * _num(args.b, "b"))


@_tool("percentage_change")
def percentage_change(ctx: ToolContext, args) -> ToolResult:
    """``(b - a) / a · 100`` (%).

    Raises:
        ToolError: ``a`` is 0.
    """
    if args.a == 0:
        raise ToolError("out_of_range", "a=0: the percentage change from 0 is undefined")
    return result((args.b - args.a) / args.a * 100.0)


@_tool("kelvin_to_celsius")
def kelvin_to_celsius(ctx: ToolContext, args) -> ToolResult:
    """``kelvin - 273.15`` (°C)."""
    return result(args.kelvin - 273.15)


@_tool("ceil_number")
def ceil_number(ctx: ToolContext, args) -> ToolResult:
    """The smallest integer ≥ ``n``."""
    return result(math.ceil(args.n))


@_tool("max_value_and_index")
def max_value_and_index(ctx: ToolContext, args) -> ToolResult:
    """``[max(x), its 0-based index]`` (first occurrence)."""
    x = _series(args.x)
    return result([float(x.max()), int(np.argmax(x))])


@_tool("min_value_and_index")
def min_value_and_index(ctx: ToolContext, args) -> ToolResult:
    """``[min(x), its 0-based index]`` (first occurrence)."""
    x = _series(args.x)
    return result([float(x.min()), int(np.argmin(x))])


@_tool("argmax")
def argmax(ctx: ToolContext, args) -> ToolResult:
    """0-based index of the maximum of ``x`` (first occurrence)."""
    return result(int(np.argmax(_series(args.x))))


@_tool("get_list_object_via_indexes")
def get_list_object_via_indexes(ctx: ToolContext, args) -> ToolResult:
    """``[input_list[i] for i in indexes]``.

    Raises:
        ToolError: an index outside the list.
    """
    n = len(args.input_list)
    bad = [i for i in args.indexes if not isinstance(i, int) or not -n <= i < n]
    if bad:
        raise ToolError("out_of_range", f"indexes: {bad} outside the list of {n} items")
    return result([args.input_list[i] for i in args.indexes])


@_tool("coefficient_of_variation")
def coefficient_of_variation(ctx: ToolContext, args) -> ToolResult:
    """``std(x, ddof) / mean(x)``; NaN (``null``) when the mean is 0."""
    x = _series(args.x, min_len=args.ddof + 1)
    m = float(np.mean(x))
    return result(float("nan") if m == 0 else float(np.std(x, ddof=args.ddof) / m))


@_tool("skewness")
def skewness(ctx: ToolContext, args) -> ToolResult:
    """``m3 / s³`` with ``s`` the std (ddof 0 with ``bias``, else 1; then ·√(n(n−1))/(n−2)); 0 for a constant list."""
    x = _series(args.x)
    s = float(np.std(x, ddof=0 if args.bias else 1))
    if s == 0:
        return result(0.0)
    g = float(np.mean((x - x.mean()) ** 3) / s ** 3)
    if not args.bias and x.size > 2:
        g *= math.sqrt(x.size * (x.size - 1)) / (x.size - 2)
    return result(g)


@_tool("kurtosis")
def kurtosis(ctx: ToolContext, args) -> ToolResult:
    """``m4 / s⁴`` (minus 3 with ``fisher``), with Earth-Agent's unbiased form when ``bias`` is false; 0 for a
    constant list."""
    x = _series(args.x)
    n = x.size
    s = float(np.std(x, ddof=0 if args.bias else 1))
    if s == 0:
        return result(0.0)
    d = x - x.mean()
    k = float(np.mean(d ** 4) / s ** 4)
    if not args.bias and n > 3:
        k = n * (n + 1) * float(np.sum(d ** 4)) / ((n - 1) * (n - 2) * (n - 3) * s ** 4) \
            - 3 * (n - 1) ** 2 / ((n - 2) * (n - 3))
    return result(k - 3.0 if args.fisher else k)


@_tool("compute_linear_trend")
def compute_linear_trend(ctx: ToolContext, args) -> ToolResult:
    """Least-squares slope of ``y`` over ``x`` (``x`` defaults to 0, 1, …), in units of y per unit of x.

    Raises:
        ToolError: ``y`` missing, fewer than 2 points, or ``x`` of another length.
    """
    if args.y is None:
        raise ToolError("schema_error", "y: give the series values (and x, e.g. the years)")
    y = _series(args.y, "y", 2)
    x = np.arange(y.size, dtype=np.float64) if args.x is None else _series(args.x, "x", 2)
    if x.size != y.size:
        raise ToolError("schema_error", f"x, y: {x.size} and {y.size} values; give one x per y")
    dx = x - x.mean()
    if not np.any(dx):
        raise ToolError("schema_error", "x: all values are equal; the slope is undefined")
    return result(float(np.sum(dx * (y - y.mean())) / np.sum(dx * dx)))  # OLS slope, x centred


@_tool("mann_kendall_test")
def mann_kendall_test(ctx: ToolContext, args) -> ToolResult:
    """Mann-Kendall test of ``x`` (``pymannkendall.original_test``, α = 0.05): ``[trend, p, z, tau]``, trend
    ``increasing``/``decreasing``/``no trend``."""
    import pymannkendall as mk

    r = mk.original_test(_series(args.x, min_len=3))
    return result([r.trend, float(r.p), float(r.z), float(r.Tau)])


@_tool("sens_slope")
def sens_slope(ctx: ToolContext, args) -> ToolResult:
    """Sen's slope of ``x`` per step (median of the pairwise slopes, ``pymannkendall.sens_slope``), as ``[slope]``."""
    import pymannkendall as mk

    return result([float(mk.sens_slope(_series(args.x, min_len=2)).slope)])
