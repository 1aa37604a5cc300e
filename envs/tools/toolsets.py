"""Toolsets: which tools an episode shows and may call (``env.toolset`` option).

- ``"mini"``: the 11 original tools of ``earthrl-mini`` (default; keeps the system prompt of a
  0.5B model on a 2-core CPU small);
- ``"all"``: every registered tool of EarthRL's own surface (:attr:`~earthrl.envs.tools.registry.Tool.surface`);
- ``"earthbench"``: Earth-Agent's tools that Earth-Bench's references call
  (:mod:`earthrl.envs.tools.earthagent`) and ``answer``;
- ``"thinkgeo"``: ThinkGeo's tools (:mod:`earthrl.envs.tools.thinkgeo_tools`) and ``answer``;
- ``"skills"``: RS-Claw progressive disclosure — the prompt shows only the skill-tree actions and
  ``answer``; the tools of a skill become callable once the agent opens it (``open_skill``);
- a list of tool names: exactly those (plus ``answer``).
"""

from __future__ import annotations

from earthrl.envs.registry import Registry

MINI_TOOLS = ("list_files", "read_metadata", "qa_mask", "spectral_index", "band_math",
              "threshold_mask", "pixel_share", "mask_area", "raster_stats", "raster_difference",
              "answer")

TOOLSETS: Registry = Registry("toolset")
"""Toolsets by name: ``fn(tools: Mapping name -> Tool) -> list[str]`` of the tools shown from the start."""
TOOLSETS.register("mini", lambda tools: [t for t in MINI_TOOLS if t in tools])
TOOLSETS.register("all", lambda tools: [n for n, t in tools.items() if t.surface == "earthrl"])
TOOLSETS.register("earthbench", lambda tools: [n for n, t in tools.items() if t.surface == "earthagent"] +
                  (["answer"] if "answer" in tools else []))
TOOLSETS.register("thinkgeo", lambda tools: [n for n, t in tools.items() if t.surface == "thinkgeo"] +
                  (["answer"] if "answer" in tools else []))
TOOLSETS.register("skills", lambda tools: ["answer"])


def resolve_toolset(spec: str | list[str] | tuple[str, ...], tools: dict) -> list[str]:
    """Tool names shown from the start for toolset ``spec``.

    Args:
        spec: a name in :data:`TOOLSETS` or a list of tool names.
        tools: the registry, name -> Tool.

    Raises:
        ValueError: unknown toolset name, or listed names that are not registered tools.
    """
    if isinstance(spec, str):
        if spec not in TOOLSETS:
            raise ValueError(f"env.toolset {spec!r} is unknown; use one of "
                             f"{', '.join(TOOLSETS)} or a list of tool names")
        return TOOLSETS[spec](tools)
    names = [str(n) for n in spec]
    bad = [n for n in names if n not in tools]
    if bad:
        raise ValueError(f"env.toolset names unknown tools {bad}; registered: {', '.join(tools)}")
    return names + (["answer"] if "answer" not in names and "answer" in tools else [])
