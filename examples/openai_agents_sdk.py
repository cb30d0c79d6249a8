"""Recipe: the OpenAI Agents SDK with a simia episode as its MCP server (`MCPServerStreamableHttp`).

Without a model name a tiny stub model issues the tool call (no LLM needed); with one
(e.g. `gpt-5.4-mini`, and OPENAI_API_KEY set) a real model does.

    python examples/openai_agents_sdk.py http://127.0.0.1:8765 [MODEL]
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
from agents import Agent, Runner
from agents.items import ModelResponse
from agents.mcp import MCPServerStreamableHttp
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText


class StubModel(Model):
    """Calls set_quantity once, then answers with the tool's output."""

    async def get_response(
        self,
        system_instructions: Any,
        input: Any,
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        items = input if isinstance(input, list) else []
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if outputs:
            text = ResponseOutputText(type="output_text", text=f"Done: {outputs[-1]['output']}", annotations=[])
            message = ResponseOutputMessage(
                id="msg_1", type="message", role="assistant", status="completed", content=[text]
            )
            return ModelResponse(output=[message], usage=Usage(), response_id=None)
        assert "set_quantity" in {t.name for t in tools}
        call = ResponseFunctionToolCall(
            type="function_call",
            call_id="call_1",
            name="set_quantity",
            arguments=json.dumps({"name": "milk", "qty": 4}),
            id="fc_1",
        )
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the stub model does not stream")


async def main(server: str, model: str | None = None) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
    async with MCPServerStreamableHttp({"url": episode["mcp_url"]}, name="simia", cache_tools_list=True) as mcp:
        agent = Agent(
            name="pantry",
            instructions="Use the tools to manage the pantry.",
            mcp_servers=[mcp],
            model=model or StubModel(),
        )
        result = await Runner.run(agent, "Set the milk to 4 litres.")
    async with httpx.AsyncClient(base_url=server) as http:
        state = (await http.get(f"/v1/episodes/{episode['id']}")).json()["state"]
    return {"output": result.final_output, "milk": state["items"]["milk"]["qty"], "episode": episode["id"]}


if __name__ == "__main__":
    print(asyncio.run(main(sys.argv[1], *(sys.argv[2:3]))))
