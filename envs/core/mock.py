"""Mock execution (SimCRAFT §3, Mock Execution Engine) and recoverable error injection.

``mode: mock`` runs no pixel computation. A call is accepted when

1. its arguments pass the tool's pydantic model (done by the env before this module runs);
2. every argument that names data resolves in the episode's artifact registry (registered-path
   dependencies): a task scene, ``scene:band`` with a band the scene has, or an artifact made by an
   earlier (mock) call — otherwise ``hallucinated_path``;
3. the sensors of the scenes/artifacts it reads are among ``Tool.sensors`` (``"any"`` accepts
   all) — otherwise ``sensor_mismatch``.

A tool that writes an artifact (output kind in :data:`~earthrl.envs.data.artifacts.KINDS`: raster,
mask, classes, series, vector ...) registers a placeholder artifact (no file, ``units="mock"``) with
its lineage (parents + call), so later calls can depend on it. Its name is the one execute mode
gives, derived by the same function: the tool's
:attr:`~earthrl.envs.tools.registry.Tool.output_name` (``spectral_index(scene="S2_X", index="ndvi")``
-> ``ndvi_S2_X``, ``threshold_mask(name="ndvi_S2_X", op=">", value=0.3)`` -> ``ndvi_S2_X_gt0.3``),
which the tool's own code names its file with; it reads the registry (scene ids, band spellings,
artifact names) and the arguments, never pixels. So a workflow that runs in execute mode replays
in mock mode without a ``hallucinated_path``. A tool without that rule (Earth-Agent's, answered
only in replay mode) takes the call's output argument (``output_path``, ``output``, ...; the file
stem), or ``<tool>_<sha1(call)[:8]>`` when the call names none.
Catalogue tools (``list_files``) and ``answer`` run for real (they touch no pixels).

Which arguments name data: fields whose pydantic ``json_schema_extra`` has ``{"artifact":
"input"}`` (or ``"output"``), else by name (:data:`INPUT_FIELDS`, ``*_path``, ``*_paths``,
``*_list`` minus :data:`OUTPUT_FIELDS`).

:class:`ErrorInjector` (any mode) makes a call fail before it runs with a recoverable error
(``CloudCoverExceeded``, ``NoDataInAOI``, ``TransientIOError``) at rate ``rate`` from a seeded
generator: error kind ``injected_error``, the message starts with the exception name and says to
retry; the same call succeeds on a later try unless injected again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from earthrl.envs.data.artifacts import _EXTS, KINDS, Artifact, ArtifactRegistry, HallucinatedPathError, ToolError
from earthrl.envs.tools.registry import Tool, ToolContext, ToolResult

INPUT_FIELDS = {"scene", "scenes", "name", "names", "a", "b", "inputs", "image", "images", "raster",
                "rasters", "mask", "file", "files", "path", "paths", "file_list", "image_paths",
                "ndvi", "lst", "values", "zones", "series", "before", "after", "vector",
                "overlay", "samples"}
OUTPUT_FIELDS = {"output", "out", "output_name", "output_path", "output_filename", "save_name",
                 "output_path_list", "output_paths", "out_name"}
PASSTHROUGH_KINDS = ("catalogue", "answer")

INJECTABLE: dict[str, str] = {
    "CloudCoverExceeded": "cloud cover over the AOI exceeds the limit for this acquisition",
    "NoDataInAOI": "the AOI holds no valid pixels in this read",
    "TransientIOError": "reading the raster failed transiently (I/O timeout)",
}


def _role(name: str, info) -> str | None:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if extra.get("artifact") in ("input", "output"):
        return extra["artifact"]
    if name in OUTPUT_FIELDS:
        return "output"
    if name in INPUT_FIELDS or name.endswith(("_path", "_paths", "_list", "_scene")):
        return "input"
    return None


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def data_arguments(tool: Tool, arguments: dict, role: str = "input") -> list[tuple[str, str]]:
    """``(argument, reference)`` pairs of ``arguments`` that name data read (``role="input"``) or
    written (``role="output"``) by ``tool``; lists and dict values are flattened."""
    fields = tool.args_model.model_fields
    return [(k, s) for k, v in arguments.items() if k in fields and _role(k, fields[k]) == role
            for s in _strings(v)]


def resolve(registry: ArtifactRegistry, ref: str) -> tuple[str, str | None, str | None]:
    """``(name, sensor, date)`` of an artifact, scene, ``scene:band`` or ``scene:vector``
    reference.

    Raises:
        HallucinatedPathError: nothing of that name in the episode, or a band/vector the scene
            lacks.
    """
    try:
        a = registry.get(ref)
        return a.name, a.sensor, a.date
    except HallucinatedPathError:
        scene = registry.scene(ref)
    _, _, band = ref.strip().partition(":")
    if band and band not in scene.vectors:
        try:
            scene.band_name(band)
        except KeyError as e:
            raise HallucinatedPathError(str(e.args[0]) + (
                f"; vectors: {', '.join(scene.vectors)}" if scene.vectors else "")) from None
    return scene.id, scene.sensor, scene.date


def register_placeholder(registry: ArtifactRegistry, name: str, *, kind: str = "raster",
                         parents: list[str] | None = None, call: dict | None = None,
                         sensor: str | None = None, date: str | None = None) -> Artifact:
    """Register an artifact without a file (``path=None``, ``units="mock"``).

    Raises:
        ToolError: a bad name (see :meth:`ArtifactRegistry.check_name`).
    """
    name = Path(name.strip()).name
    for ext in _EXTS:
        name = name.removesuffix(ext)
    name = registry.check_name(name)
    art = Artifact(name=name, kind=kind, path=None, crs=None, shape=None, res=None, bands=[name],
                   units="mock", dtype="uint8" if kind in ("mask", "classes") else "float32",
                   parents=list(parents or []), call=call, sensor=sensor, date=date)
    registry.artifacts[name] = art
    return art


def output_names(registry: ArtifactRegistry, tool: Tool, args, call: dict) -> list[str]:
    """Names of the artifacts ``tool`` writes for ``call`` (see module doc): its
    :attr:`~earthrl.envs.tools.registry.Tool.output_name` (the rule execute mode names its file
    with), else the call's output arguments, else ``<tool>_<sha1(call)[:8]>``.

    Raises:
        ToolError: the rule refuses an argument it names by (an unknown index, band or CRS).
    """
    if tool.output_name is not None:
        return [tool.output_name(ToolContext(registry, call), args)]
    outs = [o for _, o in data_arguments(tool, args.model_dump(), "output")]
    digest = hashlib.sha1(json.dumps(call, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return outs or [f"{tool.name}_{digest}"]


def run_mock(registry: ArtifactRegistry, tool: Tool, args, call: dict) -> ToolResult:
    """Check and "run" ``tool`` without pixels (see module doc).

    Args:
        registry: the episode's registry (placeholders are added to it).
        tool: the tool; args: its validated pydantic arguments; call: ``{"name","arguments"}``.

    Raises:
        HallucinatedPathError, ToolError (``sensor_mismatch``): the call is not legal.
    """
    if tool.output_kind in PASSTHROUGH_KINDS:
        return tool.fn(ToolContext(registry, call), args)
    arguments = args.model_dump()
    parents, sensors, dates = [], set(), set()
    for arg, ref in data_arguments(tool, arguments):
        try:
            name, sensor, date = resolve(registry, ref)
        except HallucinatedPathError as e:
            raise HallucinatedPathError(f"argument '{arg}': {e.message}") from None
        parents.append(name)
        sensors.add(sensor)
        dates.add(date)
    sensors.discard(None)
    bad = sorted(s for s in sensors if "any" not in tool.sensors and s not in tool.sensors)
    if bad:
        raise ToolError("sensor_mismatch", f"{tool.name} accepts {', '.join(tool.sensors)} data, "
                        f"not {', '.join(bad)}; use a scene of a supported sensor")
    parents = list(dict.fromkeys(parents))
    if tool.output_kind not in KINDS:
        return ToolResult(f"[mock] {tool.name} accepted (inputs: {', '.join(parents) or 'none'})",
                          {"mock": True, "parents": parents})
    names = output_names(registry, tool, args, call)
    one = lambda s: s.pop() if len(s) == 1 else None  # noqa: E731
    sensor, date = one(set(sensors)), one({d for d in dates if d})
    arts = [register_placeholder(registry, n, kind=tool.output_kind, parents=parents, call=call,
                                 sensor=sensor, date=date) for n in names]
    listed = ", ".join(a.name for a in arts)
    return ToolResult(f"[mock] {tool.name} accepted; saved {listed}",
                      {"mock": True, "artifact": arts[0].name, "artifacts": [a.name for a in arts],
                       "parents": parents}, arts[0].name)


class ErrorInjector:
    """Recoverable error injection (SimCRAFT §3): each eligible call fails with probability
    ``rate``, drawing the error uniformly from ``kinds``.

    Args:
        rate: probability in [0, 1]; seed: generator seed (same seed → same failures);
        kinds: names from :data:`INJECTABLE`.

    Raises:
        ValueError: rate outside [0, 1] or an unknown kind.
    """

    def __init__(self, rate: float = 0.0, seed: int = 0, kinds: list[str] | tuple[str, ...] = tuple(INJECTABLE)):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"inject_errors.rate must be in [0, 1], got {rate}")
        bad = [k for k in kinds if k not in INJECTABLE]
        if bad or not kinds:
            raise ValueError(f"inject_errors.kinds {bad or kinds}: use {', '.join(INJECTABLE)}")
        self.rate, self.kinds = rate, tuple(kinds)
        self.rng = np.random.default_rng(seed)

    def draw(self, tool: Tool) -> ToolError | None:
        """The error to raise for this call of ``tool``, or None. ``answer`` and catalogue tools
        are never failed."""
        if self.rate == 0.0 or tool.output_kind in PASSTHROUGH_KINDS:
            return None
        if self.rng.random() >= self.rate:
            return None
        kind = self.kinds[int(self.rng.integers(len(self.kinds)))]
        return ToolError("injected_error", f"{kind}: {INJECTABLE[kind]}; this is transient, "
                         f"retry the same {tool.name} call")
