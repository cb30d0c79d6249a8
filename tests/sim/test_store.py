"""The store's batching: a failing job never takes its batch down, inline and writer-thread paths agree."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from simia.sim.records import EpisodeRecord, EventRecord
from simia.sim.storage import SqliteStore
from simia.sim.storage import _sqlite_batch as store_module


def episode(episode_id: str) -> EpisodeRecord:
    state = {"items": {"milk": {"qty": 0}}}
    return EpisodeRecord(id=episode_id, world="mock", world_hash="h", initial_state=state, state=state)


def event(qty: int) -> EventRecord:
    return EventRecord(
        tool="set_quantity",
        arguments={"name": "milk", "qty": qty},
        output={"name": "milk", "qty": qty},
        text="ok",
        is_error=False,
        state_patch=[{"op": "replace", "path": "/items/milk/qty", "value": qty}],
    )


@pytest.mark.parametrize("synchronous", ["NORMAL", "FULL"])  # inline batches / writer-thread batches
async def test_a_failing_job_is_rolled_back_alone_and_the_rest_of_its_batch_commits(
    tmp_path: Path, synchronous: str
) -> None:
    store = SqliteStore(tmp_path / "s.db", synchronous=synchronous)
    await store.create_episode(episode("a"))
    results = await asyncio.gather(
        *(store.commit_event("a", event(q)) for q in range(1, 4)),
        store.commit_event("missing", event(9)),
        *(store.commit_event("a", event(q)) for q in range(4, 6)),
        return_exceptions=True,
    )
    assert isinstance(results[3], LookupError) and "no episode 'missing'" in str(results[3])
    committed = [r.seq for r in results if isinstance(r, EventRecord)]
    assert sorted(committed) == [1, 2, 3, 4, 5]
    stored = await store.get_episode("a")
    assert stored is not None and stored.seq == 5 and len(await store.events("a")) == 5
    assert await store.integrity_check() == "ok"
    await store.close()


async def test_inline_jobs_go_to_the_writer_thread_while_it_holds_the_connection(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", synchronous="NORMAL")
    await store.create_episode(episode("a"))
    store._db._lock.acquire()  # as if the writer thread were in the middle of a long batch
    pending = asyncio.ensure_future(store.commit_event("a", event(1)))
    await asyncio.sleep(0.05)
    assert not pending.done()  # handed to the writer, which waits for the connection
    store._db._lock.release()
    assert (await pending).seq == 1
    await store.close()
    with pytest.raises(RuntimeError, match="the store is closed"):
        await store.get_episode("a")


async def test_wal_checkpoints_run_on_the_writer_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real = store_module._checkpoint

    def checkpoint(conn: object) -> None:
        import threading

        seen.append(threading.current_thread().name)
        real(conn)  # type: ignore[arg-type]

    monkeypatch.setattr(store_module, "_checkpoint", checkpoint)
    monkeypatch.setattr(store_module, "CHECKPOINT_EVERY", 5)
    store = SqliteStore(tmp_path / "s.db", synchronous="NORMAL")
    await store.create_episode(episode("a"))
    for q in range(1, 21):
        await store.commit_event("a", event(q))
    await store.get_episode("a")  # let the writer finish what it was given
    await asyncio.sleep(0.05)
    assert seen and set(seen) == {"simia-store-writer"}
    assert await store.state_at("a", 20) == {"items": {"milk": {"qty": 20}}}
    await store.close()
