"""What the episodes service keeps in memory: a closed episode's window and record are dropped at once (the store
keeps everything), so memory does not grow with the number of episodes served (bench/soak.py measures it)."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx
from mcp import Client
from simia.server.settings import ServerSettings


async def test_ending_an_episode_or_sweeping_it_idle_drops_it_from_memory(make_server: Any) -> None:
    async with make_server(ServerSettings(idle_timeout=3600)) as server, httpx.AsyncClient(base_url=server.url) as http:
        service = server.app.service
        ended, idle = [(await http.post("/v1/episodes", json={"world": "mock"})).json() for _ in range(2)]
        for episode in (ended, idle):
            async with Client(episode["mcp_url"]) as client:
                await client.call_tool("set_quantity", {"name": "milk", "qty": 2})
        assert {ended["id"], idle["id"]} <= set(service._live)
        await http.post(f"/v1/episodes/{ended['id']}/end", json={})
        assert ended["id"] not in service._live
        service.settings.idle_timeout = 0.0  # every active episode is idle now (the server's sweeper waits 60 s)
        assert await service.sweep_idle() == [idle["id"]]
        assert idle["id"] not in service._live
        detail = (await http.get(f"/v1/episodes/{idle['id']}")).json()  # the store still has all of it
        assert (detail["status"], len(detail["events"])) == ("abandoned", 1)
        async with Client(idle["mcp_url"]) as client:
            late = await client.call_tool("get_item", {"name": "milk"})
        assert late.is_error and late.meta and late.meta["simia/error_code"] == "conflict"
        assert idle["id"] not in service._live  # a call on a closed episode leaves nothing behind either
