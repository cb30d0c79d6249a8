"""Recipe: LangChain MCP adapters against a simia episode.

langchain-mcp-adapters pins `mcp<2`, so it lives in its own virtual environment:

    python -m venv .venv-langchain && .venv-langchain/bin/pip install langchain-mcp-adapters
    .venv-langchain/bin/python examples/langchain_mcp.py http://127.0.0.1:8765

The adapters turn the episode's MCP tools into LangChain tools (`get_tools()`); any LangChain
agent can use them. Here they are invoked directly, with no model.
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from typing import Any

from langchain_mcp_adapters.client import MultiServerMCPClient


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(request) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


async def main(server: str) -> dict[str, Any]:
    episode = _post(f"{server}/v1/episodes", {"world": "mock", "task": "restock_milk"})
    client = MultiServerMCPClient({"simia": {"url": episode["mcp_url"], "transport": "streamable_http"}})
    tools = {tool.name: tool for tool in await client.get_tools()}
    output = await tools["set_quantity"].ainvoke({"name": "milk", "qty": 4})
    with urllib.request.urlopen(f"{server}/v1/episodes/{episode['id']}") as response:
        state = json.loads(response.read())["state"]
    return {"tools": sorted(tools), "output": str(output), "milk": state["items"]["milk"]["qty"]}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
