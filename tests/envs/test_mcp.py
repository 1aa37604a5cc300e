"""`earthrl serve-tools`: a real MCP stdio client lists the tools and runs real calls."""

from __future__ import annotations

import sys

import anyio
import numpy as np
import pytest

LT = "LT50350322008174PAC01"


async def _session(data_root, workspace):
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "earthrl.launch", "serve-tools", "--data-root", str(data_root),
              "--workspace", str(workspace), "--scenes", LT])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            ndvi = await session.call_tool("spectral_index", {"scene": LT, "index": "NDVI"})
            stats = await session.call_tool("raster_stats", {"name": f"ndvi_{LT}"})
            bad = await session.call_tool("raster_stats", {"name": "ndvi_nowhere"})
            return listed, ndvi, stats, bad


def test_serve_tools_lists_and_runs_real_tools(data_root, tmp_path, raw):
    from earthrl.envs.tools.registry import TOOLS

    listed, ndvi, stats, bad = anyio.run(_session, data_root, tmp_path / "ws")
    tools = {t.name: t for t in listed.tools}
    own = {n for n, t in TOOLS.items() if t.surface == "earthrl"}  # Earth-Agent's: env.toolset=earthbench only
    assert own <= set(tools) and {"list_skills", "open_skill", "read_tool_doc"} <= set(tools)
    assert not [n for n in tools if n in TOOLS and TOOLS[n].surface != "earthrl"]
    schema = tools["threshold_mask"].input_schema
    assert schema["required"] == ["name", "value"] and schema["properties"]["value"]["type"] == "number"

    assert not ndvi.is_error and ndvi.structured_content["artifact"] == f"ndvi_{LT}"
    n, r = raw.ls(LT, "b4"), raw.ls(LT, "b3")
    want = ((n - r) / (n + r))
    want = want[np.isfinite(want)]
    assert not stats.is_error
    assert stats.structured_content["mean"] == pytest.approx(want.mean(), abs=1e-6)
    assert stats.structured_content["valid_px"] == want.size
    assert "mean" in stats.content[0].text

    assert bad.is_error and "hallucinated_path" in bad.content[0].text
    assert not (tmp_path / "ws").exists()  # the server removed its workspace at exit
