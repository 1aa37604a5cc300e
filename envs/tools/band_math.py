"""Safe evaluator for model-written raster expressions (``band_math``).

Model text is never given to Python's ``eval``: the expression is parsed with :mod:`ast` and only
a whitelist of nodes is interpreted — numbers, names bound by the caller, ``+ - * / **``,
unary ``-``/``+``, comparisons (``< <= > >= == !=``, results as float 0/1; both sides rounded to
float32 first, the precision rasters are stored in, so a value exactly on a decimal threshold
computed in float64 compares equal to it), ``&``/``|`` on such 0/1 arrays, and calls of the
functions in :data:`FUNCTIONS` with their number of arguments. Anything else (attribute access,
subscripts, lambdas, strings, keyword arguments, dunder names, ``__import__``) raises
:class:`UnsafeExpressionError`.

Arithmetic is numpy float64, so nothing the model writes raises a Python ``OverflowError`` or
``ZeroDivisionError``: a pixel that overflows or divides by zero is NaN in the output, and a part
of the expression made of numbers only (such as ``9**9**9`` or ``1/0``) must give a finite number
or the expression is refused.
"""

from __future__ import annotations

import ast
import operator

import numpy as np

FUNCTIONS = {
    "sqrt": np.sqrt, "abs": np.abs, "log": np.log, "log10": np.log10, "exp": np.exp,
    "where": np.where, "minimum": np.minimum, "maximum": np.maximum, "clip": np.clip,
}
#: the arguments each function of :data:`FUNCTIONS` takes (all of them positional and required).
ARITY = {"sqrt": "x", "abs": "x", "log": "x", "log10": "x", "exp": "x",
         "where": "condition, x, y", "minimum": "x, y", "maximum": "x, y", "clip": "x, low, high"}
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow,
           ast.BitAnd: np.logical_and, ast.BitOr: np.logical_or}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne}
MAX_EXPR_CHARS = 300


class UnsafeExpressionError(ValueError):
    """The expression uses syntax or names outside the whitelist (message names what and why)."""


def evaluate(expr: str, names: dict[str, np.ndarray]) -> np.ndarray:
    """Evaluate ``expr`` over ``names`` (variable -> array, all the same shape).

    Args:
        expr: e.g. ``"(n - r) / (n + r)"``; at most 300 characters.
        names: variables the expression may use.

    Arithmetic runs in the inputs' precision (float64 inputs: float64); the result is rounded once.

    Returns:
        float32 array of the common shape (a scalar result is broadcast to it). A pixel that is
        NaN (nodata) in any input is NaN in the output, whatever the expression.

    Raises:
        UnsafeExpressionError: syntax error, disallowed node/function, unknown variable, a
            function called with the wrong number of arguments, a number that is not a finite
            float64, a part made of numbers only that is not finite (overflow, division by zero),
            nesting too deep for the parser.
    """
    if len(expr) > MAX_EXPR_CHARS:
        raise UnsafeExpressionError(f"expression longer than {MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        raise UnsafeExpressionError(f"syntax error in expression: {e.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise UnsafeExpressionError("the expression nests too deep to parse; write it with "
                                    "fewer nested brackets and signs") from None
    nan_mask = None
    for a in names.values():
        m = np.isnan(a)
        nan_mask = m if nan_mask is None else nan_mask | m
    with np.errstate(all="ignore"):
        try:
            out = np.asarray(_Eval(names).visit(tree.body), dtype=np.float64).astype(np.float32)
        except RecursionError:
            raise UnsafeExpressionError("the expression nests too deep; write it with fewer "
                                        "nested brackets and signs") from None
    shape = next(iter(names.values())).shape if names else out.shape
    out = np.broadcast_to(out, shape).astype(np.float32)
    if nan_mask is not None and nan_mask.any():
        out[nan_mask] = np.nan
    return out


class _Eval(ast.NodeVisitor):
    def __init__(self, names: dict[str, np.ndarray]):
        self.names = names

    def generic_visit(self, node):  # anything not whitelisted
        raise UnsafeExpressionError(
            f"'{type(node).__name__}' is not allowed; use numbers, input names, + - * / **, "
            f"comparisons and {', '.join(FUNCTIONS)}")

    def visit(self, node):
        """The value of ``node``; a value computed from numbers only must be finite."""
        value = super().visit(node)
        if np.ndim(value) == 0 and not np.isfinite(value):
            raise UnsafeExpressionError(
                f"{ast.unparse(node)[:60]!r} is not a finite number (overflow, division by zero "
                "or e.g. the root of a negative number); numbers and parts made of numbers only "
                f"must lie within ±{np.finfo(np.float64).max:.3g}")
        return value

    def visit_Constant(self, node):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise UnsafeExpressionError(f"only numeric constants are allowed, got {node.value!r}")
        try:
            return np.float64(node.value)
        except OverflowError:
            raise UnsafeExpressionError(
                f"the number {str(node.value)[:20]}… is too large; numbers must lie within "
                f"±{np.finfo(np.float64).max:.3g}") from None

    def visit_Name(self, node):
        if node.id not in self.names:
            raise UnsafeExpressionError(
                f"unknown name {node.id!r}; define it in inputs (inputs: {', '.join(self.names) or 'none'})")
        return self.names[node.id]

    def visit_BinOp(self, node):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise UnsafeExpressionError(f"operator '{type(node.op).__name__}' is not allowed")
        left, right = self.visit(node.left), self.visit(node.right)
        if op in (np.logical_and, np.logical_or):
            return op(left > 0, right > 0).astype(np.float32)
        return op(left, right)

    def visit_UnaryOp(self, node):
        if isinstance(node.op, ast.USub):
            return -self.visit(node.operand)
        if isinstance(node.op, ast.UAdd):
            return self.visit(node.operand)
        raise UnsafeExpressionError(f"unary '{type(node.op).__name__}' is not allowed")

    def visit_Compare(self, node):
        left = self.visit(node.left)
        result = None
        for op_node, comp in zip(node.ops, node.comparators):
            op = _CMPOPS.get(type(op_node))
            if op is None:
                raise UnsafeExpressionError(f"comparison '{type(op_node).__name__}' is not allowed")
            right = self.visit(comp)
            r = op(np.float32(left) if np.isscalar(left) else np.asarray(left, dtype=np.float32),
                   np.float32(right) if np.isscalar(right) else np.asarray(right, dtype=np.float32))
            result = r if result is None else np.logical_and(result, r)
            left = right
        return np.asarray(result, dtype=np.float32)

    def visit_Call(self, node):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            fname = node.func.id if isinstance(node.func, ast.Name) else type(node.func).__name__
            raise UnsafeExpressionError(
                f"function {fname!r} is not allowed; allowed: {', '.join(FUNCTIONS)}")
        if node.keywords:
            raise UnsafeExpressionError("keyword arguments are not allowed in band_math")
        params = ARITY[node.func.id]
        if len(node.args) != len(params.split(", ")):
            raise UnsafeExpressionError(
                f"{node.func.id}() takes {len(params.split(', '))} argument(s) ({params}), "
                f"got {len(node.args)}")
        args = [self.visit(a) for a in node.args]
        return FUNCTIONS[node.func.id](*args)
