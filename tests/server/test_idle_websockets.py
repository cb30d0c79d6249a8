"""OpenEnv WebSockets that stay silent are closed: after `--ws-idle-timeout` of their own (1001, saying why), and at
once when the idle sweep abandons their episode; a socket in use stays open."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import websockets
from simia.server import ServerSettings

pytestmark = pytest.mark.timeout(60)


async def test_a_silent_websocket_is_closed_after_its_idle_timeout_and_a_busy_one_is_not(make_server: Any) -> None:
    async with make_server(ServerSettings(ws_idle_timeout=0.5)) as server:
        url = server.url.replace("http://", "ws://") + "/openenv/mock/ws"
        async with websockets.connect(url) as silent, websockets.connect(url) as busy:
            for _ in range(4):  # 1 s of messages every 0.25 s: never idle for 0.5 s
                await busy.send(json.dumps({"type": "state"}))
                assert json.loads(await busy.recv())["type"] == "state"
                await asyncio.sleep(0.25)
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(silent.recv(), 10)
            await busy.send(json.dumps({"type": "state"}))
            still = json.loads(await busy.recv())
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1001, "idle for 0.5 s (--ws-idle-timeout)")
    assert still["type"] == "state"


async def test_a_websocket_whose_episode_the_idle_sweep_abandoned_is_closed(make_server: Any) -> None:
    async with make_server(ServerSettings(idle_timeout=0.2)) as server:
        url = server.url.replace("http://", "ws://") + "/openenv/mock/ws"
        async with websockets.connect(url) as socket:
            await socket.send(json.dumps({"type": "reset", "data": {"task": "restock_milk"}}))
            episode_id = json.loads(await socket.recv())["data"]["observation"]["episode_id"]
            with pytest.raises(websockets.ConnectionClosed) as closed:  # the app's sweeper runs every second
                await asyncio.wait_for(socket.recv(), 10)
        episode = await server.store.get_episode(episode_id)
    assert episode is not None and episode.status == "abandoned"
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (
        1001,
        "its episode was abandoned after the idle timeout",
    )
