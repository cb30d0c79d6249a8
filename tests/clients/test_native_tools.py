"""The built-in agent with the providers' native tool calling (OpenAI tools, Anthropic tool use), over real HTTP,
and with the structured action when an OpenAI-compatible server refuses native tools (vLLM's default)."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx2 as httpx
import pytest
from simia.clients.agent import Agent
from simia.sim.backends import resolve_backend
from simia.testing.fake_provider import FakeProvider


def policy(body: dict[str, Any]) -> dict[str, Any]:
    """Set the milk to 4 with a tool call, then answer (reads OpenAI, Anthropic and structured-action conversations)."""
    text = json.dumps(body["messages"])
    if "tool_result" in text or '"role": "tool"' in text or "Result of call_1" in text:
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
        assert "tool_choice" not in first and first["system"][0]["text"].startswith("You are a customer service agent")
        assert first["system"][0]["cache_control"] == {"type": "ephemeral"}  # the agent's instructions are cached
        assert second["messages"][1]["content"][0]["type"] == "tool_use"
        assert second["messages"][2]["content"] == [
            {"type": "tool_result", "tool_use_id": "call_1", "content": '{"name": "milk", "qty": 4}'}
        ]


@pytest.mark.parametrize("refuses", [False, True], ids=["server-accepts-tools", "server-refuses-tools"])
async def test_an_openai_compatible_agent_calls_tools_whether_or_not_the_server_takes_native_tools(
    make_server: Any, refuses: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """vLLM refuses `tool_choice: auto` unless started with --enable-auto-tool-choice: the backend then asks for the
    structured action, from then on without trying native tools again, and says so once."""
    async with FakeProvider(policy, refuse_tools=refuses).running() as fake, make_server() as server:
        backend = resolve_backend("openai-compatible:Qwen/Qwen3-8B", base_url=fake.base_url)
        async with httpx.AsyncClient() as http:
            episode = (await http.post(f"{server.url}/v1/episodes", json={"world": "mock"})).json()
        with caplog.at_level(logging.WARNING, logger="simia.backends"):
            run = await Agent(backend).run(episode["mcp_url"], instruction="Set the milk to 4.", policy="Be careful.")
        await backend.aclose()
    assert run.stop == "answered" and run.tool_calls == 1
    assert [m["role"] for m in run.transcript] == ["system", "user", "assistant", "tool", "assistant"]
    assert run.transcript[3] == {"role": "tool", "tool_call_id": "call_1", "content": '{"name": "milk", "qty": 4}'}
    assert run.transcript[4] == {"role": "assistant", "content": "Done: milk is at 4."}
    warnings = [r.getMessage() for r in caplog.records if r.name == "simia.backends"]
    if not refuses:
        assert [body["tool_choice"] for body in fake.requests] == ["auto", "auto"] and warnings == []
        return
    refused, first, second = fake.requests  # one refusal, remembered: the second turn goes straight to the action
    assert refused["tool_choice"] == "auto"
    assert not {"tools", "tool_choice"} & (first.keys() | second.keys())
    action = first["response_format"]["json_schema"]
    assert action["name"] == "agent_action"
    assert [
        v["properties"]["name"]["const"] for v in action["schema"]["properties"]["tool_calls"]["items"]["anyOf"]
    ] == [
        "list_items",
        "get_item",
        "set_quantity",
    ]
    assert first["messages"][0]["content"].startswith("You are a customer service agent")
    assert "- set_quantity(" in first["messages"][0]["content"] and "# Answer format" in first["messages"][0]["content"]
    assert second["messages"][1:] == [
        {"role": "user", "content": "Set the milk to 4."},
        {
            "role": "assistant",
            "content": json.dumps(
                {"message": "", "tool_calls": [{"name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}]}
            ),
        },
        {"role": "user", "content": 'Result of call_1 set_quantity: {"name": "milk", "qty": 4}'},
    ]
    assert len(warnings) == 1 and "refuses native tool calling" in warnings[0]
