"""Recipe: a pydantic-ai agent using a simia episode's tools through `MCPToolset`.

Without a model name, pydantic-ai's `FunctionModel` plays the agent (no LLM needed);
with one (e.g. `openai:gpt-5.4-mini`), a real model does.

    python examples/pydantic_ai_agent.py http://127.0.0.1:8765 [MODEL]
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import httpx2 as httpx
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def scripted_agent(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Set the milk to 4 with the simulated tool, then report what the tool returned."""
    returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"Done: {returns[-1].content}")])
    assert "set_quantity" in {t.name for t in info.function_tools}
    return ModelResponse(parts=[ToolCallPart("set_quantity", {"name": "milk", "qty": 4})])


async def main(server: str, model: str | None = None) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
    agent = Agent(model or FunctionModel(scripted_agent), toolsets=[MCPToolset(episode["mcp_url"])])
    async with agent:
        result = await agent.run("Set the milk to 4 litres.")
    async with httpx.AsyncClient(base_url=server) as http:
        state = (await http.get(f"/v1/episodes/{episode['id']}")).json()["state"]
    return {"output": result.output, "milk": state["items"]["milk"]["qty"], "episode": episode["id"]}


if __name__ == "__main__":
    print(asyncio.run(main(sys.argv[1], *(sys.argv[2:3]))))
