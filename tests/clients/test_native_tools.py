"""The built-in agent with the providers' native tool calling (OpenAI tools, Anthropic tool use), over real HTTP."""

from __future__ import annotations

import json
from typing import Any

import httpx2 as httpx
import pytest
from simia.clients.agent import Agent
from simia.sim.backends import resolve_backend
from simia.testing.fake_provider import FakeProvider


def policy(body: dict[str, Any]) -> dict[str, Any]:
    """Set the milk to 4 with a native tool call, then answer (reads OpenAI or Anthropic conversations)."""
    text = json.dumps(body["messages"])
    if "tool_result" in text or '"role": "tool"' in text:
        return {"message": "Done: milk is at 4.", "tool_calls": []}
    return {"message": "", "tool_calls": [{"name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}]}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_the_agent_uses_native_tool_calling(make_server: Any, provider: str) -> None:
    async with FakeProvider(policy).running() as fake, make_server() as server:
        if provider == "openai":
            backend = resolve_backend("openai:gpt-5.4-mini", base_url=fake.base_url, env={"OPENAI_API_KEY": "k"})
        else:
            backend = resolve_backend(
                "anthropic:claude-sonnet-4-6", base_url=fake.anthropic_url, env={"ANTHROPIC_API_KEY": "k"}
            )
        async with httpx.AsyncClient() as http:
            episode = (await http.post(f"{server.url}/v1/episodes", json={"world": "mock"})).json()
        run = await Agent(backend).run(episode["mcp_url"], instruction="Set the milk to 4.", policy="Be careful.")
        await backend.aclose()
    assert run.stop == "answered" and run.tool_calls == 1
    assert [m["role"] for m in run.transcript] == ["system", "user", "assistant", "tool", "assistant"]
    assert run.transcript[3] == {"role": "tool", "tool_call_id": "call_1", "content": '{"name": "milk", "qty": 4}'}
    first, second = fake.requests
    names = [t["function"]["name"] if provider == "openai" else t["name"] for t in first["tools"]]
    assert names == ["list_items", "get_item", "set_quantity"]
    if provider == "openai":
        assert first["tool_choice"] == "auto" and "response_format" not in first
        assert second["messages"][3] == {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": '{"name": "milk", "qty": 4}',
        }
    else:
        assert "tool_choice" not in first and first["system"].startswith("You are a customer service agent")
        assert second["messages"][1]["content"][0]["type"] == "tool_use"
        assert second["messages"][2]["content"] == [
            {"type": "tool_result", "tool_use_id": "call_1", "content": '{"name": "milk", "qty": 4}'}
        ]
