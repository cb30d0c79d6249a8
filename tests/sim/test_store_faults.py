"""The SQLite store on a disk that refuses writes: every refused transaction is a `StoreUnavailable` with nothing
of it stored, nothing refused is ever reported committed, and the store works again once the disk does."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from simia.sim.errors import StoreUnavailable
from simia.sim.records import EpisodeRecord, EventRecord
from simia.sim.storage import SqliteStore


def episode(episode_id: str) -> EpisodeRecord:
    state = {"items": {"milk": {"qty": 0}}}
    return EpisodeRecord(id=episode_id, world="mock", world_hash="h", initial_state=state, state=state)


def event(qty: int, note: str = "") -> EventRecord:
    return EventRecord(
        tool="set_quantity",
        arguments={"name": "milk", "qty": qty, "note": note},
        output={"name": "milk", "qty": qty},
        text="ok",
        is_error=False,
        state_patch=[{"op": "replace", "path": "/items/milk/qty", "value": qty}],
    )


def pragma(store: SqliteStore, sql: str) -> None:
    """Set a pragma of the store's one connection, holding its lock as the executor does."""
    with store._db._lock:
        store._db._conn.execute(sql)


def stored_seqs(path: Path, episode_id: str) -> tuple[int, list[int]]:
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        (seq,) = conn.execute("SELECT seq FROM episodes WHERE id = ?", (episode_id,)).fetchone()
        return seq, [
            r[0] for r in conn.execute("SELECT seq FROM events WHERE episode_id = ? ORDER BY seq", (episode_id,))
        ]


@pytest.mark.parametrize("synchronous", ["NORMAL", "FULL"])  # inline batches / writer-thread batches
async def test_a_read_only_database_refuses_each_transaction_and_the_store_carries_on_after(
    tmp_path: Path, synchronous: str
) -> None:
    store = SqliteStore(tmp_path / "s.db", synchronous=synchronous)
    await store.create_episode(episode("a"))
    pragma(store, "PRAGMA query_only = ON")  # BEGIN IMMEDIATE itself fails: once, this killed the writer thread
    for qty in (1, 2):
        with pytest.raises(StoreUnavailable, match="attempt to write a readonly database"):
            await asyncio.wait_for(store.commit_event("a", event(qty)), 10)
    pragma(store, "PRAGMA query_only = OFF")
    committed = await asyncio.wait_for(store.commit_event("a", event(3)), 10)
    assert committed.seq == 1
    await store.close()
    assert stored_seqs(tmp_path / "s.db", "a") == (1, [1])


@pytest.mark.parametrize("synchronous", ["NORMAL", "FULL"])
async def test_on_a_full_disk_a_commit_is_reported_only_if_it_is_stored(tmp_path: Path, synchronous: str) -> None:
    store = SqliteStore(tmp_path / "s.db", synchronous=synchronous)
    await store.create_episode(episode("a"))
    pages = await store._db.run(lambda conn: conn.execute("PRAGMA page_count").fetchone()[0])
    pragma(store, f"PRAGMA max_page_count = {pages + 6}")  # room for a few events, not for all
    committed: list[EventRecord] = []
    for qty in range(40):
        try:
            committed.append(await store.commit_event("a", event(qty, "x" * 3000)))
        except StoreUnavailable:
            break
    assert 0 < len(committed) < 40
    batch = await asyncio.gather(  # a group commit SQLite rolls back whole: not one of them reported committed
        *(store.commit_event("a", event(q, "x" * 3000)) for q in range(8)),
        return_exceptions=True,
    )
    assert all(isinstance(r, StoreUnavailable) for r in batch), batch
    pragma(store, "PRAGMA max_page_count = 1073741823")  # space returns
    after = await store.commit_event("a", event(99))
    await store.close()
    seq, seqs = stored_seqs(tmp_path / "s.db", "a")
    assert sorted(r.seq for r in committed) == list(range(1, len(committed) + 1))
    assert (seq, seqs) == (after.seq, list(range(1, len(committed) + 2)))
