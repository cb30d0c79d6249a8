"""Recipe: the official MCP Python SDK client against a simia episode, in either protocol era.

simia serve &                                       # in another terminal
python examples/mcp_sdk_client.py http://127.0.0.1:8765 [auto|legacy]
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import httpx2 as httpx
from mcp import Client


async def main(server: str, mode: str = "auto") -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
    # mode "auto" negotiates protocol 2026-07-28 (sessionless); "legacy" forces the 2025-11-25 handshake.
    async with Client(episode["mcp_url"], mode=mode) as client:  # type: ignore[arg-type]
        tools = [t.name for t in (await client.list_tools()).tools]
        before = await client.call_tool("get_item", {"name": "milk"})
        after = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
        era = client.protocol_version
    async with httpx.AsyncClient(base_url=server) as http:
        ended = (await http.post(f"/v1/episodes/{episode['id']}/end", json={})).json()
    return {
        "era": era,
        "tools": tools,
        "before": before.structured_content,
        "after": after.structured_content,
        "reward": ended["verdict"]["reward"] if ended.get("verdict") else None,
        "episode": episode["id"],
    }


if __name__ == "__main__":
    print(asyncio.run(main(sys.argv[1], *(sys.argv[2:3]))))
