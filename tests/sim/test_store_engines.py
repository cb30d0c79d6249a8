"""The `Store` contract, on every engine: each test runs on a SQLite file and on a real Postgres database."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

import psycopg
import pytest
from simia.sim.errors import StoreConflict
from simia.sim.records import EpisodeRecord, EventRecord, Progress, result_text
from simia.sim.storage import EpisodeQuery, Store, copy_database, open_store
from simia.sim.verdict import Verdict


def episode(episode_id: str, **fields: object) -> EpisodeRecord:
    state = {"items": {"milk": {"qty": 0}}}
    return EpisodeRecord(id=episode_id, world="mock", world_hash="h", initial_state=state, state=state, **fields)  # type: ignore[arg-type]


def event(qty: int, **fields: object) -> EventRecord:
    return EventRecord(
        tool="set_quantity",
        arguments={"name": "milk", "qty": qty},
        output={"name": "milk", "qty": qty},
        text="ok",
        is_error=False,
        state_patch=[{"op": "replace", "path": "/items/milk/qty", "value": qty}],
        usage={"prompt_tokens": 10, "completion_tokens": 2, "cost_usd": 0.5},
        **fields,  # type: ignore[arg-type]
    )


def qty(n: int) -> dict[str, object]:
    return {"items": {"milk": {"qty": n}}}


@pytest.fixture
async def store(db_target: str) -> object:
    opened = open_store(db_target)
    yield opened
    await opened.close()


async def test_an_episode_round_trips_with_every_field(store: Store) -> None:
    verdict = Verdict(reward=1, reasons=["all checks pass"])
    created = episode("a", task="t", seed=7, principal="p", perturbation={"rate": 0.1}, group_id="g")
    await store.create_episode(created)
    await store.set_status("a", "ended", reason="done", verdict=verdict, transcript=[{"role": "user"}], tokens={"x": 1})
    got = await store.get_episode("a")
    assert got is not None and (got.task, got.seed, got.principal, got.group_id) == ("t", 7, "p", "g")
    assert got.perturbation == {"rate": 0.1} and (got.initial_state, got.state) == (None, None)  # never read
    assert got.base_hash == created.base_hash and got.base_patches == [] and await store.state_at("a", 0) == qty(0)
    assert got.verdict == verdict
    assert (got.status, got.status_reason, got.transcript) == ("ended", "done", [{"role": "user"}])
    assert got.tokens == {"x": 1}
    assert got.ended_at is not None
    await store.set_status("a", "active")
    back = await store.get_episode("a")
    assert back is not None and back.ended_at is None and back.status_reason == "done"
    assert await store.get_episode("missing") is None


async def test_listing_filters_and_orders_oldest_first(store: Store) -> None:
    now = time.time()
    await store.create_episode(episode("b", task="t", created_at=now + 1))
    await store.create_episode(episode("a", principal="p", created_at=now))
    await store.create_episode(episode("c", task="t", created_at=now + 2))
    await store.set_status("c", "ended")
    assert [e.id for e in await store.list_episodes()] == ["a", "b", "c"]
    assert [e.id for e in await store.list_episodes(task="t")] == ["b", "c"]
    assert [e.id for e in await store.list_episodes(status="active", since=now + 0.5)] == ["b"]
    assert [e.id for e in await store.list_episodes(principal="p")] == ["a"]
    assert [e.id for e in await store.list_episodes(limit=2)] == ["a", "b"]
    assert await store.count_live() == 2


async def test_concurrent_commits_get_gap_free_seq_and_the_counters_add_up(store: Store) -> None:
    await store.create_episode(episode("a"))
    await store.create_episode(episode("b"))
    done = await asyncio.gather(
        *(store.commit_event(e, event(q)) for q in range(1, 31) for e in ("a", "b")),
    )
    assert sorted(ev.seq for ev in done) == sorted([*range(1, 31), *range(1, 31)])
    got = await store.get_episode("a")
    assert got is not None and (got.seq, got.calls, got.prompt_tokens, got.completion_tokens) == (30, 30, 300, 60)
    assert got.cost_usd == pytest.approx(15.0)
    assert [e.seq for e in await store.events("a")] == list(range(1, 31))
    assert [e.seq for e in await store.recent_events("a", 3)] == [28, 29, 30]
    assert await store.recent_events("a", 0) == []
    assert await store.integrity_check() == "ok"
    with pytest.raises(LookupError, match="no episode 'missing'"):
        await store.commit_event("missing", event(1))


async def test_a_budget_refusal_is_an_event_but_not_a_call(store: Store) -> None:
    await store.create_episode(episode("a"))
    refused = EventRecord(tool="t", arguments={}, output=None, text="no", is_error=True, error_code="budget_calls")
    await store.commit_event("a", refused)
    got = await store.get_episode("a")
    assert got is not None and (got.seq, got.calls) == (1, 0) and await store.state_at("a", 1) == qty(0)
    stored = (await store.events("a"))[0]
    assert stored.is_error is True and stored.error_code == "budget_calls" and stored.output is None


async def test_a_commit_at_a_stale_seq_or_on_an_ended_episode_writes_nothing(store: Store) -> None:
    await store.create_episode(episode("a"))
    await store.commit_event("a", event(1), expected_seq=0)
    with pytest.raises(StoreConflict, match="moved on"):
        await store.commit_event("a", event(2), expected_seq=0)
    assert (await store.commit_event("a", event(3), expected_seq=1)).seq == 2
    await store.set_status("a", "ended")
    with pytest.raises(StoreConflict):
        await store.commit_event("a", event(4), expected_seq=2)
    got = await store.get_episode("a")
    assert got is not None and got.seq == 2 and len(await store.events("a")) == 2
    assert await store.state_at("a", got.seq) == qty(3)
    with pytest.raises(LookupError):
        await store.commit_event("missing", event(1), expected_seq=0)


async def test_progress_gives_the_committed_position_and_the_events_after_a_seq(store: Store) -> None:
    await store.create_episode(episode("a"))
    assert await store.progress("a", 0, 16) == Progress(0, "active", [])
    for n in range(1, 6):
        await store.commit_event("a", event(n))
    caught = await store.progress("a", 2, 16)
    assert caught is not None and (caught.seq, caught.status) == (5, "active")
    assert [(e.seq, e.output) for e in caught.events] == [(n, {"name": "milk", "qty": n}) for n in (3, 4, 5)]
    assert caught.events == (await store.events("a"))[2:]  # whole events, as `events` reads them
    limited = await store.progress("a", 0, 2)
    assert limited is not None and limited.seq == 5 and [e.seq for e in limited.events] == [1, 2]
    assert await store.progress("a", 5, 16) == Progress(5, "active", [])
    await store.set_status("a", "ended")
    assert await store.progress("a", 5, 16) == Progress(5, "ended", [])
    assert await store.progress("missing", 0, 16) is None


async def test_state_at_any_step_is_the_base_with_the_patches_up_to_it(store: Store) -> None:
    await store.create_episode(episode("a"))
    steps = 53
    for q in range(1, steps + 1):
        if q % 4 == 0:  # a read: no patch, no new state
            read = EventRecord(tool="list_items", arguments={}, output={}, text="{}", is_error=False)
            await store.commit_event("a", read)
        else:
            await store.commit_event("a", event(q))
    for step in (0, 1, 4, 16, 17, 35, steps, steps + 10):
        last_write = max((q for q in range(1, min(step, steps) + 1) if q % 4), default=0)
        assert await store.state_at("a", step) == qty(last_write), step


async def test_idle_episodes_are_abandoned_once(store: Store) -> None:
    await store.create_episode(episode("old", updated_at=time.time() - 100))
    await store.create_episode(episode("new"))
    assert await store.abandon_idle(50) == ["old"]
    assert await store.abandon_idle(50) == []
    old = await store.get_episode("old")
    assert old is not None and (old.status, old.status_reason) == ("abandoned", "idle timeout")
    assert old.ended_at is not None and await store.count_live() == 1


async def test_the_response_cache_replaces_and_keeps_unicode(store: Store) -> None:
    data = {"output": {"name": "café", "qty": 4}, "is_error": False, "state_patch": []}
    assert await store.get("k") is None
    await store.put("k", "r", {"old": True}, "m")
    await store.put("k", "r", data, "m")
    assert await store.get("k") == data


async def test_a_closed_store_refuses_work_and_reopening_keeps_everything(db_target: str) -> None:
    first = open_store(db_target)
    await first.create_episode(episode("a"))
    await first.commit_event("a", event(1))
    await first.put("k", "r", {"x": 1}, "m")
    await first.close()
    await first.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        await first.get_episode("a")
    again = open_store(db_target)
    got = await again.get_episode("a")
    assert got is not None and got.seq == 1 and await again.get("k") == {"x": 1}
    assert await again.state_at("a", 1) == qty(1)
    await again.close()


async def test_a_call_updates_its_postgres_episode_row_without_writing_an_index_entry(pg_url: str) -> None:
    store = open_store(pg_url)
    await store.create_episode(episode("a"))
    for n in range(1, 31):
        await store.commit_event("a", event(n), expected_seq=n - 1)
    await store.set_status("a", "ended")
    await store.close()  # its connections end, and hand the server their statistics
    changed = {"seq", "calls", "prompt_tokens", "completion_tokens", "cost_usd", "updated_at"}
    with psycopg.connect(pg_url) as conn:
        keys = conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'episodes'::regclass"
        ).fetchall()
        predicates = conn.execute(
            "SELECT pg_get_expr(indpred, indrelid) FROM pg_index WHERE indrelid = 'episodes'::regclass "
            "AND indpred IS NOT NULL"
        ).fetchall()
        updates, hot = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'episodes'"
        ).fetchone() or (0, 0)
    assert not {k for (k,) in keys} & changed
    assert predicates == [("(status = 'active'::text)",)]  # the status changes when an episode ends, not on a call
    assert updates == 31 and hot >= 30, (updates, hot)  # every call's update was heap-only


async def test_a_held_episode_makes_another_process_commit_wait_then_conflict(pg_url: str) -> None:
    """Two stores on one Postgres database, as two replicas: while one holds the episode (a call that lost a
    race runs again), the other's commit waits for it, then finds the episode moved on and writes nothing."""
    first, second = open_store(pg_url), open_store(pg_url)
    try:
        await first.create_episode(episode("a"))
        async with first.hold("a"):
            racing = asyncio.create_task(second.commit_event("a", event(1), expected_seq=0))
            await asyncio.sleep(0.3)
            assert not racing.done()  # waits on the episode's row
            await first.commit_event("a", event(2), expected_seq=0)
            assert (await first.get_episode("a")).seq == 1  # type: ignore[union-attr]  # inside the held transaction
            assert (await second.get_episode("a")).seq == 0  # type: ignore[union-attr]  # not committed yet
        with pytest.raises(StoreConflict):
            await racing
        got = await second.get_episode("a")
        assert got is not None and got.seq == 1 and len(await second.events("a")) == 1
        assert await second.state_at("a", 1) == qty(2)
    finally:
        await first.close()
        await second.close()


async def test_a_result_text_that_renders_its_output_is_stored_once_and_read_back_whole(store: Store) -> None:
    await store.create_episode(episode("e1"))
    output = {"name": "milk", "qty": 4, "note": "fraîche"}
    rendered = EventRecord(tool="get_item", arguments={}, output=output, text=result_text(output), is_error=False)
    own = EventRecord(tool="get_item", arguments={}, output=output, text="4 litres of milk", is_error=False)
    failed = EventRecord(tool="get_item", arguments={}, output=None, text="", is_error=True, error_code="not_found")
    for event in (rendered, own, failed):
        await store.commit_event("e1", event)
    read = await store.events("e1")
    assert [e.text for e in read] == [result_text(output), "4 litres of milk", ""]
    assert [e.output for e in read] == [output, output, None]


def _long_event() -> EventRecord:
    products = [{"product_id": f"P{i:04d}", "name": f"Lamp {i}", "variants": {"a": i, "b": "brass"}} for i in range(80)]
    return EventRecord(
        tool="list_products",
        arguments={"query": "lamp " * 200, "note": "zucchini"},
        output={"products": products, "hint": "the quokka edition"},
        text="Found 80 lamps: " + "brass lamp, " * 100 + "and one jackalope",
        is_error=False,
    )


async def test_a_long_event_reads_back_whole_and_its_words_are_found(store: Store, db_target: str) -> None:
    """SQLite keeps an event's long arguments, output and text compressed (a WAL commit writes whole pages);
    nothing a reader sees changes, on either engine."""
    await store.create_episode(episode("e1"))
    await store.commit_event("e1", event(1))
    long = _long_event()
    await store.commit_event("e1", long)
    read = await store.events("e1")
    assert [(e.arguments, e.output, e.text) for e in read] == [
        ({"name": "milk", "qty": 1}, {"name": "milk", "qty": 1}, "ok"),
        (long.arguments, long.output, long.text),
    ]
    for word in ("zucchini", "QUOKKA", "jackalope"):  # arguments, output, text; case-insensitive
        assert [r.id for r in (await store.query_episodes(EpisodeQuery(text=word))).rows] == ["e1"], word
    assert (await store.query_episodes(EpisodeQuery(text="wombat"))).rows == []
    if db_target.endswith(".db"):
        await store.close()
        with sqlite3.connect(db_target) as conn:
            kinds = conn.execute(
                "SELECT typeof(arguments), typeof(output), typeof(text), length(output) FROM events ORDER BY seq"
            ).fetchall()
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        assert kinds[0][:3] == ("text", "text", "text")  # short: as it was
        assert kinds[1][:3] == ("blob", "blob", "blob") and kinds[1][3] < len(json.dumps(long.output)) / 3
        assert page_size == 1024


async def test_a_database_with_4_kb_pages_keeps_them_and_reads_plain_and_compressed_events(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA page_size=4096")
        conn.execute("VACUUM")
    store = open_store(db)
    await store.create_episode(episode("e1"))
    await store.commit_event("e1", _long_event())
    assert (await store.events("e1"))[0].output == _long_event().output
    await store.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096


async def test_a_copy_to_postgres_inflates_compressed_events_and_back_to_sqlite_reads_the_same(
    tmp_path: Path, pg_url: str
) -> None:
    db, back = tmp_path / "s.db", tmp_path / "back.db"
    store = open_store(db)
    await store.create_episode(episode("e1"))
    await store.commit_event("e1", _long_event())
    await store.close()
    for target in (pg_url, str(back)):
        await open_store(target).close()  # the schema (`simia db copy` creates it so)
    copy_database(str(db), pg_url)
    copy_database(pg_url, str(back))
    for target in (pg_url, str(back)):
        copied = open_store(target)
        [read] = await copied.events("e1")
        assert (read.arguments, read.output, read.text) == (
            _long_event().arguments,
            _long_event().output,
            _long_event().text,
        )
        assert [r.id for r in (await copied.query_episodes(EpisodeQuery(text="quokka"))).rows] == ["e1"]
        await copied.close()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT output FROM events").fetchone()[0].startswith('{"products":')
