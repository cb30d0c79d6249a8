"""OpenEnv's plain-HTTP routes on an in-process server: an episode answers on its own world's URL only, and a call
on an ended one says how OpenEnv starts the next (openenv's own clients are tested in tests/trainers)."""

from __future__ import annotations

import json
from typing import Any

import httpx2 as httpx
import websockets

STEP = {"type": "call_tool", "tool_name": "get_item", "arguments": {"name": "milk"}}


async def test_an_episode_is_unknown_on_another_worlds_url(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        reset = (await http.post("/openenv/mock/reset", json={})).json()
        episode_id = reset["observation"]["episode_id"]
        elsewhere = await http.get("/openenv/retail/state", params={"episode_id": episode_id})
        stepped = await http.post("/openenv/retail/step", json={"episode_id": episode_id, "action": STEP})
        here = await http.get("/openenv/mock/state", params={"episode_id": episode_id})
    for answer in (elsewhere, stepped):
        assert answer.status_code == 404
        assert answer.json()["error"]["message"] == (
            f"no episode {episode_id!r} in world 'retail'; reset on this world's URL"
        )
    assert here.json() == {"episode_id": episode_id, "step_count": 0}


async def test_a_call_on_an_ended_episode_is_a_409_that_says_to_reset(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode_id = (await http.post("/openenv/mock/reset", json={})).json()["observation"]["episode_id"]
        ended = await http.post("/openenv/mock/step", json={"episode_id": episode_id, "action": {"type": "end"}})
        again = await http.post("/openenv/mock/step", json={"episode_id": episode_id, "action": {"type": "end"}})
        called = await http.post("/openenv/mock/step", json={"episode_id": episode_id, "action": STEP})
        detail = (await http.get(f"/v1/episodes/{episode_id}")).json()
    assert ended.status_code == 200 and ended.json()["done"] is True
    assert again.status_code == 200  # ending again answers the stored verdict
    assert called.status_code == 409
    assert called.json()["error"] == {
        "code": "conflict",
        "message": f"episode {episode_id} is ended; POST /openenv/mock/reset starts a new one",
    }
    assert detail["steps"] == 0


async def test_a_request_id_used_again_for_another_call_is_refused_not_answered_with_the_first(
    make_server: Any,
) -> None:
    """The same `request_id` with the same call is a retry (its committed answer, one event); with another call it
    is the client's bug: answered with the first call's result, the second call would silently never run."""
    write = {"type": "call_tool", "tool_name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode_id = (await http.post("/openenv/mock/reset", json={})).json()["observation"]["episode_id"]
        body = {"episode_id": episode_id, "request_id": "r1"}
        first = await http.post("/openenv/mock/step", json={**body, "action": write})
        retried = await http.post("/openenv/mock/step", json={**body, "action": write})
        other = await http.post("/openenv/mock/step", json={**body, "action": STEP})
        detail = (await http.get(f"/v1/episodes/{episode_id}")).json()
    assert first.json() == retried.json()
    assert other.status_code == 400
    assert other.json()["error"]["message"] == (
        "this request id was used for another call of the episode ('set_quantity', call 1); "
        "give each call its own request id"
    )
    assert [e["tool"] for e in detail["events"]] == ["set_quantity"]


async def test_over_the_websocket_a_call_after_the_end_says_to_reset_and_a_binary_frame_is_an_error(
    make_server: Any,
) -> None:
    """OpenEnv starts an episode with a `reset` message, not simia's POST /v1/episodes; a binary frame is answered
    with an error frame and the socket stays open (it was closed, code 1000, without a word)."""
    call = {"type": "step", "data": STEP}
    async with make_server() as server:
        url = server.url.replace("http://", "ws://") + "/openenv/mock/ws"
        async with websockets.connect(url) as socket:
            await socket.send(json.dumps({"type": "reset", "data": {}}))
            episode_id = json.loads(await socket.recv())["data"]["observation"]["episode_id"]
            await socket.send(json.dumps({"type": "step", "data": {"type": "end"}}))
            assert json.loads(await socket.recv())["data"]["done"] is True
            await socket.send(json.dumps(call))
            after_end = json.loads(await socket.recv())
            await socket.send(b"\x00\x01")
            binary = json.loads(await socket.recv())
            await socket.send(json.dumps({"type": "reset", "data": {}}))
            again = json.loads(await socket.recv())
    assert after_end == {
        "type": "error",
        "data": {
            "message": f"episode {episode_id} is ended; send a reset message to start a new one",
            "code": "EXECUTION_ERROR",
            "simia_code": "conflict",
        },
    }
    assert binary == {
        "type": "error",
        "data": {"message": "a binary frame: send each message as JSON in a text frame", "code": "INVALID_JSON"},
    }
    assert again["data"]["observation"]["episode_id"] != episode_id
