"""Every HTTP body has a limit: the API reads no further than 4 MiB (413, declared or streamed), MCP endpoints
likewise; unknown routes and methods answer in the API's error shape."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
import pytest
from simia.server.app import MAX_JSON_BODY

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
