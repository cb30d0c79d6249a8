"""Several `simia serve` processes on one database: any replica serves any episode, calls stay serialized.

The simulator (a fake OpenAI-compatible provider over real HTTP) answers `set_quantity` by
adding one to the milk quantity it is shown: a call that ran on a state other than the one
the previous call committed would repeat a number, so the final quantity and each event's
output prove that every call saw its predecessor's committed state, whichever replica ran it.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from mcp import Client
from simia.sim.storage import open_store
from simia.sim.world import apply_patch
from simia.testing import FakeProvider, mock_world_answer
from simia.testing.mock_world import parse_simulator_prompt
from simia.testing.postgres import PostgresCluster
from simia.testing.processes import ServeProcess, serve_process

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
MODERN = "2026-07-28"  # the sessionless protocol revision: every request carries its own metadata
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "simia-test", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
HEADERS = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Accept": "application/json, text/event-stream"}


def counting_answer(body: dict[str, Any]) -> dict[str, Any]:
    """`set_quantity` adds one to the quantity in the state it is shown (its `qty` argument only makes calls
    distinct); every other call as the mock world's perfect simulator answers it."""
    tool, args, state = parse_simulator_prompt(str(body["messages"][1]["content"]))
    if tool != "set_quantity":
        return mock_world_answer(body)
    qty = state["items"][args["name"]]["qty"] + 1
    patch = [{"op": "replace", "path": f"/items/{args['name']}/qty", "value": qty}]
    return {"is_error": False, "error_code": None, "message": "ok", "output": {"name": "milk", "qty": qty},
            "state_patch": patch}  # fmt: skip


def replica(db: str, base_url: str) -> ServeProcess:
    """A real `simia serve` process on `db`, simulating with the fake provider at `base_url`."""
    return serve_process(
        "--db", db, "--worlds-dir", str(ROOT / "tool_specs"), "--world", "mock",
        "--backend", "openai-compatible:fake", "--base-url", base_url, "--log-level", "warning",
    )  # fmt: skip


async def test_two_replicas_hammering_one_episode_serialize_its_calls(pg_url: str) -> None:
    db = pg_url
    fake = FakeProvider(counting_answer)
    async with fake.running(), AsyncExitStack() as stack:
        urls = [(await stack.enter_async_context(replica(db, fake.base_url))).url for _ in range(2)]
        async with httpx.AsyncClient() as http:
            episode = (await http.post(f"{urls[0]}/v1/episodes", json={"world": "mock"})).json()
        seqs: list[int] = []

        async def agent(url: str, first: int) -> None:
            async with Client(f"{url}/episodes/{episode['id']}/mcp") as client:
                for qty in range(first, first + 10):  # distinct arguments: no call is taken for a retry
                    result = await client.call_tool("set_quantity", {"name": "milk", "qty": qty})
                    assert not result.is_error and result.meta, result
                    seqs.append(int(result.meta["simia/seq"]))

        # three agents on each replica, all on the same episode URL at once
        await asyncio.wait_for(asyncio.gather(*(agent(urls[i % 2], 10 * i) for i in range(6))), timeout=240)
        async with httpx.AsyncClient() as http:
            for n in range(61, 71):  # sessionless (2026-07-28) calls alternating replicas: no stickiness needed
                params = {"name": "set_quantity", "arguments": {"name": "milk", "qty": n}, "_meta": META}
                answer = await http.post(
                    f"{urls[n % 2]}/episodes/{episode['id']}/mcp",
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params},
                    headers={**HEADERS, "Mcp-Name": "set_quantity"},
                )
                result = answer.json()["result"]
                assert not result["isError"] and result["_meta"]["simia/seq"] == n, result
            # the other replica sees what the first committed
            stored = (await http.get(f"{urls[1]}/v1/episodes/{episode['id']}")).json()
            metrics = [(await http.get(f"{url}/metrics")).text for url in urls]

    def total(name: str) -> float:
        return sum(float(line.split()[-1]) for m in metrics for line in m.splitlines() if line.startswith(name))

    assert total("simia_episode_conflicts_total") > 0  # the replicas did race for the episode
    assert total("simia_episode_catch_ups_total") >= 9  # each alternating call took the other replica's event
    assert sorted(seqs) == list(range(1, 61))  # acknowledged once each, gap-free
    events = stored["events"]
    assert [e["seq"] for e in events] == list(range(1, 71))  # none lost, none duplicated
    assert [e["output"]["qty"] for e in events] == list(range(1, 71))  # each saw its predecessor's state
    store = open_store(db)
    try:
        record = await store.get_episode(episode["id"])
        assert record is not None
        replayed = await store.state_at(episode["id"], 0)
        for event in await store.events(episode["id"]):
            replayed = apply_patch(replayed, event.state_patch, None)
        final = await store.state_at(episode["id"], record.seq)
        assert replayed == final and final["items"]["milk"]["qty"] == 70
        assert record.seq == 70 and record.calls == 70
        assert await store.integrity_check() == "ok"
    finally:
        await store.close()


async def test_a_postgres_restart_fails_calls_cleanly_and_they_resume_after_it(serve_on: Any) -> None:
    with PostgresCluster() as cluster:  # its own cluster: stopping the session's would stop other tests
        db = cluster.create_database()
        async with serve_on(db)() as server, httpx.AsyncClient(base_url=server.url) as http:
            episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
            async with Client(episode["mcp_url"]) as client:
                first = await client.call_tool("set_quantity", {"name": "milk", "qty": 1})
                assert not first.is_error
                cluster.stop("immediate")
                down = await client.call_tool("set_quantity", {"name": "milk", "qty": 2})
                assert down.is_error and down.meta and down.meta["simia/error_code"] == "database_unavailable"
                assert down.meta["simia/error_kind"] == "infra"
                refused = await http.get(f"/v1/episodes/{episode['id']}")
                assert refused.status_code == 503 and refused.json()["error"]["code"] == "database_unavailable"
                assert cluster.password not in refused.text
                cluster.start()
                again = await client.call_tool("set_quantity", {"name": "milk", "qty": 3})
                assert not again.is_error and again.meta and again.meta["simia/seq"] == 2
            stored = (await http.get(f"/v1/episodes/{episode['id']}")).json()
        assert [(e["seq"], e["arguments"]["qty"]) for e in stored["events"]] == [(1, 1), (2, 3)]
        store = open_store(db)
        assert await store.integrity_check() == "ok"
        await store.close()
