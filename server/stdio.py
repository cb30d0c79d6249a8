"""`simia serve --transport stdio`: one episode per process, for desktop clients (Claude Desktop, IDEs).

stdout carries only MCP messages; logs go to stderr.
"""

from __future__ import annotations

import sys
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from simia.sim import __version__
from simia.sim.wire import META_EPISODE
from simia.sim.world import World

from .app import SimiaApp
from .episodes import EpisodeService
from .mcp import answer_call, tool_list
from .step_rewards import StepRewards

__all__ = ["bound_server", "serve_stdio"]


def bound_server(
    service: EpisodeService, episode_id: str, world: World, rewards: StepRewards | None = None
) -> Server[Any]:
    """A low-level MCP server bound to one episode (stdio, and in-memory `Client(server)` tests); with `rewards`,
    each result carries its call's step reward as over HTTP (`simia/reward`, `simia/progress`)."""
    tools = tool_list(world)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools, _meta={META_EPISODE: episode_id})

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        return await answer_call(service, episode_id, "", params.name, dict(params.arguments or {}), rewards=rewards)

    return Server(
        "simia",
        version=__version__,
        instructions=f"Simulated tools of the {world.name} world.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve_stdio(app: SimiaApp, world: str, *, task: str | None = None, seed: int | None = None) -> None:
    """Open one episode of `world` on `app`'s service and serve it over stdin/stdout until the client
    disconnects; the episode is then ended, and then judged when the app has a judge."""
    service = app.service
    episode = await service.create(world, task=task, seed=seed)
    print(f"simia: episode {episode.id} of world {world!r} on stdio", file=sys.stderr)
    app.rewards.opened(episode)  # its calls' step rewards need no read
    server = bound_server(service, episode.id, service.world(world), app.rewards)
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        # Ended first, then judged: the MCP SDK's stdio client terminates a server 2 s after closing its stdin,
        # sooner than most judges answer; a judge cut short leaves the episode ended, unjudged (`simia judge ID`).
        await service.end(episode.id, "", judge=False)
        await service.end(episode.id, "")
