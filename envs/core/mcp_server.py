"""EarthRL's tools over the Model Context Protocol (stdio), the protocol Earth-Agent serves its
tools with. ``earthrl serve-tools`` runs :func:`serve`.

One session = one :class:`~earthrl.envs.core.env.RSEnv` episode whose data manifest is the given scenes
(default: every scene under the data root). ``tools/list`` gives each tool of the toolset (and the
skill-tree actions) with its JSON schema; ``tools/call`` runs the call through the env's whole
pipeline (schema, registered paths, verifier), so a bad call comes back as an MCP tool error
(``isError``) whose text names the field, and a good one carries the tool's structured result.
Built on the official ``mcp`` SDK's low-level :class:`mcp.server.lowlevel.Server`.
"""

from __future__ import annotations

from pathlib import Path

import mcp_types as types
from mcp.server.lowlevel import Server

from earthrl.envs.core.actions import ENV_ACTIONS
from earthrl.envs.core.tool_api import open_env
from earthrl.envs.tools.registry import openai_schema


def mcp_tools(env) -> list[types.Tool]:
    """MCP tool descriptors of the env's callable tools and skill actions (name, description,
    JSON schema of the arguments)."""
    tools = [*ENV_ACTIONS.values(), *(env.tools[n] for n in env.callable_tools())]
    out = []
    for t in tools:
        fn = openai_schema(t)["function"]
        out.append(types.Tool(name=t.name, description=fn["description"], input_schema=fn["parameters"]))
    return out


def call_result(out) -> types.CallToolResult:
    """MCP result of a :class:`~earthrl.envs.core.env.CallOutcome`: the observation text, the
    structured result (JSON-safe) and ``is_error`` = E(a,o)."""
    data = out.data if isinstance(out.data, dict) else None
    return types.CallToolResult(content=[types.TextContent(type="text", text=out.text)],
                                structured_content=data, is_error=out.error)


def build_server(env) -> Server:
    """A low-level MCP server whose tools are ``env``'s (see module doc)."""

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=mcp_tools(env))

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        return call_result(env.call(params.name, dict(params.arguments or {})))

    return Server("earthrl-tools", version="1", on_list_tools=list_tools, on_call_tool=call_tool)


def make_env(data_root: Path, workspace: Path, scenes: list[str] | None = None, mode: str = "execute",
             toolset: str | list[str] = "all"):
    """An env reset on a session task over ``scenes`` (default all scenes under ``data_root``
    and in the user catalogue); :func:`earthrl.envs.core.tool_api.open_env`.

    Raises:
        KeyError: a scene id not under ``data_root``. DataMissingError: no data.
    """
    return open_env(data_root, workspace, scenes, mode, toolset)


def serve(data_root: Path, workspace: Path, scenes: list[str] | None = None, mode: str = "execute",
          toolset: str | list[str] = "all") -> None:
    """Serve the tools over stdio until the client closes the connection; the workspace is
    removed at the end."""
    import anyio
    from mcp.server.stdio import stdio_server

    env = make_env(data_root, workspace, scenes, mode, toolset)
    server = build_server(env)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(main)
    finally:
        env.close()
