"""What an API request says is read one way only: a JSON key given twice, two bearer tokens, a body that is not
`application/json`, a seed sent as `"7"` or `true` are refused with a message naming the problem, never resolved
to one reading; and a posted transcript over `--max-transcript-bytes` is refused before the judge reads it.
In-process: the main app and the ORS listener, the mock world's flawless fake."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from simia.clients.prompt import agent_system_prompt
from simia.server import ServerSettings, serving
from simia.server.ors import OrsApp

TOKENS = (("alice", "alice-secret"), ("bob", "bob-secret"))
ALICE = {"Authorization": "Bearer alice-secret"}
JSON = {"Content-Type": "application/json"}


@contextlib.asynccontextmanager
async def ors(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    listener = OrsApp(app.service, app.settings, app.drain, system_prompt=agent_system_prompt, rewards=app.rewards)
    async with serving(listener) as port, httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        yield http


async def test_a_json_key_given_twice_is_a_400_naming_it_on_every_protocol(make_server: Any) -> None:
    twice = b'{"world": "mock", "seed": 1, "seed": 2}'
    settings = ServerSettings(named_tokens=TOKENS)
    async with make_server(settings) as server, httpx.AsyncClient(base_url=server.url, headers=ALICE) as http:
        answers = [
            await http.post("/v1/episodes", content=twice, headers=JSON),
            await http.post("/openenv/mock/reset", content=b'{"task": "a", "task": "b"}', headers=JSON),
            await http.post(
                "/nemo-gym/mock/seed_session",
                content=b'{"responses_create_params": {"input": "x", "input": "y"}}',
                headers=JSON,
            ),
            await http.post(
                "/openenv/mock/mcp",
                content=b'{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "tools/list"}',
                headers=JSON,
            ),
        ]
        async with ors(server.app) as ors_http:
            ors_answer = await ors_http.post(
                "/mock/tasks", content=b'{"split": "train", "split": "test"}', headers=ALICE
            )
        listed = (await http.get("/v1/episodes")).json()["episodes"]
    assert [a.status_code for a in answers] == [400, 400, 400, 400]
    assert [a.json()["error"]["message"] for a in answers] == [
        f"request body gives the key {key!r} twice in one object; give each key once"
        for key in ("seed", "task", "input", "id")
    ]
    assert ors_answer.status_code == 400 and "'split' twice" in ors_answer.json()["detail"]
    assert listed == []  # nothing was created from a body with two readings


async def test_two_authorization_headers_are_refused_never_resolved_to_the_last(make_server: Any) -> None:
    settings = ServerSettings(named_tokens=TOKENS)
    async with make_server(settings) as server:
        two = [(b"Authorization", b"Bearer bob-secret"), (b"Authorization", b"Bearer alice-secret")]
        async with httpx.AsyncClient(base_url=server.url) as http:
            answer = await http.get("/v1/episodes", headers=httpx.Headers(two))
            one = await http.get("/v1/episodes", headers=ALICE)
        async with ors(server.app) as ors_http:
            keys = httpx.Headers([(b"X-API-Key", b"bob-secret"), (b"X-API-Key", b"alice-secret")])
            ors_answer = await ors_http.post("/create_session", json={}, headers=keys)
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "duplicate_authorization")
    assert "2 Authorization headers" in answer.json()["error"]["message"]
    assert one.status_code == 200
    assert ors_answer.status_code == 400


async def test_api_posts_take_application_json_only_and_mcp_still_works(make_server: Any) -> None:
    body = json.dumps({"world": "mock"}).encode()
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        form = await http.post("/v1/episodes", content=body, headers={"Content-Type": "text/plain"})
        bare = await http.post("/v1/episodes", content=body)
        charset = await http.post(
            "/v1/episodes", content=body, headers={"Content-Type": "application/json; charset=utf-8"}
        )
        episode = charset.json()
        openenv = await http.post("/openenv/mock/reset", data={"task": "restock_milk"})
        nemo = await http.post("/nemo-gym/mock/seed_session", content=b"{}", headers={"Content-Type": "text/json"})
        rpc = await http.post(
            "/openenv/mock/mcp", content=b"{}", headers={"Content-Type": "application/x-www-form-urlencoded"}
        )
        ended = await http.post(f"/v1/episodes/{episode['id']}/end")  # no body: no type to declare
        async with Client(streamable_http_client(f"{server.url}/worlds/mock/mcp")) as mcp:
            tools = await mcp.list_tools()
    assert [a.status_code for a in (form, bare, openenv, nemo, rpc)] == [415] * 5
    assert form.json()["error"] == {
        "code": "unsupported_media_type",
        "message": "Content-Type 'text/plain' is not accepted: send the body as JSON with "
        "'Content-Type: application/json' (curl: --json BODY)",
    }
    assert "without a Content-Type" in bare.json()["error"]["message"]
    assert (charset.status_code, ended.status_code) == (201, 200)
    assert tools.tools  # the MCP SDK sends application/json: its endpoints are untouched


async def test_ors_takes_a_seed_as_an_integer_only(make_server: Any) -> None:
    async with make_server() as server, ors(server.app) as http:
        answers = []
        for seed in ("7", True, 7):
            made = await http.post("/create_session", json={})
            sid = made.text.split("data: ", 1)[1].split("\n", 1)[0]
            spec = {"env_name": "mock", "task_spec": {"id": "restock_milk", "seed": seed}}
            answers.append(await http.post("/create", json=spec, headers={"X-Session-ID": sid}))
        index = await http.post("/mock/task", json={"split": "train", "index": "0"})
    assert [a.status_code for a in answers] == [400, 400, 200]
    assert "seed" in answers[0].json()["detail"] and "seed" in answers[1].json()["detail"]
    assert index.status_code == 400 and "index" in index.json()["detail"]


async def test_a_posted_transcript_over_the_limit_is_a_413_naming_the_flag_and_the_episode_stays_open(
    make_server: Any,
) -> None:
    big = [{"role": "user", "content": "x" * 3000}, {"role": "assistant", "content": "Done."}]
    small = [{"role": "user", "content": "Milk to 4."}, {"role": "assistant", "content": "Done."}]
    settings = ServerSettings(max_transcript_bytes=2000)
    async with make_server(settings) as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        over = await http.post(f"/v1/episodes/{episode['id']}/end", json={"transcript": big})
        still = (await http.get(f"/v1/episodes/{episode['id']}")).json()["status"]
        reset = (await http.post("/openenv/mock/reset", json={})).json()["observation"]["episode_id"]
        action = {"type": "end", "transcript": big}
        openenv = await http.post("/openenv/mock/step", json={"action": action, "episode_id": reset})
        await http.post("/nemo-gym/mock/seed_session", json={"responses_create_params": {"input": "x" * 3000}})
        nemo = await http.post(
            "/nemo-gym/mock/verify", json={"responses_create_params": {"input": "x" * 3000}, "response": {"output": []}}
        )
        fits = await http.post(f"/v1/episodes/{episode['id']}/end", json={"transcript": small})
    assert (over.status_code, over.json()["error"]["code"], still) == (413, "payload_too_large", "active")
    assert "--max-transcript-bytes 2000" in over.json()["error"]["message"]
    assert (openenv.status_code, nemo.status_code, fits.status_code) == (413, 413, 200)
