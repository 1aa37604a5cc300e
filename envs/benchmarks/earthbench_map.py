"""Earth-Bench tool calls → EarthRL tool calls: the name and argument mapping table, and a mock
replay of Earth-Bench reference workflows (SimCRAFT mock engine, :mod:`earthrl.envs.core.mock`).

Earth-Bench's tools (Earth-Agent's MCP servers) take file paths per band
(``calculate_ndwi(input_nir_path, input_swir_path, output_path)``); EarthRL's take artifact names,
``scene:band`` references and expressions. :data:`EARTHBENCH_MAP` maps each Earth-Bench tool that
has an EarthRL counterpart: renamed arguments (``"inputs.n"`` puts the value into the dict argument
``inputs`` under key ``n``), constant EarthRL arguments (``band_math``'s expression), arguments
EarthRL has no counterpart for (dropped: output paths — EarthRL names outputs itself — and
``gsd``/``band_index``), and arguments wrapped into a list. Earth-Bench tools without a counterpart
(vision models such as ``SAM2``, list arithmetic such as ``mean(x)``, batched ``calc_batch_*``)
are not mapped.

Known Earth-Bench quirks this module meets (verified on ``extracted_tool_calls_GT.json``): some
reference calls use argument names of another tool (``calculate_ndwi(file_list=...)``,
``sr_band_path``); some are batched (one call over lists of paths where the signature takes one
path: ``compute_tvdi``, ``calculate_threshold_ratio``). :func:`map_call` maps unknown argument
names through unchanged, so EarthRL's schema check rejects them (``schema_error``) — EarthRL does
not guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from earthrl.envs.core.mock import register_placeholder
from earthrl.envs.data.artifacts import ArtifactRegistry, ToolError
from earthrl.envs.tools.registry import TOOLS


@dataclass(frozen=True)
class ToolMap:
    """How one Earth-Bench tool maps.

    Attributes:
        tool: the EarthRL tool name.
        args: Earth-Bench argument -> EarthRL argument (``"dict_arg.key"`` to nest).
        fixed: EarthRL arguments with constant values.
        drop: Earth-Bench arguments without an EarthRL counterpart.
        wrap: EarthRL arguments whose scalar value becomes a one-element list.
        outputs: Earth-Bench arguments naming the files the call writes.
    """

    tool: str
    args: dict[str, str] = field(default_factory=dict)
    fixed: dict = field(default_factory=dict)
    drop: tuple[str, ...] = ()
    wrap: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ("output_path", "output_filename")


def _nd(a: str, b: str, eb_a: str, eb_b: str) -> ToolMap:
    """A normalised difference ``(a-b)/(a+b)`` of two band files, as ``band_math``."""
    return ToolMap("band_math", {eb_a: f"inputs.{a}", eb_b: f"inputs.{b}"},
                   fixed={"expr": f"({a}-{b})/({a}+{b})"}, drop=("output_path", "output_filename"))


EARTHBENCH_MAP: dict[str, ToolMap] = {
    "get_filelist": ToolMap("list_files", drop=("dir_path",)),
    "mcp-base_get_filelist": ToolMap("list_files", drop=("dir_path",)),
    "calculate_ndwi": _nd("n", "s", "input_nir_path", "input_swir_path"),
    "calculate_nbr": _nd("n", "s", "input_nir_path", "input_swir_path"),
    "calculate_ndti": _nd("r", "g", "input_red_path", "input_green_path"),
    "calculate_ndsi": _nd("g", "s", "input_green_path", "input_swir_path"),
    "calculate_tif_difference": ToolMap("raster_difference", {"image_a_path": "a", "image_b_path": "b"},
                                        drop=("output_path", "output_filename")),
    "subtract": ToolMap("raster_difference", {"img1_path": "a", "img2_path": "b"}, drop=("output_path",)),
    "calc_single_image_mean": ToolMap("raster_stats", {"file_path": "name"}),
    "calculate_area": ToolMap("mask_area", {"input_image_path": "name", "image_path": "name"},
                              drop=("gsd",)),
    "compute_tvdi": ToolMap("tvdi", {"ndvi_path": "ndvi", "lst_path": "lst"}, drop=("output_path",)),
    "calculate_threshold_ratio": ToolMap("share_above", {"image_paths": "name", "threshold": "value"},
                                         fixed={"op": ">"}, drop=("band_index",)),
    "get_percentile_value_from_image": ToolMap("percentiles", {"image_path": "name", "percentile": "q"},
                                               wrap=("q",)),
}


_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")


def safe_path(value):
    """A path-like string (has a ``/`` or a file suffix) with its file name's characters outside
    ``[A-Za-z0-9_.-]`` replaced by ``_`` (Earth-Bench file names hold spaces, e.g.
    ``Lake Champlain_SR_B5_2007-01-17.tif``; EarthRL artifact names cannot); lists element-wise;
    anything else unchanged."""
    if isinstance(value, list):
        return [safe_path(v) for v in value]
    if not isinstance(value, str) or not ("/" in value or Path(value).suffix):
        return value
    p = Path(value)
    return str(p.with_name(_BAD_CHARS.sub("_", p.name)))


def map_call(name: str, arguments: dict, tools: dict | None = None) -> dict | None:
    """The EarthRL call ``{"name", "arguments"}`` of an Earth-Bench call, or None when the tool is
    not mapped (or its EarthRL counterpart is not registered in ``tools``). Unknown Earth-Bench
    argument names pass through unchanged (the schema check then names them)."""
    m = EARTHBENCH_MAP.get(name)
    if tools is None:
        tools = TOOLS
    if m is None or m.tool not in tools:
        return None
    out: dict = dict(m.fixed)
    for k, v in arguments.items():
        if k in m.drop:
            continue
        v = safe_path(v)
        target = m.args.get(k, k)
        if "." in target:
            outer, inner = target.split(".", 1)
            out.setdefault(outer, {})[inner] = v
        else:
            out[target] = [v] if target in m.wrap and not isinstance(v, list) else v
    return {"name": m.tool, "arguments": out}


def output_names(name: str, arguments: dict) -> list[str]:
    """Names (file stems) of the files an Earth-Bench call writes (its output arguments)."""
    keys = EARTHBENCH_MAP[name].outputs if name in EARTHBENCH_MAP else ToolMap("").outputs
    vals = [arguments[k] for k in (*keys, "output_path_list", "save_name") if k in arguments]
    flat = [s for v in vals for s in (v if isinstance(v, list) else [v]) if isinstance(s, str)]
    return [Path(safe_path(s)).stem for s in flat if Path(s).suffix]


def replay_mock(env, entry: dict) -> list[dict]:
    """Replay one Earth-Bench reference entry (``{"tool_calls": [{"name", "input", "output"}]}``)
    through ``env`` (an :class:`~earthrl.envs.core.env.RSEnv` in ``mode="mock"``, reset on any task).

    The question's data files (the first ``get_filelist`` output) are registered as placeholder
    artifacts; each mapped call runs through ``env.call``; every call's output files (mapped or
    not) are then registered, so later calls may depend on them. File names pass through
    :func:`safe_path` on both sides.

    Returns:
        one ``{"eb_name", "call", "error", "error_kind", "message"}`` per mapped call.
    """
    reg: ArtifactRegistry = env.registry
    out = []
    for c in entry["tool_calls"]:
        args = c.get("input") or {}
        if c["name"].endswith("get_filelist") and isinstance(c.get("output"), list):
            for f in c["output"]:
                _register(register_placeholder, reg, str(f), [], None)
        mapped = map_call(c["name"], args, env.tools)
        parents = []
        if mapped is not None:
            res = env.call(mapped["name"], mapped["arguments"])
            out.append({"eb_name": c["name"], "call": mapped, "error": res.error,
                        "error_kind": res.error_kind, "message": res.text})
            parents = (res.data or {}).get("artifacts", [])
        for stem in output_names(c["name"], args):
            _register(register_placeholder, reg, stem, parents, {"name": c["name"], "arguments": args})
    return out


def _register(register, reg, name: str, parents: list, call) -> None:
    try:
        register(reg, Path(safe_path(name)).name, parents=parents, call=call)
    except ToolError:  # a file name EarthRL cannot use as an artifact name: left unregistered
        pass


def follows_signature(name: str, arguments: dict) -> bool:
    """Whether an Earth-Bench call of a mapped tool uses only argument names of its mapping and
    passes single values where the mapping expects them (not a batched list) — the calls EarthRL's
    mock must accept; the others are Earth-Bench quirks EarthRL rejects with ``schema_error``."""
    m = EARTHBENCH_MAP[name]
    return all(k in m.drop or (k in m.args and (not isinstance(v, list) or m.args[k] in m.wrap))
               for k, v in arguments.items())
