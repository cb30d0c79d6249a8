"""Isolation between principals, generated from the app's route table: another principal's episode id is a 404 on
every route and MCP URL (a new route is covered the day it is added), and an MCP session belongs to its opener."""

from __future__ import annotations

import json
from typing import Any

import httpx2 as httpx
from simia.server.openapi import served_routes
from simia.server.settings import ServerSettings

ALICE = {"authorization": "Bearer alice-secret"}
BOB = {"authorization": "Bearer bob-secret"}
SETTINGS = ServerSettings(named_tokens=(("alice", "alice-secret"), ("bob", "bob-secret")))
MCP = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
MODERN = {**MCP, "mcp-protocol-version": "2026-07-28"}
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "set_quantity", "arguments": {"name": "milk", "qty": 9}, "_meta": META},
}
# What each kind of route is sent: a body that would succeed for the episode's owner.
BODIES: dict[tuple[str, str], Any] = {
    ("post", "/v1/episodes/{episode_id}/fork"): {},
    ("post", "/v1/episodes/{episode_id}/end"): {"transcript": []},
    ("post", "/episodes/{episode_id}/mcp"): CALL,
    ("post", "/episodes/{episode_id}/user/mcp"): CALL,
}
HEADERS = {
    "/episodes/{episode_id}/mcp": {**MODERN, "mcp-method": "tools/call", "mcp-name": "set_quantity"},
    "/episodes/{episode_id}/user/mcp": {**MODERN, "mcp-method": "tools/call", "mcp-name": "set_quantity"},
}


def _detail(http: httpx.AsyncClient, episode_id: str, headers: dict[str, str]) -> Any:
    return http.get(f"/v1/episodes/{episode_id}", headers=headers)


async def test_another_principals_episode_is_a_404_on_every_route_that_takes_an_episode_id(make_server: Any) -> None:
    async with make_server(SETTINGS) as server, httpx.AsyncClient(base_url=server.url) as http:
        routes = served_routes(server.app.starlette.routes)
        params = {part for _, path in routes for part in path.split("/") if part.startswith("{")}
        assert params == {"{episode_id}", "{world}"}, "a new path parameter: add its isolation check here"
        scoped = [(method, path) for method, path in routes if "{episode_id}" in path]
        assert len(scoped) == 9  # get, fork, end and the GET, POST and DELETE of the MCP URL and the user's MCP URL
        bobs = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"}, headers=BOB)).json()
        before = (await _detail(http, bobs["id"], BOB)).json()
        for method, path in scoped:
            url = path.replace("{episode_id}", bobs["id"])
            body = BODIES.get((method, path))
            headers = {"content-type": "application/json", **HEADERS.get(path, {}), **ALICE}
            response = await http.request(
                method.upper(), url, headers=headers, content=None if body is None else json.dumps(body)
            )
            assert response.status_code == 404, f"{method.upper()} {path}: {response.status_code} {response.text}"
            assert response.json() == {
                "error": {
                    "code": "not_found",
                    "message": f"no episode {bobs['id']!r}; create one with POST /v1/episodes",
                }
            }, f"{method.upper()} {path}"
        after = (await _detail(http, bobs["id"], BOB)).json()
        listed = (await http.get("/v1/episodes", headers=ALICE)).json()["episodes"]
    assert after == before  # nothing alice sent touched it: still active, no event, no verdict
    assert listed == []


async def _open_session(http: httpx.AsyncClient, path: str, auth: dict[str, str]) -> dict[str, str]:
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    answer = await http.post(path, json=init, headers={**MCP, **auth})
    assert answer.status_code == 200, answer.text
    session = {"mcp-session-id": answer.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await http.post(path, json=note, headers={**MCP, **session, **auth})
    return session


def _result(response: httpx.Response) -> Any:
    line = next(x for x in response.text.splitlines() if x.startswith("data:") and '"id"' in x)
    return json.loads(line[5:])


async def test_a_world_url_session_belongs_to_the_principal_that_opened_it(make_server: Any) -> None:
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    async with make_server(SETTINGS) as server, httpx.AsyncClient(base_url=server.url) as http:
        path = "/worlds/mock/mcp"
        session = await _open_session(http, path, ALICE)
        mine = _result(await http.post(path, json=listing, headers={**MCP, **session, **ALICE}))
        episode_id = mine["result"]["_meta"]["simia/episode"]
        as_bob = await http.post(path, json=listing, headers={**MCP, **session, **BOB})
        closed_by_bob = await http.delete(path, headers={**MCP, **session, **BOB})
        still_mine = await http.post(path, json=listing, headers={**MCP, **session, **ALICE})
        episode = (await _detail(http, episode_id, ALICE)).json()
    assert as_bob.status_code == 404 and episode_id not in as_bob.text
    assert as_bob.json()["error"]["code"] == "not_found"
    assert closed_by_bob.status_code == 404
    assert _result(still_mine)["result"]["_meta"]["simia/episode"] == episode_id
    assert episode["status"] == "active"


async def test_a_world_url_session_belongs_to_the_world_it_was_opened_on(make_server: Any) -> None:
    """A session opened on the mock world's URL is unknown on retail's: reused there it would list retail's tools
    but call the mock episode's, and a DELETE there would end the mock episode."""
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    async with make_server(SETTINGS) as server, httpx.AsyncClient(base_url=server.url) as http:
        session = await _open_session(http, "/worlds/mock/mcp", ALICE)
        mine = _result(await http.post("/worlds/mock/mcp", json=listing, headers={**MCP, **session, **ALICE}))
        episode_id = mine["result"]["_meta"]["simia/episode"]
        elsewhere = await http.post("/worlds/retail/mcp", json=listing, headers={**MCP, **session, **ALICE})
        closed_elsewhere = await http.delete("/worlds/retail/mcp", headers={**MCP, **session, **ALICE})
        episode = (await _detail(http, episode_id, ALICE)).json()
    assert elsewhere.status_code == 404 and elsewhere.json() == {
        "error": {"code": "not_found", "message": "no such MCP session; initialize a new one"}
    }
    assert closed_elsewhere.status_code == 404 and episode["status"] == "active"
