"""The HTTP API and its guards: bad input gets a JSON error that says what to fix; state is never corrupted."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from simia.server.settings import ServerSettings


@pytest.fixture
def make_server(db_target: str, serve_on: Any) -> Any:
    """Every test here runs on a SQLite file and on a Postgres database."""
    return serve_on(db_target)


async def test_healthz_worlds_and_episode_lifecycle(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        assert (await http.get("/healthz")).json() == {"status": "ok", "worlds": 2}
        worlds = (await http.get("/v1/worlds")).json()["worlds"]
        assert [w["name"] for w in worlds] == ["mock", "retail"]
        assert worlds[0]["mcp_url"] == f"{server.url}/worlds/mock/mcp"
        assert worlds[0]["tools"][0] == {
            "name": "list_items",
            "title": "List items",
            "description": "List every item in the pantry with its quantity.",
            "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
            "outputSchema": worlds[0]["tools"][0]["outputSchema"],
            "annotations": {"readOnlyHint": True},
        }
        created = await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})
        assert created.status_code == 201
        episode = created.json()
        assert episode["id"].startswith("ep_") and len(episode["id"]) >= 3 + 32  # >= 192 random bits
        assert episode["mcp_url"] == f"{server.url}/episodes/{episode['id']}/mcp"
        assert episode["status"] == "active"
        listed = (await http.get("/v1/episodes", params={"world": "mock", "status": "active"})).json()["episodes"]
        assert [e["id"] for e in listed] == [episode["id"]]
        ended = (await http.post(f"/v1/episodes/{episode['id']}/end", json={})).json()
        assert ended["status"] == "ended"
        assert (await http.get("/v1/episodes", params={"status": "active"})).json()["episodes"] == []
        again = await http.post(f"/v1/episodes/{episode['id']}/end", json={})
        assert again.status_code == 200  # ending twice is harmless
        async with Client(episode["mcp_url"]) as client:
            late = await client.call_tool("list_items", {})
        assert late.is_error and late.meta and late.meta["simia/error_code"] == "conflict"
        assert late.content[0].text == f"episode {episode['id']} is ended; start a new one with POST /v1/episodes"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        ("POST", "/v1/episodes", b"{not json", 400, "request body is not valid JSON"),
        ("POST", "/v1/episodes", b"[1, 2]", 400, "request body must be a JSON object"),
        ("POST", "/v1/episodes", {}, 400, "missing field 'world'"),
        ("POST", "/v1/episodes", {"world": 3}, 400, "field 'world' must be a string, got integer"),
        ("POST", "/v1/episodes", {"world": "mock", "seed": "x"}, 400, "field 'seed' must be an integer, got string"),
        ("POST", "/v1/episodes", {"world": "mock", "mode": 1}, 400, "unknown field 'mode'; allowed: world, task, seed"),
        ("POST", "/v1/episodes", {"world": "shop"}, 404, "unknown world 'shop'; loaded worlds: mock, retail"),
        ("POST", "/v1/episodes", {"world": "mock", "task": "nope"}, 404, "unknown task 'nope' in world 'mock'"),
        ("GET", "/v1/episodes/ep_missing", None, 404, "no episode 'ep_missing'; create one with POST /v1/episodes"),
        ("POST", "/v1/episodes/ep_missing/fork", {}, 404, "no episode 'ep_missing'"),
        ("POST", "/v1/episodes/ep_missing/end", {}, 404, "no episode 'ep_missing'"),
        ("GET", "/v1/episodes?status=done", None, 400, "status must be active, ended or abandoned"),
        ("POST", "/episodes/ep_missing/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"}, 404, "no episode"),
        ("POST", "/worlds/shop/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"}, 404, "unknown world 'shop'"),
    ],
)
async def test_bad_requests_get_json_errors_that_say_what_to_fix(
    make_server: Any, method: str, path: str, body: Any, status: int, message: str
) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        json_type = {"content-type": "application/json"}
        kwargs = (
            {"content": body, "headers": json_type}
            if isinstance(body, bytes)
            else {"json": body}
            if body is not None
            else {}
        )
        response = await http.request(method, path, **kwargs)
    assert response.status_code == status
    assert message in response.json()["error"]["message"]


async def test_a_filter_on_a_world_or_task_nothing_has_says_so(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})
        misspelt = await http.get("/v1/episodes", params={"world": "mokc"})
        no_task = await http.get("/v1/episodes", params={"world": "mock", "task": "restock"})
        anywhere = await http.get("/v1/episodes", params={"task": "restock"})
        unused = await http.get("/v1/episodes", params={"world": "mock", "task": "count_apples"})
        none_ended = await http.get("/v1/episodes", params={"world": "mock", "status": "ended"})
    assert (misspelt.status_code, misspelt.json()["error"]["code"]) == (404, "not_found")
    assert misspelt.json()["error"]["message"].startswith("no episode is of world 'mokc'; worlds: ")
    assert "mock" in misspelt.json()["error"]["message"] and "GET /v1/worlds" in misspelt.json()["error"]["message"]
    assert no_task.status_code == anywhere.status_code == 404
    assert "no episode is of task 'restock' of world 'mock'; tasks of world 'mock': count_apples" in no_task.text
    assert anywhere.json()["error"]["message"].startswith("no episode is of task 'restock'; tasks: ")
    assert (unused.status_code, unused.json()) == (
        200,
        {"episodes": [], "more": False},
    )  # a served task, no episode yet
    assert (none_ended.status_code, none_ended.json()) == (200, {"episodes": [], "more": False})


async def test_the_list_is_newest_first_and_pages_with_limit_offset_and_more(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        ids = [(await http.post("/v1/episodes", json={"world": "mock"})).json()["id"] for _ in range(5)]
        whole = (await http.get("/v1/episodes")).json()
        first = (await http.get("/v1/episodes", params={"limit": 2})).json()
        second = (await http.get("/v1/episodes", params={"limit": 2, "offset": 2})).json()
        last = (await http.get("/v1/episodes", params={"limit": 2, "offset": 4, "world": "mock"})).json()
        past = (await http.get("/v1/episodes", params={"offset": 9, "world": "mock"})).json()
        bad = [
            (await http.get("/v1/episodes", params={k: v}))
            for k, v in [("limit", 0), ("limit", 1001), ("offset", "-1"), ("offset", "9" * 30)]
        ]
    newest = ids[::-1]
    assert ([e["id"] for e in whole["episodes"]], whole["more"]) == (newest, False)
    assert ([e["id"] for e in first["episodes"]], first["more"]) == (newest[:2], True)
    assert ([e["id"] for e in second["episodes"]], second["more"]) == (newest[2:4], True)
    assert ([e["id"] for e in last["episodes"]], last["more"]) == (newest[4:], False)
    assert past == {"episodes": [], "more": False}  # past the end of a world that has episodes: not a 404
    assert [b.status_code for b in bad] == [400, 400, 400, 400]
    assert bad[0].json()["error"]["message"] == "limit must be an integer from 1 to 1000, got '0'"
    assert bad[2].json()["error"]["message"] == "offset must be an integer from 0 to 1000000000, got '-1'"


async def test_fork_step_out_of_range_is_refused(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        response = await http.post(f"/v1/episodes/{episode['id']}/fork", json={"step": 3})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "step must be between 0 and 0 (the episode's last step), got 3"


async def test_malformed_mcp_json_is_a_protocol_error_and_the_server_keeps_serving(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        response = await http.post(
            f"/episodes/{episode['id']}/mcp", content=b'{"jsonrpc": "2.0", "id": 1, "meth', headers=headers
        )
        assert response.status_code == 400 and "Parse error" in response.text
        async with Client(episode["mcp_url"]) as client:
            assert not (await client.call_tool("list_items", {})).is_error


async def test_oversized_arguments_are_refused_before_any_model_call(make_server: Any) -> None:
    async with make_server(ServerSettings(max_argument_bytes=1000)) as server:
        async with httpx.AsyncClient() as http:
            episode = (await http.post(f"{server.url}/v1/episodes", json={"world": "mock"})).json()
        async with Client(episode["mcp_url"]) as client:
            result = await client.call_tool("get_item", {"name": "x" * 5000})
        assert result.is_error and result.content[0].text == "Arguments are too large (5011 bytes; the limit is 1000)."
        assert server.backend.requests == []


async def test_a_call_budget_hit_is_an_infra_error_recorded_on_the_episode(make_server: Any) -> None:
    async with make_server(ServerSettings(max_calls_per_episode=2)) as server:
        async with httpx.AsyncClient() as http:
            episode = (await http.post(f"{server.url}/v1/episodes", json={"world": "mock"})).json()
        async with Client(episode["mcp_url"]) as client:
            results = [await client.call_tool("list_items", {}) for _ in range(3)]
        async with httpx.AsyncClient() as http:
            stored = (await http.get(f"{server.url}/v1/episodes/{episode['id']}")).json()
    assert [r.is_error for r in results] == [False, False, True]
    assert results[2].meta and results[2].meta["simia/error_kind"] == "infra"
    assert results[2].content[0].text == "This episode reached its limit of 2 tool calls; no more calls are accepted."
    assert [(e["error_code"], e["error_kind"]) for e in stored["events"]] == [
        (None, None),
        (None, None),
        ("budget_calls", "infra"),
    ]
    assert stored["calls"] == 2


async def test_a_token_budget_hit_stops_further_simulation(make_server: Any) -> None:
    async with make_server(ServerSettings(max_sim_tokens_per_episode=10)) as server:
        async with httpx.AsyncClient() as http:
            episode = (await http.post(f"{server.url}/v1/episodes", json={"world": "mock"})).json()
        async with Client(episode["mcp_url"]) as client:
            first = await client.call_tool("list_items", {})
            second = await client.call_tool("list_items", {})
    assert not first.is_error and second.is_error
    assert second.meta and second.meta["simia/error_code"] == "budget_tokens"
    assert len(server.backend.requests) == 1


async def test_max_live_episodes_is_enforced(make_server: Any) -> None:
    async with make_server(ServerSettings(max_live_episodes=1)) as server, httpx.AsyncClient(base_url=server.url) as h:
        assert (await h.post("/v1/episodes", json={"world": "mock"})).status_code == 201
        refused = await h.post("/v1/episodes", json={"world": "mock"})
    assert refused.status_code == 503
    assert "reach the cap of 1; end finished ones" in refused.json()["error"]["message"]


async def test_tokens_are_required_and_episodes_are_private_to_their_principal(make_server: Any) -> None:
    settings = ServerSettings(named_tokens=(("alice", "secret-a"),), tokens=("secret-b",))
    async with make_server(settings) as server, httpx.AsyncClient(base_url=server.url) as http:
        alice, bob = {"authorization": "Bearer secret-a"}, {"authorization": "Bearer secret-b"}
        assert (await http.get("/healthz")).status_code == 200  # liveness needs no token
        missing = await http.post("/v1/episodes", json={"world": "mock"})
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == 'Bearer realm="simia"'
        assert "missing bearer token" in missing.json()["error"]["message"]
        wrong = await http.get("/v1/worlds", headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401 and "unknown bearer token" in wrong.json()["error"]["message"]
        episode = (await http.post("/v1/episodes", json={"world": "mock"}, headers=alice)).json()
        assert (await http.get(f"/v1/episodes/{episode['id']}", headers=alice)).status_code == 200
        assert (await http.get(f"/v1/episodes/{episode['id']}", headers=bob)).status_code == 404
        assert (await http.get("/v1/episodes", headers=bob)).json()["episodes"] == []
        assert (await http.post(f"/v1/episodes/{episode['id']}/end", json={}, headers=bob)).status_code == 404
        mcp_as_bob = await http.post(
            f"/episodes/{episode['id']}/mcp", headers=bob, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}
        )
        assert mcp_as_bob.status_code == 404
        mcp_anonymous = await http.post(
            f"/episodes/{episode['id']}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}
        )
        assert mcp_anonymous.status_code == 401
        async with httpx.AsyncClient(headers=alice) as authed:
            transport = streamable_http_client(episode["mcp_url"], http_client=authed)
            async with Client(transport) as client:
                assert not (await client.call_tool("list_items", {})).is_error


@pytest.mark.parametrize(
    ("headers", "status"),
    [({"host": "evil.example.com"}, 421), ({"origin": "http://evil.example.com"}, 403)],
)
async def test_dns_rebinding_protection_rejects_foreign_hosts_and_origins(
    make_server: Any, headers: dict[str, str], status: int
) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        for path in ("/v1/worlds", "/worlds/mock/mcp"):
            response = await http.post(path, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert response.status_code == status


async def test_metrics_count_calls_errors_and_live_episodes(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        async with Client(episode["mcp_url"]) as client:
            await client.call_tool("list_items", {})
            await client.call_tool("get_item", {})
        text = (await http.get("/metrics")).text
    assert 'simia_tool_calls_total{outcome="ok",tool="list_items",world="mock"} 1.0' in text
    assert 'simia_tool_errors_total{code="invalid_arguments",kind="agent",world="mock"} 1.0' in text
    assert "simia_live_episodes 1.0" in text
    assert 'simia_tool_call_latency_seconds_count{world="mock"} 2.0' in text
