"""simia replicas on Postgres behind a real HAProxy doing round robin (`simia.testing.replicas`), all real processes.

kill -9 of a replica and a restart of Postgres under load (every acknowledged call stored exactly once,
checked in Postgres), one episode hammered through the balancer, and which MCP URLs need sticky sessions.
The kill rounds are `bench/replicas.py kill`'s, which runs 20 of them for the README's figure.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2 as httpx
import pytest
from mcp import Client, MCPError
from simia.sim.records import EpisodeRecord, EventRecord
from simia.sim.storage import open_store
from simia.sim.world import apply_patch
from simia.testing import FakeProvider
from simia.testing.postgres import PostgresCluster
from simia.testing.replicas import Replicas, haproxy_config

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
ERA = "2025-06-18"
MODERN = "2026-07-28"
CLIENT = {"name": "t", "version": "0"}
HANDSHAKE = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def bench_replicas() -> ModuleType:
    """`bench/replicas.py`: its kill rounds, agents and store checks."""
    return load("bench_replicas", BENCH / "replicas.py")


@functools.cache
def replicas_test() -> ModuleType:
    """tests/server/test_replicas.py (the two-replica test without a balancer), for its simulator."""
    return load("pg_test_replicas", Path(__file__).with_name("test_replicas.py"))


def counting_answer(body: dict[str, Any]) -> dict[str, Any]:
    """test_replicas.py's simulator: `set_quantity` adds one to the quantity it is shown."""
    answer: dict[str, Any] = replicas_test().counting_answer(body)
    return answer


@pytest.mark.processes  # Replicas: simia serve processes and HAProxy
async def test_300_agents_through_the_balancer_lose_no_acknowledged_call_when_a_replica_is_killed_5_times(
    pg_url: str,
) -> None:
    bench = bench_replicas()
    async with Replicas(2, db=pg_url, provider_latency=0.02) as deployment:
        rounds = [await bench.kill_round(deployment, n % 2, agents=300, calls=6) for n in range(5)]
    for round_ in rounds:
        # in Postgres, each episode's events are exactly its acknowledged calls, seq 1..8; integrity check ok
        assert round_.problems == []
        assert round_.tally.count == 300 * 8
        assert round_.acked_while_down > 0  # the episodes went on on the surviving replica
        assert round_.restarted_served > 0  # and the killed one came back and served
    assert sum(r.tally.failures.total() for r in rounds) > 0  # the kills did cut calls that had to be retried


@pytest.mark.processes
@pytest.mark.postgres  # its own cluster, restarted
async def test_postgres_restarted_mid_load_fails_calls_as_infra_errors_and_they_resume_with_no_half_written_event() -> (
    None
):
    bench = bench_replicas()
    agents, calls = 50, 30
    with PostgresCluster() as cluster:
        async with Replicas(2, db=cluster.create_database(), provider_latency=0.02) as deployment:
            episodes = await bench.create_episodes(deployment.port, agents)
            tally = bench.Tally()

            async def restart_postgres() -> None:
                await tally.reached(agents * calls // 3)
                await asyncio.to_thread(cluster.stop, "immediate")  # a crash: no shutdown checkpoint
                await asyncio.sleep(1.0)
                await asyncio.to_thread(cluster.start)

            deadline = time.monotonic() + 120
            await asyncio.gather(
                restart_postgres(), bench.run_agents(deployment.port, episodes, 1, calls, tally, deadline)
            )
            problems = await bench.store_problems(deployment.db, tally.acked)
    print(f"postgres restart: {tally.count} calls acknowledged; failed attempts, retried: {dict(tally.failures)}")
    assert tally.count == agents * calls  # every call went through in the end
    assert tally.failures  # some failed while Postgres was down ...
    # ... each cleanly: a tool call's infra error, or the episode gate's 503 (it could not check the owner)
    assert set(tally.failures) <= {"infra database_unavailable", "HTTP 503"}, tally.failures
    assert problems == []  # events == acknowledged calls, seq gap-free, integrity check ok


@pytest.mark.processes
async def test_two_replicas_hammering_one_episode_through_the_balancer_commit_its_patches_in_order(
    pg_url: str,
) -> None:
    fake = FakeProvider(counting_answer)  # set_quantity adds one to the quantity it is shown
    async with fake.running():
        backend = ["--backend", "openai-compatible:fake", "--base-url", fake.base_url]
        async with Replicas(2, db=pg_url, backend=backend) as deployment, httpx.AsyncClient() as http:
            episode = (await http.post(f"{deployment.url}/v1/episodes", json={"world": "mock"})).json()
            assert episode["mcp_url"].startswith(deployment.url)  # --public-url: the balancer's address
            seqs: list[int] = []

            async def agent(first: int) -> None:
                async with Client(episode["mcp_url"]) as client:
                    for qty in range(first, first + 10):  # distinct arguments: no call is taken for a retry
                        result = await client.call_tool("set_quantity", {"name": "milk", "qty": qty})
                        assert not result.is_error and result.meta, result
                        seqs.append(int(result.meta["simia/seq"]))

            await asyncio.wait_for(asyncio.gather(*(agent(10 * i) for i in range(6))), timeout=240)
            served = [await replica.calls_served() for replica in deployment.replicas]
    assert sorted(seqs) == list(range(1, 61))
    assert min(served) > 0 and sum(served) == 60  # round robin: both replicas served the one episode
    store = open_store(pg_url)
    try:
        record = await store.get_episode(episode["id"])
        events = await store.events(episode["id"])
        assert record is not None
        assert [e.seq for e in events] == list(range(1, 61))  # gap-free, none lost, none doubled
        assert [e.output["qty"] for e in events if e.output] == list(range(1, 61))  # each saw its predecessor
        replayed = await store.state_at(episode["id"], 0)
        for event in events:  # the final state is the recorded patches applied in order
            replayed = apply_patch(replayed, event.state_patch, None)
        final = await store.state_at(episode["id"], record.seq)
        assert replayed == final and final["items"]["milk"]["qty"] == 60
        assert await store.integrity_check() == "ok"
    finally:
        await store.close()


@pytest.mark.processes
async def test_a_sessionless_episode_url_needs_no_sticky_sessions_its_calls_alternate_replicas(pg_url: str) -> None:
    async with Replicas(2, db=pg_url) as deployment, httpx.AsyncClient() as http:
        episode = (await http.post(f"{deployment.url}/v1/episodes", json={"world": "mock"})).json()
        async with Client(episode["mcp_url"]) as client:  # MCP 2026-07-28: no session, one request per call
            for qty in (3, 7, 11):
                changed = await client.call_tool("set_quantity", {"name": "milk", "qty": qty})
                read = await client.call_tool("get_item", {"name": "milk"})  # on the other replica
                assert changed.structured_content == read.structured_content == {"name": "milk", "qty": qty}
        served = [await replica.calls_served() for replica in deployment.replicas]
    assert min(served) > 0 and sum(served) == 6  # round robin (other requests in between may shift the split)


@pytest.mark.processes
async def test_a_world_url_session_needs_sticky_sessions_without_them_it_fails_at_once_with_a_clear_error(
    pg_url: str,
) -> None:
    async with Replicas(2, db=pg_url) as deployment, httpx.AsyncClient() as http:
        world = f"{deployment.url}/worlds/mock/mcp"
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": ERA, "capabilities": {}, "clientInfo": CLIENT}}  # fmt: skip
        opened = await http.post(world, headers=HANDSHAKE, json=init)
        session = {
            **HANDSHAKE,
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "MCP-Protocol-Version": "2025-06-18",
        }
        elsewhere = await http.post(world, headers=session, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert elsewhere.headers["x-simia-replica"] != opened.headers["x-simia-replica"]  # round robin
        assert elsewhere.status_code == 404
        assert elsewhere.json() == {
            "error": {"code": "not_found", "message": "no such MCP session; initialize a new one"}
        }
        with pytest.raises(ExceptionGroup) as raised:  # the SDK client: an error at once, no hang
            async with asyncio.timeout(30), Client(world) as client:
                await client.call_tool("get_item", {"name": "milk"})
        assert raised.group_contains(MCPError, match="Session terminated", depth=None)
    async with Replicas(2, db=pg_url, sticky=True) as deployment:
        async with Client(f"{deployment.url}/worlds/mock/mcp") as client:
            for qty in (1, 2, 3, 4):
                result = await client.call_tool("set_quantity", {"name": "milk", "qty": qty})
                assert not result.is_error and result.meta and result.meta["simia/seq"] == qty
        served = sorted([await replica.calls_served() for replica in deployment.replicas])
    assert served == [0, 4]  # the session stayed on the replica that holds it


def test_the_docker_compose_example_uses_the_haproxy_config_these_tests_run() -> None:
    example = (ROOT / "examples" / "replicas" / "haproxy.cfg").read_text(encoding="utf-8")
    assert example == haproxy_config(8080, ["simia-1:8765", "simia-2:8765"], bind="0.0.0.0", sticky=True)


@pytest.mark.processes
@pytest.mark.postgres  # its own cluster, restarted
async def test_an_episode_url_a_replica_cannot_check_while_postgres_is_down_is_a_503_that_says_retry(
    serve_on: Any,
) -> None:
    """The episode gate checks the episode's owner in the store when the replica has not served it yet."""
    with PostgresCluster() as cluster:  # its own cluster: stopping the session's would stop other tests
        db = cluster.create_database()
        async with serve_on(db)() as first, httpx.AsyncClient() as http:
            episode = (await http.post(f"{first.url}/v1/episodes", json={"world": "mock"})).json()
            async with serve_on(db)() as other:  # another replica: it has never seen the episode
                cluster.stop("immediate")
                meta = {f"io.modelcontextprotocol/{k}": v for k, v in
                        [("protocolVersion", MODERN), ("clientCapabilities", {}), ("clientInfo", CLIENT)]}  # fmt: skip
                call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}
                headers = {**HANDSHAKE, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}
                refused = await http.post(f"{other.url}/episodes/{episode['id']}/mcp", headers=headers, json=call)
                cluster.start()
                answers = []
                while not answers or answers[-1].status_code == 503:  # pooled connections from before the restart
                    assert len(answers) < 40, "still refused 40 tries after Postgres came back"  # fail one try each
                    answers.append(await http.post(f"{other.url}/episodes/{episode['id']}/mcp", headers=headers,
                                                    json=call))  # fmt: skip
    assert refused.status_code == 503
    assert refused.json() == {
        "error": {"code": "database_unavailable", "message": "the database is unavailable; retry shortly"}
    }
    assert answers[-1].status_code == 200 and "set_quantity" in answers[-1].text  # the tools, once Postgres is back
    assert all(a.json()["error"]["code"] == "database_unavailable" for a in answers[:-1])


async def test_the_kill_check_reports_an_acknowledged_call_the_store_lost_or_a_call_it_holds_twice(
    pg_url: str,
) -> None:
    """Test of the test: the store check the kill rounds rely on can fail."""
    bench = bench_replicas()
    store = open_store(pg_url)
    try:
        await store.create_episode(EpisodeRecord(id="ep_check", world="mock", world_hash="h", initial_state={},
                                                 state={}))  # fmt: skip
        for _ in range(3):
            event = EventRecord(tool="get_item", arguments={}, output={}, text="", is_error=False)
            await store.commit_event("ep_check", event)
    finally:
        await store.close()
    assert await bench.store_problems(pg_url, {"ep_check": [1, 2, 3]}) == []
    lost = await bench.store_problems(pg_url, {"ep_check": [1, 2, 3, 4]})  # acknowledged 4, stored 3
    twice = await bench.store_problems(pg_url, {"ep_check": [1, 2]})  # stored a third the agent got no answer for
    assert lost == ["ep_check: acknowledged seqs [1, 2, 3, 4], stored [1, 2, 3]"]
    assert twice == ["ep_check: acknowledged seqs [1, 2], stored [1, 2, 3]"]
