"""States stored by reference, on every engine: a base once, an episode as its base and patches, so a call, a create
and a read cost what they change or return, never the size of the world; and the upgrade of a version 2 database,
whose rows held whole states, to that form with every state intact."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import psycopg
import pytest
from simia.sim.records import EpisodeRecord, EventRecord, StatePath
from simia.sim.storage import EpisodeQuery, SqliteStore, Store, open_store
from simia.sim.storage import migrations as migrations_module
from simia.sim.storage import postgres as postgres_module
from simia.sim.storage import sqlite as sqlite_module
from simia.sim.world import State, apply_patch, as_state, compact_json
from simia.sim.world import model as world_model

Patch = list[dict[str, Any]]


def world_state(records: int = 5000) -> dict[str, Any]:
    """A state of about 1 MB (`records` records of some 200 bytes)."""
    return {
        "records": {f"r{i:05d}": {"name": f"item {i}", "qty": i % 7, "note": "x" * 160} for i in range(records)},
        "meta": {"records": records},
    }


def set_qty(key: str, qty: int) -> Patch:
    return [{"op": "replace", "path": f"/records/{key}/qty", "value": qty}]


def add_record(n: int) -> Patch:
    return [{"op": "add", "path": f"/records/new{n}", "value": {"name": f"new {n}", "qty": n, "note": "y" * 300}}]


def call(patch: Patch, n: int = 0) -> EventRecord:
    return EventRecord(
        tool="update" if patch else "read",
        arguments={"n": n},
        output={"ok": True},
        text="ok",
        is_error=False,
        state_patch=patch,
    )


def episode(episode_id: str, base: State, patches: list[Patch] | None = None, **fields: Any) -> EpisodeRecord:
    """A new episode of the stored base `base`, as the server makes one: the row names the base and its patches."""
    return EpisodeRecord(
        id=episode_id, world="big", world_hash="h", base_hash=base.digest, base_patches=patches or [], **fields
    )


@contextlib.contextmanager
def raw(target: str) -> Iterator[Any]:
    """A plain DB-API connection to the database (autocommit), beside the store."""
    if target.startswith("postgresql://"):
        with psycopg.connect(target, autocommit=True) as conn:
            yield conn
    else:
        with contextlib.closing(sqlite3.connect(target, isolation_level=None)) as conn:
            yield conn


def one(target: str, sql: str) -> Any:
    with raw(target) as conn:
        return conn.execute(sql).fetchone()[0]


@pytest.fixture
async def store(db_target: str) -> Any:
    opened = open_store(db_target)
    yield opened
    await opened.close()


@pytest.fixture
def serialized(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the JSON texts simia serializes (every `compact_json`) while the test runs."""
    sizes: list[int] = []
    real = world_model.to_json

    def counting(value: Any, **kwargs: Any) -> bytes:
        text = real(value, **kwargs)
        sizes.append(len(text))
        return text

    monkeypatch.setattr(world_model, "to_json", counting)
    return sizes


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the JSON texts parsed (every `json.loads`) while the test runs."""
    sizes: list[int] = []
    real = json.loads

    def counting(text: Any, *args: Any, **kwargs: Any) -> Any:
        sizes.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counting)
    return sizes


async def test_a_call_writes_a_few_pages_and_stores_about_its_patch_whatever_the_size_of_the_state(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    base = as_state(world_state())
    store = SqliteStore(db)
    await store.put_base(base)
    await store.create_episode(episode("a", base))
    await store.close()  # the WAL is checkpointed into the file and removed
    start = db.stat().st_size
    store = SqliteStore(db)
    patches = [add_record(n) if n % 2 else set_qty(f"r{n:05d}", n) for n in range(50)]
    for n, patch in enumerate(patches):
        await store.commit_event("a", call(patch, n))
    written = (tmp_path / "s.db-wal").stat().st_size  # no checkpoint ran: every frame the commits wrote
    await store.close()
    stored = db.stat().st_size - start
    patch_bytes = sum(len(compact_json(p)) for p in patches) / len(patches)
    assert stored / len(patches) < 4096 + 2 * patch_bytes, stored
    assert written / len(patches) < 8 * 4096, written  # the episode's row, the event, their index pages: no state
    again = SqliteStore(db)
    expected = base
    for patch in patches:
        expected = apply_patch(expected, patch, None)
    assert await again.state_at("a", len(patches)) == expected
    await again.close()


async def test_a_postgres_call_writes_about_its_patch_whatever_the_size_of_the_state(pg_url: str) -> None:
    base = as_state(world_state())
    store = open_store(pg_url)
    try:
        await store.put_base(base)
        await store.create_episode(episode("a", base))
        lsn = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"
        start = one(pg_url, lsn)
        patches = [add_record(n) if n % 2 else set_qty(f"r{n:05d}", n) for n in range(50)]
        for n, patch in enumerate(patches):
            await store.commit_event("a", call(patch, n), expected_seq=n)
        written = one(pg_url, lsn) - start
    finally:
        await store.close()
    patch_bytes = sum(len(compact_json(p)) for p in patches) / len(patches)
    assert written / len(patches) < 4096 + 2 * patch_bytes, written


async def test_episodes_of_one_base_share_its_one_row_and_a_create_serializes_nothing_of_it(
    db_target: str, serialized: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = as_state(world_state())
    store = open_store(db_target)
    try:
        await store.put_base(base)
        await store.put_base(base)  # again: remembered, nothing written or serialized
        assert max(serialized) > 1_000_000 and len([n for n in serialized if n > 10_000]) == 1
        serialized.clear()
        hashed: list[object] = []
        monkeypatch.setattr("simia.sim.world.state.state_hash", lambda state: hashed.append(state) or "")
        before = _stored_bytes(db_target)
        task = set_qty("r00001", 9)
        await asyncio.gather(*(store.create_episode(episode(f"e{i}", base, [task])) for i in range(1000)))
        assert not hashed and max(serialized) < 1_000  # the row, its patches: never the state
        grown = _stored_bytes(db_target) - before
        assert grown / 1000 < 10_000, grown
        assert one(db_target, "SELECT COUNT(*) FROM states") == 1
        got = await store.get_episode("e999")
        assert got is not None and (got.base_hash, got.base_patches) == (base.digest, [task])
        assert await store.state_at("e999", 0) == apply_patch(base, task, None)
    finally:
        await store.close()
    serialized.clear()
    again = open_store(db_target)  # another process puts the same base: found stored, never serialized again
    try:
        await again.put_base(base)
        assert not serialized and one(db_target, "SELECT COUNT(*) FROM states") == 1
    finally:
        await again.close()


async def test_episodes_created_from_equal_plain_states_share_one_row(store: Store, db_target: str) -> None:
    for i in range(3):
        state = {"items": {"milk": {"qty": 0}}}  # a new dict each time, equal content
        created = await store.create_episode(
            EpisodeRecord(id=f"p{i}", world="mock", world_hash="h", initial_state=state, state=state)
        )
        assert isinstance(created.state, State) and created.state is created.initial_state
        assert created.base_hash == as_state(state).digest and created.base_patches == []
    assert one(db_target, "SELECT COUNT(*) FROM states") == 1


async def test_reading_listing_and_querying_episodes_never_parse_a_state(
    store: Store, db_target: str, parsed: list[int]
) -> None:
    base = as_state(world_state())
    await store.put_base(base)
    for i in range(3):
        await store.create_episode(episode(f"e{i}", base, [set_qty("r00002", i)], task="t"))
        await store.commit_event(f"e{i}", call(add_record(i)))
    statements: list[str] = []
    if isinstance(store, SqliteStore):  # and which statements ran, where the engine can say
        store._db._conn.set_trace_callback(statements.append)
    parsed.clear()
    try:
        got = await store.get_episode("e1")
        listed = await store.list_episodes()
        page = await store.query_episodes(EpisodeQuery(task="t"))
        progress = await store.progress("e1", 0, 16)
        stats = await store.task_stats()
    finally:
        if isinstance(store, SqliteStore):
            store._db._conn.set_trace_callback(None)
    assert got is not None and (got.initial_state, got.state, got.seq) == (None, None, 1)
    assert [e.id for e in listed] == ["e0", "e1", "e2"] and all(e.state is None for e in listed)
    assert page.total == 3 and progress is not None and progress.seq == 1 and stats[0].episodes == 3
    assert parsed and max(parsed) < 2_000  # events, verdicts, patches: nothing the size of the state
    assert not [s for s in statements if "states" in s or "SELECT *" in s]


async def live_chain(store: Store, base: State, task: Patch, patches: list[Patch]) -> list[State]:
    """Create episode "a" from `base` and `task` and commit `patches`; the states the live path reaches, by step."""
    await store.put_base(base)
    await store.create_episode(episode("a", base, [task]))
    states = [as_state(apply_patch(base, task, None))]
    for n, patch in enumerate(patches):
        await store.commit_event("a", call(patch, n))
        states.append(as_state(apply_patch(states[-1], patch, None)))
    return states


PATCHES = [
    set_qty("r00003", 1),
    [],
    add_record(1),
    set_qty("new1", 5),
    [],
    [{"op": "remove", "path": "/records/r00004"}],
]


async def test_state_at_is_the_base_with_the_patches_up_to_the_step_and_the_live_digest(
    store: Store, db_target: str
) -> None:
    base = as_state(world_state(200))
    task = set_qty("r00000", 6)
    live = await live_chain(store, base, task, PATCHES)
    expected = [jsonpatch.apply_patch(copy.deepcopy(dict(base)), task)]  # by hand, with another patch library
    for patch in PATCHES:
        expected.append(jsonpatch.apply_patch(expected[-1], patch) if patch else expected[-1])
    for step in range(len(PATCHES) + 1):
        state = await store.state_at("a", step)
        assert (state, state.digest) == (expected[step], live[step].digest), step
        assert state.base is base  # the one base put: every state rebuilt shares it
    again = open_store(db_target)  # another process: the base is read from the database, once
    try:
        first, last = await asyncio.gather(again.state_at("a", 0), again.state_at("a", len(PATCHES)))
        assert (first.digest, last.digest) == (live[0].digest, live[-1].digest)
        assert first.base is last.base and first.base is await again.base(base.digest) and first.base == base
    finally:
        await again.close()


async def test_a_fork_starts_from_its_parents_path_and_adds_its_own_patches(store: Store) -> None:
    base = as_state(world_state(200))
    task = set_qty("r00000", 6)
    live = await live_chain(store, base, task, PATCHES)
    path = await store.state_path("a", 4)
    assert path == StatePath(base.digest, [task, PATCHES[0], PATCHES[2], PATCHES[3]])  # the empty ones left out
    await store.create_episode(episode("f", base, path.patches, parent_id="a", fork_step=4))
    mine = set_qty("r00009", 2)
    await store.commit_event("f", call(mine))
    assert await store.state_path("f", 1) == StatePath(base.digest, [*path.patches, mine])
    start = await store.state_at("f", 0)
    assert (start, start.digest) == (live[4], live[4].digest)
    assert (await store.state_at("f", 1)).digest == as_state(apply_patch(live[4], mine, None)).digest
    with pytest.raises(LookupError, match="no episode 'missing'"):
        await store.state_path("missing", 0)
    with pytest.raises(LookupError, match="no episode 'missing'"):
        await store.state_at("missing", 0)


async def test_an_episode_of_a_base_never_stored_is_refused_and_a_lost_base_is_reported(
    store: Store, db_target: str
) -> None:
    stray = as_state({"not": "stored"})
    with pytest.raises(LookupError, match="store it first"):
        await store.create_episode(episode("x", stray))
    assert await store.get_episode("x") is None
    with pytest.raises(LookupError, match="no base state"):
        await store.base(stray.digest)
    base = as_state({"items": {}})
    await store.put_base(base)
    await store.create_episode(episode("a", base))
    with raw(db_target) as conn:
        conn.execute("DELETE FROM states")
    assert "episodes whose base state is missing from the states table: a" in await store.integrity_check()


V2_SQLITE = """
CREATE TABLE episodes (
    id TEXT PRIMARY KEY, world TEXT NOT NULL, world_hash TEXT NOT NULL, task TEXT, seed INTEGER,
    principal TEXT NOT NULL DEFAULT '', status TEXT NOT NULL, seq INTEGER NOT NULL DEFAULT 0,
    calls INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0, cost_usd REAL NOT NULL DEFAULT 0, initial_state TEXT NOT NULL,
    state TEXT NOT NULL, parent_id TEXT, fork_step INTEGER, group_id TEXT, verdict TEXT, transcript TEXT,
    tokens TEXT, status_reason TEXT, snapshot_seq INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, ended_at REAL, perturbation TEXT, reward INTEGER
);
CREATE INDEX episodes_world ON episodes (world, status);
CREATE INDEX episodes_updated ON episodes (status, updated_at);
CREATE TABLE events (
    episode_id TEXT NOT NULL REFERENCES episodes (id), seq INTEGER NOT NULL, request_key TEXT, tool TEXT NOT NULL,
    arguments TEXT NOT NULL, output TEXT, text TEXT NOT NULL, is_error INTEGER NOT NULL, error_code TEXT,
    error_kind TEXT, state_patch TEXT NOT NULL, usage TEXT NOT NULL, latency_ms REAL NOT NULL,
    model TEXT NOT NULL DEFAULT '', detail TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL, injected TEXT,
    source TEXT NOT NULL DEFAULT 'simulated', PRIMARY KEY (episode_id, seq)
);
CREATE TABLE snapshots (
    episode_id TEXT NOT NULL REFERENCES episodes (id), seq INTEGER NOT NULL, state TEXT NOT NULL,
    PRIMARY KEY (episode_id, seq)
);
CREATE TABLE llm_cache (
    key TEXT PRIMARY KEY, replay_key TEXT NOT NULL, data TEXT NOT NULL, model TEXT NOT NULL, created REAL NOT NULL
);
CREATE INDEX llm_cache_replay ON llm_cache (replay_key, created);
CREATE INDEX episodes_created ON episodes (created_at);
CREATE INDEX episodes_principal_created ON episodes (principal, created_at);
CREATE INDEX episodes_task ON episodes (world, task, reward);
CREATE INDEX episodes_principal_task ON episodes (principal, world, task, reward);
CREATE INDEX episodes_group ON episodes (group_id);
PRAGMA user_version = 2;
"""
"""Schema version 2 as simia wrote it on SQLite (an episode's row held its initial and its last state)."""

V2_POSTGRES = [
    """CREATE TABLE episodes (
    id TEXT PRIMARY KEY, world TEXT NOT NULL, world_hash TEXT NOT NULL, task TEXT, seed BIGINT,
    principal TEXT NOT NULL DEFAULT '', status TEXT NOT NULL, seq BIGINT NOT NULL DEFAULT 0,
    calls BIGINT NOT NULL DEFAULT 0, prompt_tokens BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0, cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    initial_state TEXT NOT NULL, state TEXT NOT NULL, parent_id TEXT, fork_step BIGINT, group_id TEXT,
    verdict TEXT, transcript TEXT, tokens TEXT, status_reason TEXT, snapshot_seq BIGINT NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL, ended_at DOUBLE PRECISION,
    perturbation TEXT, reward INTEGER
) WITH (fillfactor = 50)""",
    "CREATE INDEX episodes_world ON episodes (world, status)",
    "CREATE INDEX episodes_active ON episodes (id) WHERE status = 'active'",
    "CREATE INDEX episodes_created ON episodes (created_at)",
    "CREATE INDEX episodes_principal_created ON episodes (principal, created_at)",
    "CREATE INDEX episodes_task ON episodes (world, task, reward)",
    "CREATE INDEX episodes_principal_task ON episodes (principal, world, task, reward)",
    "CREATE INDEX episodes_group ON episodes (group_id)",
    """CREATE TABLE events (
    episode_id TEXT NOT NULL REFERENCES episodes (id), seq BIGINT NOT NULL, request_key TEXT, tool TEXT NOT NULL,
    arguments TEXT NOT NULL, output TEXT, text TEXT NOT NULL, is_error INTEGER NOT NULL, error_code TEXT,
    error_kind TEXT, state_patch TEXT NOT NULL, usage TEXT NOT NULL, latency_ms DOUBLE PRECISION NOT NULL,
    model TEXT NOT NULL DEFAULT '', detail TEXT NOT NULL DEFAULT '', created_at DOUBLE PRECISION NOT NULL,
    injected TEXT, source TEXT NOT NULL DEFAULT 'simulated', PRIMARY KEY (episode_id, seq)
)""",
    "CREATE INDEX events_created ON events (created_at)",
    """CREATE TABLE snapshots (
    episode_id TEXT NOT NULL REFERENCES episodes (id), seq BIGINT NOT NULL, state TEXT NOT NULL,
    PRIMARY KEY (episode_id, seq)
)""",
    """CREATE TABLE llm_cache (
    key TEXT PRIMARY KEY, replay_key TEXT NOT NULL, data TEXT NOT NULL, model TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL
)""",
    "CREATE INDEX llm_cache_replay ON llm_cache (replay_key, created)",
    "CREATE TABLE simia_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "INSERT INTO simia_meta (key, value) VALUES ('schema_version', '2')",
]
"""Schema version 2 as simia wrote it on Postgres."""

OLD_PATCHES = [set_qty("r00001", n) if n % 3 else ([] if n % 2 else add_record(n)) for n in range(1, 21)]
"""A version 2 episode's events: 20 calls, reads (empty patches) among them."""


def old_states(initial: dict[str, Any]) -> list[dict[str, Any]]:
    """The states after each of `OLD_PATCHES`, by hand (index 0: the initial state)."""
    states = [initial]
    for patch in OLD_PATCHES:
        states.append(jsonpatch.apply_patch(states[-1], patch) if patch else states[-1])
    return states


def write_v2(target: str) -> dict[str, list[dict[str, Any]]]:
    """A version 2 database, as simia wrote one: episode "p" of 20 calls (a snapshot at 16), "q" started from the
    same state, and "f", a fork of "p" at step 10 with 3 calls of its own. Returns each episode's states by step."""
    initial = world_state(50)
    p = old_states(initial)
    fork_patches = [set_qty("r00002", 7), [], add_record(99)]
    f = [p[10]]
    for patch in fork_patches:
        f.append(jsonpatch.apply_patch(f[-1], patch) if patch else f[-1])
    episodes = [("p", initial, p[-1], 20, 16, None, None), ("q", initial, initial, 0, 0, None, None)]
    episodes.append(("f", p[10], f[-1], 3, 0, "p", 10))
    events = [("p", n, patch) for n, patch in enumerate(OLD_PATCHES, 1)]
    events += [("f", n, patch) for n, patch in enumerate(fork_patches, 1)]
    postgres = target.startswith("postgresql://")
    mark = "%s" if postgres else "?"
    with raw(target) as conn:
        if postgres:
            for statement in V2_POSTGRES:
                conn.execute(statement)
        else:
            conn.executescript(V2_SQLITE)
        for i, initial_state, state, seq, snapshot, parent, step in episodes:
            conn.execute(
                "INSERT INTO episodes (id, world, world_hash, status, seq, calls, initial_state, state, parent_id, "
                f"fork_step, snapshot_seq, created_at, updated_at) VALUES ({', '.join([mark] * 13)})",
                (i, "big", "h", "active", seq, seq, compact_json(initial_state), compact_json(state), parent, step,
                 snapshot, 1.0, 2.0),
            )  # fmt: skip
        for i, n, patch in events:
            conn.execute(
                "INSERT INTO events (episode_id, seq, tool, arguments, output, text, is_error, state_patch, usage, "
                f"latency_ms, created_at) VALUES ({', '.join([mark] * 11)})",
                (i, n, "update", "{}", "{}", "ok", 0, compact_json(patch), "{}", 1.0, 2.0),
            )
        conn.execute(f"INSERT INTO snapshots (episode_id, seq, state) VALUES ({mark}, {mark}, {mark})",
                     ("p", 16, compact_json(p[16])))  # fmt: skip
    return {"p": p, "q": [initial], "f": f}


def schema(target: str) -> tuple[set[str], set[str], int]:
    """The tables, the episodes' columns and the states' row count."""
    with raw(target) as conn:
        if target.startswith("postgresql://"):
            tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
            columns = {
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = 'episodes'"
                )
            }
        else:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            columns = {r[1] for r in conn.execute("PRAGMA table_info(episodes)")}
        count = conn.execute("SELECT COUNT(*) FROM states").fetchone()[0] if "states" in tables else -1
    return tables, columns, count


def rerun_step(target: str) -> None:
    """Run the step 2 -> 3 again on a database it already upgraded."""
    if target.startswith("postgresql://"):
        with psycopg.connect(target) as conn, conn.transaction():
            postgres_module.MIGRATIONS[1](conn)
    else:
        with contextlib.closing(sqlite3.connect(target, isolation_level=None)) as conn:
            sqlite_module.MIGRATIONS[2](conn)


async def test_a_version_2_database_is_upgraded_with_every_state_intact_and_the_step_can_run_again(
    db_target: str,
) -> None:
    states = write_v2(db_target)
    store = open_store(db_target)
    try:
        assert store.migrated_from == 2
        for episode_id, by_step in states.items():
            for step, expected in enumerate(by_step):
                assert await store.state_at(episode_id, step) == expected, (episode_id, step)
        got = await store.get_episode("f")
        assert got is not None and (got.parent_id, got.fork_step, got.seq, got.base_patches) == ("p", 10, 3, [])
        assert await store.integrity_check() == "ok"
    finally:
        await store.close()
    tables, columns, bases = schema(db_target)
    assert "snapshots" not in tables and not columns & {"initial_state", "state", "snapshot_seq"}
    assert {"base_hash", "base_patches"} <= columns and bases == 2  # "p" and "q" share one row
    rerun_step(db_target)
    assert schema(db_target) == (tables, columns, bases)
    again = open_store(db_target)
    try:
        assert again.migrated_from is None
        assert await again.state_at("p", 20) == states["p"][20]
    finally:
        await again.close()


async def test_an_upgrade_that_fails_half_way_leaves_version_2_and_the_next_open_completes_it(
    db_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    states = write_v2(db_target)
    before = schema(db_target)
    real = migrations_module.state_hash
    calls: list[int] = []

    def failing(state: dict[str, Any]) -> str:
        calls.append(1)
        if len(calls) == 2:  # the first row moved, then the disk (say) refuses
            raise OSError("no space left on device")
        return real(state)

    monkeypatch.setattr(migrations_module, "state_hash", failing)
    with pytest.raises(OSError, match="no space left"):
        open_store(db_target)
    assert schema(db_target) == before  # nothing of it stayed
    monkeypatch.setattr(migrations_module, "state_hash", real)
    store = open_store(db_target)
    try:
        assert store.migrated_from == 2
        assert await store.state_at("f", 3) == states["f"][3] and await store.state_at("p", 16) == states["p"][16]
    finally:
        await store.close()


def _stored_bytes(target: str) -> int:
    """The bytes the database holds: the SQLite file and its WAL, or the Postgres database."""
    if target.startswith("postgresql://"):
        return int(one(target, "SELECT pg_database_size(current_database())"))
    wal = Path(f"{target}-wal")
    return Path(target).stat().st_size + (wal.stat().st_size if wal.exists() else 0)
