"""Retried tool calls over real MCP HTTP: the same JSON-RPC message resent in the same session is answered from
the store, never simulated or committed twice; a new id, or another session, is a new call. Without a session
(protocol 2026-07-28, every client sends id 1), a request repeated after its answer came back is a new call, and
one whose client gave up before the answer is still a retry."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import httpx2 as httpx
from mcp import Client
from simia.sim.backends import FunctionBackend
from simia.testing import mock_world_answer

ERA = "2025-11-25"  # the handshake era: `initialize` gives the session an Mcp-Session-Id
MODERN = "2026-07-28"  # no session: one request, one answer
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def message(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer in a streamable-HTTP response (a JSON body, or the SSE event that carries it)."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        events = [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:") and line[5:]]
        answers = [e for e in events if "id" in e]
        assert len(answers) == 1, response.text
        return answers[0]
    answer: dict[str, Any] = response.json()
    return answer


async def open_session(http: httpx.AsyncClient, mcp_url: str) -> dict[str, str]:
    """`initialize` then `notifications/initialized`, as any handshake-era client does; the session's headers."""
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": ERA, "capabilities": {}, "clientInfo": {"name": "retrier", "version": "1"}},
    }
    response = await http.post(mcp_url, json=init, headers=HEADERS)
    assert message(response)["result"]["protocolVersion"] == ERA
    session = {**HEADERS, "Mcp-Session-Id": response.headers["mcp-session-id"], "Mcp-Protocol-Version": ERA}
    done = await http.post(mcp_url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
    assert done.status_code == 202, done.text
    return session


def call(request_id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def events(http: httpx.AsyncClient, base: str, episode_id: str) -> list[tuple[int, str, Any]]:
    episode = (await http.get(f"{base}/v1/episodes/{episode_id}")).json()
    return [(e["seq"], e["tool"], e["output"]) for e in episode["events"]]


async def test_a_tools_call_resent_with_the_same_id_in_the_same_session_is_answered_once(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient() as http:
        episode = (await http.post(f"{server.url}/v1/episodes", json={"world": "mock"})).json()
        session = await open_session(http, episode["mcp_url"])
        sent = call(7, "set_quantity", {"name": "milk", "qty": 4})
        first = message(await http.post(episode["mcp_url"], json=sent, headers=session))
        retry = message(await http.post(episode["mcp_url"], json=sent, headers=session))
        assert retry == first  # the committed first result, its seq included
        assert first["result"]["structuredContent"] == {"name": "milk", "qty": 4}
        assert first["result"]["_meta"]["simia/seq"] == 1
        assert len(server.backend.requests) == 1  # the simulator was asked once
        assert await events(http, server.url, episode["id"]) == [(1, "set_quantity", {"name": "milk", "qty": 4})]

        again = message(await http.post(episode["mcp_url"], json={**sent, "id": 8}, headers=session))
        assert again["id"] == 8 and again["result"]["_meta"]["simia/seq"] == 2  # a new id is a new call
        assert len(server.backend.requests) == 2
        assert [seq for seq, _, _ in await events(http, server.url, episode["id"])] == [1, 2]


async def test_the_same_id_from_another_session_is_a_new_call(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient() as http:
        episode = (await http.post(f"{server.url}/v1/episodes", json={"world": "mock"})).json()
        one, two = await open_session(http, episode["mcp_url"]), await open_session(http, episode["mcp_url"])
        sent = call(7, "get_item", {"name": "apple"})
        a = message(await http.post(episode["mcp_url"], json=sent, headers=one))
        b = message(await http.post(episode["mcp_url"], json=sent, headers=two))
        assert (a["result"]["_meta"]["simia/seq"], b["result"]["_meta"]["simia/seq"]) == (1, 2)
        assert len(await events(http, server.url, episode["id"])) == 2


async def test_a_retry_after_the_client_dropped_the_first_send_gets_the_committed_result(make_server: Any) -> None:
    slow = FunctionBackend(mock_world_answer, latency=0.5)
    async with make_server(backend=slow) as server, httpx.AsyncClient() as http:
        episode = (await http.post(f"{server.url}/v1/episodes", json={"world": "mock"})).json()
        session = await open_session(http, episode["mcp_url"])
        sent = call(3, "set_quantity", {"name": "rice", "qty": 9})
        first = asyncio.create_task(http.post(episode["mcp_url"], json=sent, headers=session))
        for _ in range(500):  # until the simulator is working on it
            if slow.requests:
                break
            await asyncio.sleep(0.01)
        first.cancel()  # the client gave up waiting (its connection is gone) and resends
        with contextlib.suppress(asyncio.CancelledError):
            await first
        retry = message(await http.post(episode["mcp_url"], json=sent, headers=session))
        assert retry["result"]["structuredContent"] == {"name": "rice", "qty": 9}
        assert retry["result"]["_meta"]["simia/seq"] == 1
        # calls of an episode run one at a time: a next call is answered after anything the retry started
        read = call(4, "get_item", {"name": "rice"})
        after = message(await http.post(episode["mcp_url"], json=read, headers=session))
        assert after["result"]["_meta"]["simia/seq"] == 2
        assert await events(http, server.url, episode["id"]) == [
            (1, "set_quantity", {"name": "rice", "qty": 9}),
            (2, "get_item", {"name": "rice", "qty": 9}),
        ]


async def test_without_a_session_a_write_repeated_after_its_answer_is_a_new_call(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient() as http:
        episode = (await http.post(f"{server.url}/v1/episodes", json={"world": "mock"})).json()
        seqs = []
        for qty in (4, 4, 5, 4):  # a client that connects per call: the same JSON-RPC id every time
            async with Client(episode["mcp_url"], mode=MODERN) as client:
                result = await client.call_tool("set_quantity", {"name": "milk", "qty": qty})
            assert result.meta is not None
            seqs.append(result.meta["simia/seq"])
        assert seqs == [1, 2, 3, 4]
        assert len(server.backend.requests) == 4
        assert [seq for seq, _, _ in await events(http, server.url, episode["id"])] == [1, 2, 3, 4]


async def test_without_a_session_a_retry_after_the_client_gave_up_gets_the_committed_result(make_server: Any) -> None:
    slow = FunctionBackend(mock_world_answer, latency=0.5)
    async with make_server(backend=slow) as server, httpx.AsyncClient() as http:
        episode = (await http.post(f"{server.url}/v1/episodes", json={"world": "mock"})).json()
        arguments = {"name": "rice", "qty": 9}

        async def gives_up() -> None:
            async with Client(episode["mcp_url"], mode=MODERN) as client:
                await client.call_tool("set_quantity", arguments)

        first = asyncio.create_task(gives_up())
        for _ in range(500):  # until the simulator is working on it
            if slow.requests:
                break
            await asyncio.sleep(0.01)
        first.cancel()  # its connection is gone before the answer
        with contextlib.suppress(asyncio.CancelledError):
            await first
        async with Client(episode["mcp_url"], mode=MODERN) as client:
            retry = await client.call_tool("set_quantity", arguments)
        assert retry.meta is not None and retry.meta["simia/seq"] == 1
        assert retry.structured_content == arguments
        assert await events(http, server.url, episode["id"]) == [(1, "set_quantity", arguments)]
