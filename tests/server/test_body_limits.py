"""Every HTTP body has a limit: the API reads no further than 4 MiB (413, declared or streamed), MCP endpoints
likewise; unknown routes and methods answer in the API's error shape."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
import pytest
from simia.server.requests import MAX_JSON_BODY

MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


async def _chunks(total: int, size: int = 65536) -> AsyncIterator[bytes]:
    yield b'{"transcript": ["'
    sent = 0
    while sent < total:
        yield b"x" * size
        sent += size


@pytest.mark.parametrize("path", ["/v1/episodes", "/v1/episodes/{id}/fork", "/v1/episodes/{id}/end"])
async def test_an_api_body_over_the_limit_is_a_413_whether_declared_or_streamed(make_server: Any, path: str) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        url = path.replace("{id}", episode["id"])
        declared = await http.post(url, content=b" " * (MAX_JSON_BODY + 1))
        streamed = await http.post(url, content=_chunks(MAX_JSON_BODY + 1))  # chunked: no Content-Length
        after = await http.get(f"/v1/episodes/{episode['id']}")
    assert declared.status_code == streamed.status_code == 413
    assert declared.json() == {
        "error": {
            "code": "payload_too_large",
            "message": f"request body is {MAX_JSON_BODY + 1} bytes; the limit is {MAX_JSON_BODY}",
        }
    }
    assert streamed.json()["error"]["message"] == f"request body is over the limit of {MAX_JSON_BODY} bytes"
    assert after.json()["status"] == "active"  # nothing was acted on


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_mcp_body_over_the_limit_is_a_413(make_server: Any, streamed: bool) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        body = _chunks(MAX_JSON_BODY + 1) if streamed else b" " * (MAX_JSON_BODY + 1)
        response = await http.post(f"/episodes/{episode['id']}/mcp", content=body, headers=MCP_HEADERS)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == -32600  # a JSON-RPC error, as an MCP client reads one
    assert (
        "the limit is" in response.json()["error"]["message"] or "over the limit" in response.json()["error"]["message"]
    )


async def test_unknown_routes_and_methods_answer_with_the_error_body(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        missing = await http.get("/v2/nothing")
        wrong = await http.delete("/v1/episodes")
    assert missing.status_code == 404
    assert missing.json() == {
        "error": {"code": "not_found", "message": "no route '/v2/nothing'; GET /openapi.json lists them"}
    }
    assert wrong.status_code == 405
    assert wrong.json()["error"]["code"] == "method_not_allowed"
    assert "GET" in wrong.headers["allow"]


async def test_a_modern_era_body_to_a_world_url_is_read_no_further_than_the_limit(make_server: Any) -> None:
    headers = {**MCP_HEADERS, "mcp-protocol-version": "2026-07-28"}
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        response = await http.post("/worlds/mock/mcp", content=_chunks(MAX_JSON_BODY + 1), headers=headers)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == -32600


@pytest.mark.parametrize(
    ("body", "status", "answer"),
    [
        (b"[" * 5000 + b"]" * 5000, 400, {"code": -32700}),
        (b'{"jsonrpc": "2.0", "method": {}, "id": null}', 400, {"code": -32600}),
        (b'{"jsonrpc": "2.0", "method": "tools/list", "id": []}', 400, {"code": -32600}),
        (b'{"jsonrpc": "2.0", "method": "tools/list", "id": 1, "params": []}', 200, {"code": -32602}),
        (b'{"jsonrpc": "2.0", "method": "tools/list", "id": 7, "params": null}', 404, {"code": -32601}),
        (b'{"jsonrpc": "2.0", "method": "tools/list", "id": 7}', 404, {"code": -32601}),
        (b'{"jsonrpc": "2.0", "method": "notifications/initialized"}', 202, None),
        (b'{"jsonrpc": "2.0", "method": "notifications/initialized", "params": "x"}', 400, {"code": -32602}),
    ],
)
async def test_a_world_url_answers_modern_era_messages_as_json_rpc_and_never_echoes_a_bad_id(
    make_server: Any, body: bytes, status: int, answer: dict[str, Any] | None
) -> None:
    headers = {**MCP_HEADERS, "mcp-protocol-version": "2026-07-28"}
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        response = await http.post("/worlds/mock/mcp", content=body, headers=headers)
    assert response.status_code == status
    if answer is not None:
        error = response.json()["error"]
        assert {k: error[k] for k in answer} == answer
        assert response.json()["id"] in (None, 1, 7)
        assert error["message"].startswith(("Parse error: the body is not JSON", "Invalid", "Method not found"))


async def test_an_unknown_query_parameter_is_a_400_naming_it(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        response = await http.get("/v1/episodes", params={"stauts": "active"})
    assert response.status_code == 400
    assert (
        response.json()["error"]["message"]
        == "unknown query parameter 'stauts'; it takes: world, status, task, limit, offset"
    )


async def test_a_query_string_on_a_route_that_takes_none_is_a_400_that_says_where_its_input_goes(
    make_server: Any,
) -> None:
    """A filter misspelt onto `/v1/worlds` or an episode, or a POST's fields sent in the query, were ignored."""
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        worlds = await http.get("/v1/worlds", params={"name": "mock"})
        one = await http.get(f"/v1/episodes/{episode['id']}", params={"include": "events"})
        created = await http.post("/v1/episodes", params={"world": "mock"})
        forked = await http.post(f"/v1/episodes/{episode['id']}/fork", params={"step": "0"}, json={})
        listed = await http.get("/v1/episodes")
    messages = [r.json()["error"]["message"] for r in (worlds, one, created, forked)]
    assert [r.status_code for r in (worlds, one, created, forked)] == [400] * 4
    assert messages == [
        "unknown query parameter 'name'; GET /v1/worlds: it takes none",
        f"unknown query parameter 'include'; GET /v1/episodes/{episode['id']}: it takes none",
        "unknown query parameter 'world'; POST /v1/episodes: its fields go in a JSON body",
        f"unknown query parameter 'step'; POST /v1/episodes/{episode['id']}/fork: its fields go in a JSON body",
    ]
    assert len(listed.json()["episodes"]) == 1  # nothing was created or forked


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/fork", {"step": False}, "field 'step' must be an integer, got boolean"),
        ("/fork", {"step": 1.0}, "field 'step' must be an integer, got number"),
        (
            "/end",
            {"tokens": {"prompt_ids": ["1"], "completion_ids": []}},
            "field 'tokens.prompt_ids.0' must be an integer",
        ),
        (
            "/end",
            {"tokens": {"prompt_ids": [], "completion_ids": [True]}},
            "field 'tokens.completion_ids.0' must be an",
        ),
    ],
)
async def test_request_fields_are_not_coerced_from_other_json_types(
    make_server: Any, path: str, body: dict[str, Any], message: str
) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        response = await http.post(f"/v1/episodes/{episode['id']}{path}", json=body)
        seeded = await http.post("/v1/episodes", json={"world": "mock", "seed": "7"})
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]
    assert seeded.status_code == 400


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": []}},
            200,
            "Invalid params: params.arguments of tools/call 'echo' must be an object of the tool's arguments "
            "(by name), got an array",
        ),
        (
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": 5, "arguments": {}}},
            200,
            "Invalid params: tools/call needs params.name, the tool's name as a string, got a number; "
            "tools/list lists the names",
        ),
        (
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call"},
            200,
            "Invalid params: tools/call needs params.name, the tool's name as a string, got none; "
            "tools/list lists the names",
        ),
        (
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": []},
            200,
            "Invalid params: 'params' of tools/list must be an object, got an array",
        ),
        (
            {"jsonrpc": "2.0", "id": None, "method": "tools/list"},
            400,
            "Invalid request: id must be a string or an integer, got null; leave it out for a notification",
        ),
        (
            {"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"},
            400,
            "Invalid request: id must be a string or an integer, got an object; leave it out for a notification",
        ),
        (
            [{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}],
            400,
            "Invalid request: a JSON-RPC batch (an array) is not accepted; MCP takes one message per POST",
        ),
        (
            {"jsonrpc": "1.0", "id": 2, "method": "tools/list"},
            400,
            'Invalid request: "jsonrpc" must be "2.0", got \'1.0\'',
        ),
        ({"jsonrpc": "2.0", "id": 2}, 400, "Invalid request: a request or notification needs a 'method' (a string)"),
    ],
)
@pytest.mark.parametrize("era", ["session", "sessionless"])
async def test_a_malformed_mcp_message_gets_a_json_rpc_error_that_names_the_problem(
    make_server: Any, body: Any, status: int, message: str, era: str
) -> None:
    """The SDK answered these with a bare -32602, a pydantic dump, or 202 and no answer at all (an id of null)."""
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        url, headers = f"/episodes/{episode['id']}/mcp", dict(MCP_HEADERS)
        if era == "session":
            hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
            opened = await http.post(
                url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}, headers=headers
            )
            headers |= {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        else:
            headers |= {"mcp-protocol-version": "2026-07-28"}
        response = await http.post(url, json=body, headers=headers)
        after = await http.get(f"/v1/episodes/{episode['id']}")
    assert response.status_code == status
    answer = response.json()
    assert answer["error"]["message"] == message
    assert answer["id"] == (2 if status == 200 else None)
    assert after.json()["steps"] == 0  # nothing was simulated


@pytest.mark.parametrize("path", ["/episodes/{id}/mcp", "/worlds/mock/mcp"])
async def test_an_mcp_post_that_is_not_json_gets_a_json_rpc_error(make_server: Any, path: str) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        url = path.replace("{id}", episode["id"])
        typed = await http.post(url, content=b"{}", headers={**MCP_HEADERS, "content-type": "text/plain"})
        broken = await http.post(url, content=b"nope{", headers=MCP_HEADERS)
    assert typed.status_code == 400
    assert typed.json()["error"] == {
        "code": -32600,
        "message": "Invalid request: Content-Type must be application/json, got 'text/plain'; "
        "POST one JSON-RPC message",
    }
    assert broken.status_code == 400
    assert broken.json()["error"]["code"] == -32700
    assert broken.json()["error"]["message"].startswith("Parse error: the body is not JSON (")
