"""`simia serve --transport stdio`: one episode per process, for desktop clients (Claude Desktop, IDEs).

stdout carries only MCP messages; logs go to stderr.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from simia.sim.simulator import Simulator
from simia.sim.store import Store
from simia.sim.world import World

from .episodes import EpisodeService
from .errors import ApiError
from .mcp import call_result, failure_result, tool_list
from .settings import ServerSettings

__all__ = ["bound_server", "serve_stdio"]

log = logging.getLogger("simia.stdio")


def bound_server(service: EpisodeService, episode_id: str, world: World) -> Server[Any]:
    """A low-level MCP server bound to one episode (stdio, and in-memory `Client(server)` tests)."""
    tools = tool_list(world)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools, _meta={"simia/episode": episode_id})

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            event = await service.call(episode_id, "", params.name, dict(params.arguments or {}))
        except ApiError as exc:
            return failure_result(exc.message, "infra", exc.code, episode_id)
        except Exception:
            log.exception("tool call failed")
            return failure_result(
                "Internal error in the tool simulator. Try again.", "infra", "internal_error", episode_id
            )
        return call_result(event, episode_id)

    return Server(
        "simia",
        version="0.1.0",
        instructions=f"Simulated tools of the {world.name} world.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve_stdio(
    world: World,
    simulator: Simulator,
    store: Store,
    settings: ServerSettings,
    *,
    task: str | None = None,
    seed: int | None = None,
) -> None:
    """Open one episode of `world` and serve it over stdin/stdout until the client disconnects."""
    service = EpisodeService({world.name: world}, simulator, store, settings)
    episode = await service.create(world.name, task=task, seed=seed)
    print(f"simia: episode {episode.id} of world {world.name!r} on stdio (db {store.path})", file=sys.stderr)
    server = bound_server(service, episode.id, world)
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        await service.end(episode.id, "")
