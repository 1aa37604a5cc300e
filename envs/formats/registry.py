"""Action formats: how a model's turn becomes tool calls, in a registry.

- ``json``: one hermes call per turn, ``<tool_call>{"name", "arguments"}</tool_call>``
  (:mod:`earthrl.envs.formats.parsers`; further calls in the same turn are ignored and reported);
- ``codeact``: a fenced Python block run in the episode's persistent sandboxed interpreter with the
  tools bound as functions; only what the code prints comes back (RS-Claw-Evolution §III);
  needs :mod:`earthrl.envs.formats.codeact`;
- ``hierarchical``: HiRS-Agent manager / specialist turns (:mod:`earthrl.envs.formats.hierarchical`).

A format is a class registered with :func:`register_format`; the env makes one per episode host
(``make_format(name, env, **options)``) and calls ``system_prompt()``, ``reset()``, ``step(text)
-> StepResult`` and ``close()``. Every call it makes goes through :meth:`RSEnv.call`, which
records E(a_t, o_t) and the verdict for the turn.
"""

from __future__ import annotations

import importlib

from earthrl.envs.formats.parsers import ActionError, count_calls_after_first, extract_call
from earthrl.envs.formats.prompts import system_prompt
from earthrl.envs.registry import Registry

FORMATS: Registry = Registry("action format", ("earthrl.envs.formats.hierarchical",))


class FormatUnavailable(RuntimeError):
    """A registered format whose backend is missing (e.g. codeact without its sandbox)."""


def register_format(name: str):
    """Class decorator registering an action format under ``name``.

    Raises:
        ValueError: ``name`` is already registered.
    """

    def deco(cls):
        FORMATS.add(name, cls)
        cls.name = name
        return cls

    return deco


def available_formats() -> list[str]:
    """Registered format names (built-ins imported)."""
    return FORMATS.names()


def make_format(name: str, env, **options):
    """An instance of format ``name`` bound to ``env``.

    Raises:
        ValueError: unknown format (lists the registered ones).
        FormatUnavailable: the format's backend is not installed.
    """
    if name not in FORMATS:
        raise ValueError(f"action_format {name!r} is unknown; formats: {', '.join(FORMATS.names())}")
    return FORMATS[name](env, **options)


class ActionFormat:
    """Base of action formats. Subclasses implement :meth:`step` and :meth:`system_prompt`."""

    name = ""

    def __init__(self, env, **options):
        self.env = env
        self.options = options

    def system_prompt(self) -> str:
        """The system prompt (role, tools, how to act)."""
        raise NotImplementedError

    def reset(self) -> None:
        """Start of an episode (the env's registry and workspace are fresh)."""

    def step(self, text: str):
        """Parse and run one assistant turn; returns a :class:`~earthrl.envs.core.env.StepResult`."""
        raise NotImplementedError

    def close(self) -> None:
        """End of the env: free the format's resources."""


def run_hermes_call(env, text: str, *, family: str | None = None, **extra):
    """Parse the first hermes tool call of ``text`` and run it through ``env.call``.

    Returns:
        (StepResult, CallOutcome or None) — a parse error gives ``(error result, None)``.
    """
    try:
        call = extract_call(text)
    except ActionError as e:
        return env.error_result(e.kind, e.message, **extra), None
    out = env.call(call["name"], call["arguments"], family=family)
    return env.result_from([out], **extra), out


@register_format("json")
class JsonFormat(ActionFormat):
    """One hermes ``<tool_call>`` per turn; only the first call of a turn runs."""

    def system_prompt(self) -> str:
        return system_prompt(self.env.tool_schemas())

    def step(self, text: str):
        res, out = run_hermes_call(self.env, text)
        ignored = count_calls_after_first(text) if out is not None else 0
        if ignored and not res.error and not res.done:
            res.observation = self.env.truncate(
                f"Only the first tool call of a turn runs; {ignored} more ignored "
                f"(write one call per turn).\n{out.text}")
        return res


@register_format("codeact")
class CodeActFormat(ActionFormat):
    """CodeAct (RS-Claw-Evolution §III): the turn's fenced Python block runs in the episode's
    persistent sandbox (:class:`earthrl.envs.formats.codeact.CodeActSession`); tools are functions whose
    calls go through :meth:`RSEnv.tool_handler`. Observation: what the code printed, plus
    ``Error (<kind>): <message>`` when it raised (``ExecResult.observation``). E=1 when the code
    raised, the sandbox stopped it, or a tool call in it failed (even one the code caught); the
    turn's ``tool_calls`` are the env's records of the calls (validated arguments), its verdict
    the worst of theirs. Every tool and skill action is bound; the env refuses the ones the
    toolset does not allow. Options: ``limits`` (keyword arguments of ``SandboxLimits``),
    ``sandbox`` (:class:`~earthrl.envs.sandbox.parent.SandboxSettings`, config
    ``env.format_options.sandbox``; absent: bubblewrap or nothing), handed to every episode's
    sandbox, which refuses (:class:`~earthrl.envs.sandbox.parent.SandboxUnavailable`, one line
    naming the fix) where bubblewrap cannot run and no weaker backend is allowed — the launcher
    asks the same question before anything starts.

    Raises:
        FormatUnavailable: :mod:`earthrl.envs.formats.codeact` is not importable.
    """

    def __init__(self, env, **options):
        super().__init__(env, **options)
        try:
            self._codeact = importlib.import_module("earthrl.envs.formats.codeact")
            self._sandbox = importlib.import_module("earthrl.envs.sandbox.parent")
        except ImportError as e:
            raise FormatUnavailable(f"action_format codeact needs earthrl.envs.formats.codeact and "
                                    f"earthrl.envs.sandbox.parent ({e})") from None
        sandbox = self.options.get("sandbox")
        self.allow_weaker = bool(sandbox.allow_weaker) if sandbox is not None else False
        self.session = None
        self._outs: list = []

    def system_prompt(self) -> str:
        return self._codeact.codeact_system_prompt(self.env.tool_schemas())

    def _handler(self, name: str, kwargs: dict) -> dict:
        out = self.env.call(name, kwargs)
        self._outs.append(out)
        return out.handler_reply()

    def reset(self) -> None:
        self.close()
        limits = self._sandbox.SandboxLimits(**self.options.get("limits", {}))
        self.session = self._codeact.CodeActSession(
            self.env.workspace, self._handler, limits, self.env.max_obs_chars,
            tools={**self.env.tools, **self.env.env_actions}, read_roots=(self.env.data_root,),
            allow_weaker=self.allow_weaker)

    def step(self, text: str):
        self._outs = []
        r = self.session.run(text)
        text = r.observation
        if not r.stdout and not r.error and self._outs and self._outs[-1].answer is not None:
            text = self._outs[-1].text  # "answer recorded: …" rather than "(no output …)"
        res = self.env.result_from(self._outs, text=text)
        if r.error and not res.error:  # the code itself raised, or the sandbox stopped it
            res.error, res.error_kind, res.verdict = True, r.error_kind, "fail"
            res.verdict_reasons.append(f"{r.error_kind}: {str(r.message)[:160]}")
        return res

    def sandbox_record(self) -> dict:
        """``{"violations": counted by the parent, "usage": {"execs", "wall_s", "cpu_s",
        "tool_calls"}, "isolation": layers}`` of the episode's sandbox ({} before reset)."""
        if self.session is None:
            return {}
        sb = self.session.sandbox
        return {"violations": sb.violations, "usage": dict(sb.usage), "isolation": sb.isolation}

    def close(self) -> None:
        if self.session is not None and hasattr(self.session, "close"):
            self.session.close()
        self.session = None
