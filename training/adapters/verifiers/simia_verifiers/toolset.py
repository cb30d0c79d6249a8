"""The rollout's tools: the world's tools as its simia episode serves them, each call proxied to the episode (the
pattern of verifiers' NeMo Gym toolset), so simia validates, simulates and commits it.

A call resent with the same arguments while nothing changed the state in between (verifiers' harness resends a
call whose answer was lost) carries the same call id, so simia answers it from the committed event instead of
running it twice.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, cast

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, Tool
from verifiers.v1 import SharedToolsetConfig, Toolset

from simia_verifiers.state import SimiaState

__all__ = ["SimiaToolset"]


class SimiaToolset(Toolset[SharedToolsetConfig, SimiaState]):
    """One tool server for the whole eval; each call reaches the calling rollout's episode."""

    TOOL_PREFIX = None  # the world's own tool names

    def register(self, mcp: MCPServer) -> None:
        # The catalog is the episode's: replace the handlers instead of registering static tools.
        server = cast(Any, mcp)
        server.list_tools = self._with_state(self.list_tools)
        server.call_tool = self._with_state(self.call_tool)

    async def list_tools(self) -> list[Tool]:
        async with self.state.client() as client:
            tools = await client.list_tools(self.state.simia_episode)
        self.state.tool_names = [tool["name"] for tool in tools]
        return [Tool.model_validate(tool) for tool in tools]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> CallToolResult:
        episode = self.state.simia_episode
        key = json.dumps([episode.id, name, arguments], sort_keys=True, default=str)
        call_id = "vf-" + hashlib.blake2b(key.encode(), digest_size=12).hexdigest()
        async with self.state.client() as client:
            result = await client.call_tool(episode, name, arguments, call_id=call_id)
        return CallToolResult.model_validate(result.raw)


if __name__ == "__main__":
    SimiaToolset.run()
