"""Tool registry: metadata, argument models and OpenAI function schemas.

Each tool is a plain function ``fn(ctx: ToolContext, args: ArgsModel) -> ToolResult`` with a
pydantic argument model (→ JSON Schema, OpenAI function format) and the metadata EarthRL's rewards
and skill tree use: SimCRAFT domain (one of :data:`DOMAINS`), HiRS specialist family
(:data:`FAMILIES`: SPA surface parsing, PRA physical retrieval, SAA statistical analytics),
skills (:data:`SKILLS`), accepted sensors, valid value range and output kind
(:data:`OUTPUT_KINDS`). The real tools live in :mod:`earthrl.envs.tools.mini_toolset` (the eleven tools of
``earthrl-mini``) and the family modules (``preprocess``, ``physics``, ``timeseries``, ``interpret``,
``stats``, ``vector``, ``viz``); :data:`TOOLS` imports them on its first read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from earthrl.envs.data.artifacts import KINDS, ArtifactRegistry
from earthrl.envs.registry import Registry

DOMAINS = ("Data & Preprocessing", "AI Interpretation", "Spatio-Temporal Analysis",
           "Physical & GIS Analytics", "Visualization")
FAMILIES = ("SPA", "PRA", "SAA")
#: the seven skill ids (shared contract of the skill tree, rewards and task suites).
SKILLS = ("spectral_index", "lst_inversion", "water_flood", "vegetation_drought", "change_trend",
          "land_cover", "cloud_masking")
#: what a tool returns: an artifact kind (:data:`earthrl.envs.data.artifacts.KINDS`) or a direct value.
OUTPUT_KINDS = ("raster", "mask", "classes", "segments", "series", "table", "vector", "image",
                "number", "metadata", "catalogue", "answer")


class Args(BaseModel):
    """Base of tool argument models: unknown arguments are a schema error, and so is a float
    argument that is NaN or ±inf (pydantic's "Input should be a finite number")."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


@dataclass
class ToolContext:
    """What a tool may touch: the episode's artifact registry and the call being run.

    Attributes:
        registry: scenes of the task and artifacts of the episode.
        call: ``{"name", "arguments"}`` of the running call (recorded as lineage).
        folder: the task's data folder for tools that read files by path (Earth-Bench's
            ``data/questionN``, :mod:`earthrl.envs.tools.earthagent_files`); None for scene-addressed tasks.
    """

    registry: ArtifactRegistry
    call: dict
    folder: Path | None = None


@dataclass
class ToolResult:
    """What a tool returns.

    Attributes:
        text: the observation shown to the agent (the env truncates it).
        data: structured result (numbers at full precision, artifact names) for verifiers,
            rewards and suite building.
        artifact: name of the artifact written, if any.
    """

    text: str
    data: dict = field(default_factory=dict)
    artifact: str | None = None


@dataclass(frozen=True)
class Tool:
    """A registered tool.

    Attributes:
        name: what the agent calls; fn: ``fn(ctx, args) -> ToolResult``.
        args_model: pydantic model of the arguments (``extra="forbid"``).
        description: one short sentence for the prompt.
        domain: one of SimCRAFT's five :data:`DOMAINS`; family: HiRS ``"SPA"|"PRA"|"SAA"``.
        skills: skill-tree nodes it belongs to; sensors: sensors it accepts (``"any"`` for all).
        output_kind: one of :data:`OUTPUT_KINDS`; valid_range: plausible output range for the verifier, or None.
        surface: whose tool surface it belongs to: ``"earthrl"`` (EarthRL's own tools, the ``all`` and
            ``skills`` toolsets) or ``"earthagent"`` (Earth-Agent's tools that Earth-Bench's references
            call, :mod:`earthrl.envs.tools.earthagent`, the ``earthbench`` toolset) or ``"thinkgeo"``
            (ThinkGeo's tools, :mod:`earthrl.envs.tools.thinkgeo_tools`, the ``thinkgeo`` toolset).
        output_name: ``output_name(ctx, args) -> str``, the name of the artifact the tool writes,
            derived from the validated arguments and the episode's registry without reading
            pixels; the tool's own code names its output with it and the mock engine
            (:mod:`earthrl.envs.core.mock`) registers its placeholder under it, so a workflow
            replays in mock mode with the names execute mode gives. None for tools that write no
            artifact and for Earth-Agent's tools (their output is the call's ``output_path``).
    """

    name: str
    fn: Callable[[ToolContext, Any], ToolResult]
    args_model: type[BaseModel]
    description: str
    domain: str
    family: str
    skills: tuple[str, ...]
    sensors: tuple[str, ...]
    output_kind: str
    valid_range: tuple[float, float] | None = None
    surface: str = "earthrl"
    output_name: Callable[[ToolContext, Any], str] | None = None


#: the surfaces a tool can belong to (:attr:`Tool.surface`).
SURFACES = ("earthrl", "earthagent", "thinkgeo")
#: the tool modules, in prompt order; importing one registers its tools.
TOOL_MODULES = tuple(f"earthrl.envs.tools.{m}" for m in (
    "mini_toolset", "preprocess", "physics", "timeseries", "interpret", "stats", "vector", "viz", "earthagent", "thinkgeo_tools"))
TOOLS: Registry = Registry("tool", TOOL_MODULES)


def register_tool(name: str, *, args: type[BaseModel], description: str, domain: str, family: str,
                  skills: list[str] | tuple[str, ...], output_kind: str,
                  sensors: list[str] | tuple[str, ...] = ("any",),
                  valid_range: tuple[float, float] | None = None, replace: bool = False,
                  surface: str = "earthrl", output_name: Callable[[ToolContext, Any], str] | None = None):
    """Decorator registering ``fn`` as tool ``name`` in :data:`TOOLS`.

    ``output_name`` (see :attr:`Tool.output_name`) is required for an EarthRL tool whose output kind is an
    artifact kind (:data:`~earthrl.envs.data.artifacts.KINDS`).

    Raises:
        ValueError: ``name`` is already registered (pass ``replace=True`` to override on
            purpose), or ``domain``/``family``/a skill/``output_kind`` is not one of
            :data:`DOMAINS`/:data:`FAMILIES`/:data:`SKILLS`/:data:`OUTPUT_KINDS`, or ``surface`` is
            not one of :data:`SURFACES`, or an EarthRL tool writing an artifact has no ``output_name``.
    """
    bad = [s for s in skills if s not in SKILLS]
    if bad or not skills:
        raise ValueError(f"tool {name!r}: skills {bad or '[]'} not among {SKILLS}")
    if output_kind not in OUTPUT_KINDS:
        raise ValueError(f"tool {name!r}: output_kind {output_kind!r} not in {OUTPUT_KINDS}")
    if domain not in DOMAINS:
        raise ValueError(f"tool {name!r}: domain {domain!r} not in {DOMAINS}")
    if family not in FAMILIES:
        raise ValueError(f"tool {name!r}: family {family!r} not in {FAMILIES}")
    if surface not in SURFACES:
        raise ValueError(f"tool {name!r}: surface {surface!r} not in {SURFACES}")
    if surface == "earthrl" and output_kind in KINDS and output_name is None:
        raise ValueError(f"tool {name!r} writes a {output_kind} artifact: give output_name=fn(ctx, args) -> name")

    def deco(fn):
        TOOLS.add(name, Tool(name, fn, args, description, domain, family, tuple(skills),
                             tuple(sensors), output_kind, valid_range, surface, output_name), replace=replace)
        return fn

    return deco


def _compact(schema: Any) -> Any:
    """Drop titles, collapse ``anyOf`` of plain types and ``X | None`` to a type list."""
    if isinstance(schema, list):
        return [_compact(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _compact(v) for k, v in schema.items() if k != "title"}
    if "anyOf" in out:
        opts = [o for o in out["anyOf"] if o != {"type": "null"}]
        if all(set(o) == {"type"} for o in opts):
            out.pop("anyOf")
            types = [o["type"] for o in opts]
            out["type"] = types[0] if len(types) == 1 else types
        if out.get("default", 0) is None:
            out.pop("default")
    return out


def openai_schema(tool: Tool) -> dict:
    """OpenAI function schema of ``tool``:
    ``{"type": "function", "function": {"name", "description", "parameters"}}`` with the
    pydantic JSON schema compacted (no titles, ``anyOf`` of plain types as a type list)."""
    params = _compact(tool.args_model.model_json_schema())
    params.pop("additionalProperties", None)
    params.pop("description", None)
    params.setdefault("properties", {})
    return {"type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": params}}
