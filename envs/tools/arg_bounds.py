"""Bounds on the raw values of a tool call's arguments, checked before anything that recurses or
converts (pydantic validation, JSON encoding, a tool) touches them: each argument value nests
at most :data:`MAX_DEPTH` levels of lists/dicts, an integer has at most :data:`MAX_INT_DIGITS`
digits, a string (or dict key) has at most :data:`MAX_STR_CHARS` characters.

Real calls nest one level (a bbox list, an ``inputs`` dict), use numbers below 1e20 and short
names. The walk is iterative and stops at the first value past a bound, so a 5,000-deep list
costs 33 steps and never a RecursionError.

Standalone (stdlib only): the CodeAct interpreter loads this file by path and checks a call
before sending it to the env; the env checks every call again, whatever its action format.
"""

#: levels of lists/dicts in one argument's value (also the JSON nesting bound of a tool call).
MAX_DEPTH = 32
#: digits of one integer (Python's ``int()``/``str()`` refuse > 4300; real arguments use < 20).
MAX_INT_DIGITS = 100
#: characters of one string: as many as a whole action may have.
MAX_STR_CHARS = 32_000
_INT_LIMIT = 10 ** MAX_INT_DIGITS


def value_problem(value):
    """Why ``value`` (one argument's value) breaks a bound, as ``"<what>; <the fix>"``, or None.

    Lists, tuples and dicts are walked; other types (floats, None, objects) are left to the
    tool's schema.
    """
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (list, tuple, dict)):
            if depth >= MAX_DEPTH:
                return (f"nests more than {MAX_DEPTH} levels of lists/dicts; the deepest allowed "
                        f"is {MAX_DEPTH}: pass a flat value (a string, a number or a short list)")
            items = list(v.keys()) + list(v.values()) if isinstance(v, dict) else list(v)
            stack.extend((x, depth + 1) for x in items)
        elif isinstance(v, int) and not isinstance(v, bool) and not -_INT_LIMIT < v < _INT_LIMIT:
            return (f"holds an integer of more than {MAX_INT_DIGITS} digits; numbers must be "
                    f"below 1e{MAX_INT_DIGITS}: give a float (e.g. 1e30) or a smaller number")
        elif isinstance(v, str) and len(v) > MAX_STR_CHARS:
            return (f"holds a string of {len(v)} characters; the longest allowed is "
                    f"{MAX_STR_CHARS}: pass a name or a short text")
    return None


def argument_problems(arguments):
    """``{argument name: problem}`` (:func:`value_problem`) for each argument of the dict
    ``arguments`` that breaks a bound (an over-long name counts too); ``{"arguments": …}`` when
    ``arguments`` is not a dict."""
    if not isinstance(arguments, dict):
        return {"arguments": f"is a {type(arguments).__name__}; give keyword arguments, e.g. "
                             '{"name": "..."}'}
    out = {}
    for k, v in arguments.items():
        key = str(k)
        if len(key) > MAX_STR_CHARS:
            out[key[:40] + "…"] = (f"is an argument name of {len(key)} characters; use the "
                                   "tool's argument names")
        else:
            problem = value_problem(v)
            if problem is not None:
                out[key] = problem
    return out


def problem_message(tool, problems):
    """One message for :func:`argument_problems`' result: ``"<tool>: argument 'x' <problem>"``
    for the first argument, then how many more broke a bound."""
    key, problem = next(iter(problems.items()))
    more = f" ({len(problems) - 1} more arguments break a bound)" if len(problems) > 1 else ""
    return f"{tool}: argument {key!r} {problem}{more}"


def bounded_record(arguments):
    """``arguments`` as a call record may keep them (logs, rollouts, rewards): unchanged when
    within the bounds, else a copy whose values past a bound are the string ``"<refused>"``
    ({} when ``arguments`` is not a dict), so no later JSON dump recurses into them."""
    problems = argument_problems(arguments)
    if not problems:
        return arguments
    if not isinstance(arguments, dict):
        return {}
    out = {}
    for k, v in arguments.items():
        if len(str(k)) > MAX_STR_CHARS:
            out["<refused>"] = "<refused>"
        else:
            out[k] = "<refused>" if str(k) in problems else v
    return out
