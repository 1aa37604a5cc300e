"""Earth-Bench's per-episode tool-call metrics.

Definitions follow Earth-Agent's evaluation code (opendatalab/Earth-Agent, step-by-step and
end-to-end evaluation scripts; Earth-Agent paper §4, "Tool-Any-Order, Tool-In-Order,
Tool-Exact-Match, Parameter, Efficiency, Accuracy") and reproduce its score files to the last
digit (tests/rewards/test_metrics_earthbench.py). Each function compares the predicted calls of
one episode with the reference calls of its task; both are lists of ``{"name", "arguments"}``
dicts. Names are compared as exact strings, arguments as whole dicts (``==``: same keys, equal
values, list order significant).

Behaviour on an empty reference is Earth-Agent's: Any-Order, In-Order and Parameter score 1.0,
Exact-Match 0.0, Efficiency 1.0 if the prediction is empty too, else +inf. Earth-Bench has no
task with an empty reference.
"""

from __future__ import annotations

from collections.abc import Sequence


def _names(calls: Sequence[dict]) -> list[str]:
    return [c.get("name", "") for c in calls]


def tool_any_order(pred: Sequence[dict], ref: Sequence[dict]) -> float:
    """Tool-Any-Order: share of the *distinct* reference tool names that the prediction used.

    ``|set(ref names) ∩ set(pred names)| / |set(ref names)|`` ∈ [0, 1]; repeats and order
    do not matter (Earth-Agent ``contains_all_tool_calls_any_order``).
    """
    expected = set(_names(ref))
    if not expected:
        return 1.0
    return len(expected & set(_names(pred))) / len(expected)


def tool_in_order(pred: Sequence[dict], ref: Sequence[dict]) -> float:
    """Tool-In-Order: greedy in-order match count / reference length.

    Walk the reference; for each reference name consume predicted names until an equal one is
    found (other calls in between are allowed); stop at the first reference name that is not
    found in the rest of the prediction. Score = matched / len(ref)
    (Earth-Agent ``contains_all_tool_calls_in_order``).
    """
    expected = _names(ref)
    if not expected:
        return 1.0
    actual = iter(_names(pred))
    matched = 0
    for name in expected:
        if any(a == name for a in actual):
            matched += 1
        else:
            break
    return matched / len(expected)


def tool_exact_match(pred: Sequence[dict], ref: Sequence[dict]) -> float:
    """Tool-Exact-Match: longest common prefix of the name sequences / reference length.

    Position i counts only if names agree at every position up to i
    (Earth-Agent ``trajectory_step_wise_score``). Empty reference → 0.0 (Earth-Agent).
    """
    expected, actual = _names(ref), _names(pred)
    if not expected:
        return 0.0
    return _prefix(expected, actual) / len(expected)


def parameter_match(pred: Sequence[dict], ref: Sequence[dict]) -> float:
    """Parameter: prefix steps whose name *and* whole argument dict match / reference length.

    Like Tool-Exact-Match but a step matches only when ``name`` and ``arguments`` are both
    equal (Earth-Agent ``check_parameter_accuracy``, "soft scoring step by step").
    """
    if not ref:
        return 1.0
    key = [(c.get("name"), c.get("arguments")) for c in ref]
    got = [(c.get("name"), c.get("arguments")) for c in pred]
    return _prefix(key, got) / len(ref)


def efficiency(pred: Sequence[dict], ref: Sequence[dict]) -> float:
    """Efficiency: predicted calls / reference calls (lower is better; 1 = as many as the reference).

    Earth-Agent ``calculate_efficiency_with_tool_calls``: an episode with no calls scores 0.0;
    an empty reference gives 1.0 (no predicted calls) or +inf.
    """
    if not ref:
        return 1.0 if not pred else float("inf")
    return len(pred) / len(ref)


def _prefix(a: Sequence, b: Sequence) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


#: The Earth-Bench process metrics by their published names.
EARTHBENCH_STEP_METRICS = {
    "tool_any_order": tool_any_order,
    "tool_in_order": tool_in_order,
    "tool_exact_match": tool_exact_match,
    "parameter": parameter_match,
}
