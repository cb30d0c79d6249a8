"""The Postgres store's connections (`simia.sim.storage._pg_connections`) against a real server."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from simia.sim.errors import StoreUnavailable
from simia.sim.records import EpisodeRecord
from simia.sim.storage import PgStore
from simia.sim.storage._pg_connections import Connections
from simia.testing.postgres import PostgresCluster


def connections(url: str, size: int, timeout: float = 10.0) -> tuple[Connections, list[int]]:
    """Connections to `url`, and the list of connections opened so far (their count is its length)."""
    opened: list[int] = []

    async def connect() -> psycopg.AsyncConnection[dict[str, Any]]:
        opened.append(1)
        return await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row)

    return Connections(connect, size, timeout), opened


async def test_at_most_size_are_lent_at_once_and_waiters_are_served_in_arrival_order(pg_url: str) -> None:
    pool, opened = connections(pg_url, 3)
    lent, most, order = 0, 0, []
    release, three_lent = asyncio.Event(), asyncio.Event()

    async def operation(n: int) -> None:
        nonlocal lent, most
        conn = await pool.take()
        lent += 1
        most = max(most, lent)
        order.append(n)
        if len(order) == 3:
            three_lent.set()
        await (await conn.execute("SELECT 1")).fetchall()
        await release.wait()
        lent -= 1
        await pool.give(conn)

    tasks = [asyncio.create_task(operation(n)) for n in range(10)]
    await asyncio.wait_for(three_lent.wait(), timeout=30)
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
    await pool.close()
    assert most == 3 and len(opened) == 3  # the 7 later operations reused the 3 connections
    assert sorted(order[:3]) == [0, 1, 2]  # the first three each opened a connection, done in any order
    assert order[3:] == list(range(3, 10))


async def test_a_take_that_finds_no_free_place_in_time_times_out_and_frees_nothing(pg_url: str) -> None:
    pool, _ = connections(pg_url, 1, timeout=0.05)
    held = await pool.take()
    with pytest.raises(TimeoutError):
        await pool.take()
    await pool.give(held)
    again = await pool.take()  # the timed-out waiter left no place taken
    assert again is held
    await pool.give(again)
    await pool.close()


async def test_a_connection_given_back_inside_a_transaction_is_closed_not_lent_again(pg_url: str) -> None:
    pool, opened = connections(pg_url, 1)
    conn = await pool.take()
    await conn.execute("BEGIN")  # an operation that failed before its transaction ended
    await pool.give(conn)
    assert conn.closed
    fresh = await pool.take()
    assert fresh is not conn and len(opened) == 2
    assert (await (await fresh.execute("SELECT 1 AS one")).fetchone()) == {"one": 1}
    await pool.give(fresh)
    await pool.close()
    assert fresh.closed


@pytest.mark.postgres  # its own cluster, restarted
async def test_after_the_server_restarts_one_operation_fails_and_the_next_ones_reconnect() -> None:
    with PostgresCluster() as cluster:  # its own cluster: stopping the session's would stop other tests
        store = PgStore(cluster.create_database(), max_connections=4)
        state: dict[str, Any] = {"items": {}}
        ids = [f"e{n}" for n in range(4)]
        await asyncio.gather(
            *(
                store.create_episode(
                    EpisodeRecord(id=i, world="mock", world_hash="h", initial_state=state, state=state)
                )
                for i in ids
            )
        )  # four connections are open and idle
        cluster.stop("immediate")
        cluster.start()
        with pytest.raises(StoreUnavailable, match="unavailable"):
            await store.get_episode("e0")  # this connection finds the server gone ...
        found = await asyncio.gather(*(store.get_episode(i) for i in ids))  # ... and the other idle ones retire
        assert [e.id for e in found if e is not None] == ids
        await store.close()
