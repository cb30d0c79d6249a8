"""The real MCP SDK client over real HTTP against both endpoint kinds, in both protocol eras."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx
import pytest
from mcp import Client

MODES = ["auto", "legacy"]


async def create(url: str, world: str = "mock", **body: Any) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{url}/v1/episodes", json={"world": world, **body})
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def fetch(url: str, episode_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{url}/v1/episodes/{episode_id}")
    assert response.status_code == 200, response.text
    episode: dict[str, Any] = response.json()
    return episode


@pytest.mark.parametrize("mode", MODES)
async def test_episode_url_lists_tools_and_carries_state_across_calls(make_server: Any, mode: str) -> None:
    async with make_server() as server:
        episode = await create(server.url)
        async with Client(episode["mcp_url"], mode=mode) as client:
            expected_era = "2026-07-28" if mode == "auto" else "2025-11-25"
            assert client.protocol_version == expected_era
            tools = await client.list_tools()
            assert [t.name for t in tools.tools] == ["list_items", "get_item", "set_quantity"]
            assert tools.tools[2].input_schema["properties"]["qty"] == {"type": "integer", "minimum": 0, "maximum": 100}
            first = await client.call_tool("set_quantity", {"name": "milk", "qty": 7})
            assert (first.is_error, first.structured_content) == (False, {"name": "milk", "qty": 7})
            second = await client.call_tool("get_item", {"name": "milk"})
            assert second.structured_content == {"name": "milk", "qty": 7}  # the state carried over
        stored = await fetch(server.url, episode["id"])
    assert stored["state"]["items"]["milk"]["qty"] == 7
    assert [(e["seq"], e["tool"], e["is_error"]) for e in stored["events"]] == [
        (1, "set_quantity", False),
        (2, "get_item", False),
    ]
    assert stored["events"][0]["state_patch"] == [{"op": "replace", "path": "/items/milk/qty", "value": 7}]


@pytest.mark.parametrize("mode", MODES)
async def test_world_url_gives_each_client_its_own_episode(make_server: Any, mode: str) -> None:
    async with make_server() as server:
        url = f"{server.url}/worlds/mock/mcp"
        async with Client(url, mode=mode) as a, Client(url, mode=mode) as b:
            assert a.protocol_version == b.protocol_version == "2025-11-25"  # world URLs are session-based
            await a.call_tool("set_quantity", {"name": "apple", "qty": 50})
            seen_by_b = await b.call_tool("get_item", {"name": "apple"})
            seen_by_a = await a.call_tool("get_item", {"name": "apple"})
            assert seen_by_b.structured_content == {"name": "apple", "qty": 3}  # b never sees a's change
            assert seen_by_a.structured_content == {"name": "apple", "qty": 50}
            episode_a = seen_by_a.meta["simia/episode"] if seen_by_a.meta else None
            episode_b = seen_by_b.meta["simia/episode"] if seen_by_b.meta else None
            assert episode_a and episode_b and episode_a != episode_b
        stored = await fetch(server.url, episode_a)
        assert len(stored["events"]) == 2 and stored["status"] == "ended"  # closing the session ended it


async def test_two_clients_of_different_episodes_never_share_state(make_server: Any) -> None:
    async with make_server() as server:
        one, two = await create(server.url), await create(server.url)
        async with Client(one["mcp_url"]) as a, Client(two["mcp_url"]) as b:
            await a.call_tool("set_quantity", {"name": "rice", "qty": 9})
            result = await b.call_tool("get_item", {"name": "rice"})
        assert result.structured_content == {"name": "rice", "qty": 2}


async def test_invalid_arguments_and_unknown_tools_are_agent_errors_with_the_reason(make_server: Any) -> None:
    async with make_server() as server:
        episode = await create(server.url)
        async with Client(episode["mcp_url"]) as client:
            bad = await client.call_tool("set_quantity", {"name": "milk", "qty": "lots"})
            unknown = await client.call_tool("launch_rocket", {})
            missing = await client.call_tool("get_item", {"name": "banana"})
        assert len(server.backend.requests) == 1  # the refused calls never reached the model
        assert 'Call: get_item\nArguments: {"name":"banana"}\n' in server.backend.requests[0].messages[1]["content"]
    assert bad.is_error
    assert bad.content[0].text == 'Invalid arguments for set_quantity: $.qty: "lots" is not of type "integer"'
    assert bad.meta and bad.meta["simia/error_kind"] == "agent" and bad.meta["simia/error_code"] == "invalid_arguments"
    assert unknown.is_error and unknown.content[0].text.startswith("Unknown tool 'launch_rocket'. Available tools:")
    assert missing.is_error and missing.content[0].text == "Error (item_not_found): No item named banana."
    assert missing.meta and missing.meta["simia/error_kind"] == "agent"


async def test_a_task_episode_starts_from_the_patched_state_and_fork_starts_from_a_step(make_server: Any) -> None:
    async with make_server() as server:
        episode = await create(server.url, task="no_bananas", seed=5)
        assert (episode["task"], episode["seed"]) == ("no_bananas", 5)
        async with Client(episode["mcp_url"]) as client:
            assert (await client.call_tool("get_item", {"name": "apple"})).structured_content["qty"] == 5
            await client.call_tool("set_quantity", {"name": "apple", "qty": 1})
            await client.call_tool("set_quantity", {"name": "apple", "qty": 2})
        async with httpx.AsyncClient() as http:
            fork = (await http.post(f"{server.url}/v1/episodes/{episode['id']}/fork", json={"step": 2})).json()
            group = [
                (await http.post(f"{server.url}/v1/episodes/{episode['id']}/fork", json={})).json() for _ in range(2)
            ]
        assert fork["parent_id"] == episode["id"] and fork["fork_step"] == 2 and fork["group_id"] == episode["id"]
        async with Client(fork["mcp_url"]) as client:
            assert (await client.call_tool("get_item", {"name": "apple"})).structured_content["qty"] == 1
        assert (await fetch(server.url, group[0]["id"]))["state"]["items"]["apple"]["qty"] == 2
        assert (await fetch(server.url, episode["id"]))["state"]["items"]["apple"]["qty"] == 2  # parent untouched
