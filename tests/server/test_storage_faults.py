"""The database filling up or turning read-only mid-run: calls fail cleanly as `infra` errors, nothing is
half-written, and the server recovers when the disk does.

In process, SQLite's own limits stand in for the disk (`PRAGMA max_page_count` for a full one,
`PRAGMA query_only` for a read-only one; a mounted filesystem cannot be remounted read-only while the
database is open for writing), set on the store's one connection. A real `simia serve`
on a real filesystem that fills up is in `test_processes.py`.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx2 as httpx
from mcp import Client
from simia.server.mcp import DATABASE_TEXT
from simia.sim.storage import SqliteStore


async def _pragma(store: Any, sql: str) -> None:
    """Set a pragma of the store's one connection, holding its lock as the executor's own batches do (a job would
    run inside a transaction, which a read-only connection cannot begin)."""
    assert isinstance(store, SqliteStore)
    with store._db._lock:
        store._db._conn.execute(sql)


async def _fill(store: Any) -> None:
    """The disk is full: the database may not grow by one more page."""
    assert isinstance(store, SqliteStore)
    pages = await store._db.run(lambda conn: conn.execute("PRAGMA page_count").fetchone()[0])
    await _pragma(store, f"PRAGMA max_page_count = {pages}")


def assert_gap_free(db: Path) -> None:
    """Every episode's events are numbered 1..seq without a hole, and the file passes the integrity check."""
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for episode_id, seq in conn.execute("SELECT id, seq FROM episodes"):
            seqs = [
                r[0] for r in conn.execute("SELECT seq FROM events WHERE episode_id = ? ORDER BY seq", (episode_id,))
            ]
            assert seqs == list(range(1, seq + 1)), episode_id


async def test_a_full_disk_fails_calls_as_infra_errors_and_the_server_recovers_when_space_returns(
    make_server: Any, tmp_path: Path
) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        async with Client(episode["mcp_url"]) as client:
            ok = await client.call_tool("set_quantity", {"name": "milk", "qty": 1})
            assert not ok.is_error
            await _fill(server.store)
            refused = None
            for qty in range(2, 400):  # the free room left in the last pages goes first
                result = await client.call_tool("set_quantity", {"name": "milk", "qty": qty})
                if result.is_error:
                    refused = result
                    break
            assert refused is not None, "the full database kept taking calls"
            assert refused.meta is not None
            assert (refused.meta["simia/error_kind"], refused.meta["simia/error_code"]) == (
                "infra",
                "database_unavailable",
            )
            assert refused.content[0].text == DATABASE_TEXT
            for _ in range(100):  # episodes live in other pages, which may still have room
                created = await http.post("/v1/episodes", json={"world": "mock"})
                if created.status_code != 201:
                    break
            assert created.status_code == 503
            assert created.json()["error"]["code"] == "database_unavailable"
            assert created.headers["retry-after"] == "5"
            assert (await http.get(f"/v1/episodes/{episode['id']}")).status_code == 200  # reads still work
            await _pragma(server.store, "PRAGMA max_page_count = 1073741823")  # space returns
            again = await client.call_tool("set_quantity", {"name": "milk", "qty": 99})
            assert not again.is_error and again.meta
        detail = (await http.get(f"/v1/episodes/{episode['id']}")).json()
        assert detail["state"]["items"]["milk"]["qty"] == 99
        assert [e["seq"] for e in detail["events"]] == list(range(1, again.meta["simia/seq"] + 1))
        assert all(not e["is_error"] for e in detail["events"])  # the refused call left no trace
    assert_gap_free(tmp_path / "simia.db")


async def test_a_read_only_database_fails_calls_and_api_writes_cleanly_then_recovers(
    make_server: Any, tmp_path: Path
) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        async with Client(episode["mcp_url"]) as client:
            await client.call_tool("set_quantity", {"name": "milk", "qty": 1})
            await _pragma(server.store, "PRAGMA query_only = ON")
            refused = await client.call_tool("set_quantity", {"name": "milk", "qty": 2})
            ended = await http.post(f"/v1/episodes/{episode['id']}/end", json={})
            forked = await http.post(f"/v1/episodes/{episode['id']}/fork", json={})
            await _pragma(server.store, "PRAGMA query_only = OFF")
            after = await client.call_tool("set_quantity", {"name": "milk", "qty": 3})
        assert refused.is_error and refused.meta and refused.meta["simia/error_code"] == "database_unavailable"
        assert [r.status_code for r in (ended, forked)] == [503, 503]
        assert ended.json()["error"]["message"].startswith("the database is unavailable")
        assert not after.is_error and after.meta and after.meta["simia/seq"] == 2
        detail = (await http.get(f"/v1/episodes/{episode['id']}")).json()
        assert (detail["status"], detail["state"]["items"]["milk"]["qty"]) == ("active", 3)
    assert_gap_free(tmp_path / "simia.db")
