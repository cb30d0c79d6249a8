"""The SQLite store: episodes, their events, the base states they start from, and the response cache, in one WAL file.

`SqliteStore` implements `simia.sim.storage.protocol.Store` with the schema and row mapping
here, on one connection driven by `simia.sim.storage._sqlite_batch.BatchExecutor` (group
commits; a call is answered only after its transaction commits).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from ..errors import StoreConflict, StoreSchemaError
from ..records import EpisodeRecord, EventRecord, Progress, StatePath
from ..verdict import Verdict
from ..world import State, World, apply_patches, compact_json
from ._bases import BaseStates
from ._sqlite_batch import BatchExecutor
from ._worlds import ServedWorlds, WorldVersion
from .cache import CACHE_TABLE_SQL, read_cached, write_cached
from .migrations import SCHEMA_VERSION, move_initial_states, schema_steps
from .queries import (
    TEXT_SCAN_LIMIT,
    EpisodePage,
    EpisodeQuery,
    EpisodeRow,
    TaskStats,
    error_counts_sql,
    fork_counts_sql,
    page_sql,
    task_stats_sql,
)
from .sql import (
    BASE_EXISTS_SQL,
    BASE_SQL,
    CONSISTENCY_SQL,
    EPISODE_SQL,
    EVENT_COLUMNS,
    INDEX_SQL,
    INSERT_BASE,
    INSERT_EPISODE,
    INSERT_WORLD,
    MISSING_BASES_SQL,
    PATCHES_SQL,
    PROGRESS_SQL,
    SET_STATUS_SQL,
    STATE_START_SQL,
    WORLD_SQL,
    WORLD_VERSIONS_SQL,
    consistency_report,
    episode_from_row,
    episode_params,
    event_from_row,
    list_sql,
    packed,
    progress_from_rows,
    set_status_params,
    state_path_of,
    stored_text,
    unpacked,
)

__all__ = ["MIGRATIONS", "SqliteStore"]

_STATES_TABLE = """
CREATE TABLE IF NOT EXISTS states (
    hash TEXT PRIMARY KEY,
    state TEXT NOT NULL
)"""
"""Base states, each stored once under its digest (`simia.sim.world.State.digest`) as JSON text."""
_WORLDS_TABLE = """
CREATE TABLE IF NOT EXISTS worlds (
    hash TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    base_hash TEXT NOT NULL,
    world TEXT NOT NULL,
    created_at REAL NOT NULL
)"""
"""Worlds as served, each once under its content hash (`simia.sim.storage._worlds`), its base state by digest."""

SCHEMA_SQL = (
    """
CREATE TABLE IF NOT EXISTS episodes (
    id TEXT PRIMARY KEY,
    world TEXT NOT NULL,
    world_hash TEXT NOT NULL,
    task TEXT,
    seed INTEGER,
    principal TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    seq INTEGER NOT NULL DEFAULT 0,
    calls INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    base_hash TEXT NOT NULL DEFAULT '',
    base_patches TEXT NOT NULL DEFAULT '[]',
    parent_id TEXT,
    fork_step INTEGER,
    group_id TEXT,
    verdict TEXT,
    transcript TEXT,
    tokens TEXT,
    status_reason TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    ended_at REAL,
    perturbation TEXT,
    reward INTEGER
);
CREATE INDEX IF NOT EXISTS episodes_world ON episodes (world, status);
CREATE INDEX IF NOT EXISTS episodes_status ON episodes (status);
CREATE TABLE IF NOT EXISTS events (
    episode_id TEXT NOT NULL REFERENCES episodes (id),
    seq INTEGER NOT NULL,
    request_key TEXT,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    output TEXT,
    text TEXT NOT NULL,
    is_error INTEGER NOT NULL,
    error_code TEXT,
    error_kind TEXT,
    state_patch TEXT NOT NULL,
    usage TEXT NOT NULL,
    latency_ms REAL NOT NULL,
    model TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    injected TEXT,
    source TEXT NOT NULL DEFAULT 'simulated',
    side TEXT NOT NULL DEFAULT 'agent',
    PRIMARY KEY (episode_id, seq)
);
DROP INDEX IF EXISTS events_request;
"""
    + _STATES_TABLE
    + ";"
    + _WORLDS_TABLE
    + ";"
    + CACHE_TABLE_SQL
    + ";"
)


_INSERT_EVENT = "INSERT INTO events (episode_id, {}) VALUES ({})".format(
    ", ".join(EVENT_COLUMNS), ", ".join("?" * (len(EVENT_COLUMNS) + 1))
)
_ADVANCE = (
    "UPDATE episodes SET seq = seq + 1, calls = calls + ?, prompt_tokens = prompt_tokens + ?, "
    "completion_tokens = completion_tokens + ?, cost_usd = cost_usd + ?, updated_at = ? "
    "WHERE id = ? RETURNING seq"
)
"""The UPDATE that advances an episode by one event (parameters: the counter deltas, `updated_at`, the id)."""
_ADVANCE_AT = _ADVANCE.replace("WHERE id = ?", "WHERE id = ? AND seq = ? AND status = 'active'")
"""`_ADVANCE` with the expected `seq` as its last parameter: it updates nothing unless the episode is still active
at that `seq`."""


def _from_unversioned(conn: sqlite3.Connection) -> None:
    """Migration 0 -> 1: a file written before schema versions were kept gets the tables and columns it lacks.

    `SCHEMA_SQL` is today's schema: a table the file lacks is created in its current form, and the later steps
    change only what they find."""
    conn.executescript(SCHEMA_SQL)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(episodes)")}
    if "tokens" not in columns:  # databases written before token data was kept
        conn.execute("ALTER TABLE episodes ADD COLUMN tokens TEXT")
    if "snapshot_seq" not in columns:  # databases written when every change had a snapshot
        conn.execute("ALTER TABLE episodes ADD COLUMN snapshot_seq INTEGER NOT NULL DEFAULT 0")
    if "perturbation" not in columns:  # databases written before fault injection
        conn.execute("ALTER TABLE episodes ADD COLUMN perturbation TEXT")
    event_columns = {row[1] for row in conn.execute("PRAGMA table_info(events)")}
    if "injected" not in event_columns:
        conn.execute("ALTER TABLE events ADD COLUMN injected TEXT")
    if "source" not in event_columns:  # databases written before tools could be routed to a real server
        conn.execute("ALTER TABLE events ADD COLUMN source TEXT NOT NULL DEFAULT 'simulated'")
    if "reward" not in columns:  # databases written before the viewer filtered and sorted by reward
        conn.execute("ALTER TABLE episodes ADD COLUMN reward INTEGER")
        conn.execute("UPDATE episodes SET reward = json_extract(verdict, '$.reward') WHERE verdict IS NOT NULL")
    conn.executescript(INDEX_SQL)


TEXT_OF = "CASE WHEN typeof({0}) = 'blob' THEN simia_text({0}) ELSE {0} END"
"""An event column as text in SQL (`page_sql`'s text filter): a compressed one through `simia_text`, the rest
without a call into Python."""


def _functions(conn: sqlite3.Connection) -> None:
    """The SQL functions simia's statements use: `simia_text(column)`, a `packed` event column as text."""
    conn.create_function("simia_text", 1, unpacked, deterministic=True)


def _no_setup(conn: sqlite3.Connection) -> None:
    """A read-only database is opened as it is (its schema was checked to be current first)."""
    _functions(conn)


def _postgres_only(conn: sqlite3.Connection) -> None:
    """Migration 1 -> 2 changed Postgres's indexes only (`simia.sim.storage.migrations.SCHEMA_VERSION`)."""


def _states_table(conn: sqlite3.Connection) -> None:
    """Migration 2 -> 3: each episode's initial state moves to the `states` table (`move_initial_states`), and the
    state columns and the snapshots go (`simia.sim.storage.migrations.SCHEMA_VERSION`), in one transaction.

    Nothing is lost: a version 2 database changed an episode's `state` only in the commit of an event carrying
    the patch that made the change (errors, reads and refused calls carry an empty patch and left it alone), so
    its `initial_state` and its events' patches rebuild every state, as `state_at` always did after the last
    snapshot; a snapshot was such a state, written again. Each change checks what it changes, so the step can
    run again (SQLite's DROP COLUMN rewrites the table; the freed pages are reused, `VACUUM` returns them)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_STATES_TABLE)
        columns = {row[1] for row in conn.execute("PRAGMA table_info(episodes)")}
        if "base_hash" not in columns:
            conn.execute("ALTER TABLE episodes ADD COLUMN base_hash TEXT NOT NULL DEFAULT ''")
        if "base_patches" not in columns:
            conn.execute("ALTER TABLE episodes ADD COLUMN base_patches TEXT NOT NULL DEFAULT '[]'")
        if "initial_state" in columns:
            move_initial_states(conn, "?")
        for gone in ("state", "initial_state", "snapshot_seq"):
            if gone in columns:
                conn.execute(f"ALTER TABLE episodes DROP COLUMN {gone}")
        conn.execute("DROP TABLE IF EXISTS snapshots")
        # The idle sweep's (status, updated_at) index changed on every call (one more page per commit): the
        # sweep reads the active episodes through `status` instead, every few seconds at most.
        conn.execute("DROP INDEX IF EXISTS episodes_updated")
        conn.execute("CREATE INDEX IF NOT EXISTS episodes_status ON episodes (status)")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _worlds_table(conn: sqlite3.Connection) -> None:
    """Migration 3 -> 4: the `worlds` table (`simia.sim.storage.migrations.SCHEMA_VERSION`); it can run again."""
    conn.execute(_WORLDS_TABLE)


def _call_sides(conn: sqlite3.Connection) -> None:
    """Migration 4 -> 5: an event says whose call it was (`side`: the agent's, or the user's own tool in a
    dual-control world); every earlier call was the agent's. It can run again."""
    if "side" not in {row[1] for row in conn.execute("PRAGMA table_info(events)")}:
        conn.execute("ALTER TABLE events ADD COLUMN side TEXT NOT NULL DEFAULT 'agent'")


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _from_unversioned,
    _postgres_only,
    _states_table,
    _worlds_table,
    _call_sides,
]
"""Step `v` brings a database at schema version `v` to `v + 1` (`simia.sim.storage.migrations`); a new step
checks what it changes, so a step that fails half-way can run again."""
assert len(MIGRATIONS) == SCHEMA_VERSION


def _schema_of(conn: sqlite3.Connection) -> tuple[int, set[str]]:
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    return version, {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _check_schema(path: str) -> int | None:
    """The schema version of the database at `path` (None: no database yet), read without writing to it.

    Raises:
        StoreSchemaError: the file is not a SQLite database, is another program's, or is newer.
    """
    if path == ":memory:" or not Path(path).is_file() or Path(path).stat().st_size == 0:
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            version, tables = _schema_of(conn)
    except sqlite3.DatabaseError as exc:
        raise StoreSchemaError(f"{path!r} is not a SQLite database ({exc}); give a new file path") from None
    return None if schema_steps(version, tables, repr(path)) is None else version


def _setup(conn: sqlite3.Connection) -> None:
    """Create the tables in a new database, or bring one written by an older simia up to date (see `MIGRATIONS`)."""
    _functions(conn)
    version, tables = _schema_of(conn)
    steps = schema_steps(version, tables, "the database")
    if steps is None:
        conn.executescript(SCHEMA_SQL)
        conn.executescript(INDEX_SQL)
    elif not steps:
        return
    else:
        for step in steps:
            MIGRATIONS[step](conn)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


PAGE_SIZE = 1024
"""The page size of a new database file. A WAL commit writes every page it changed in full, and a call's commit
changes three (its event, the events index, the episode's counters): at 1 KB a call writes about 3 KB plus what
its event holds beyond a page (`bench/state_scale.py`), where SQLite's default 4 KB pages wrote 6.5 KB."""


class SqliteStore:
    """Episodes, events, base states and the response cache in one SQLite file (a `Store`).

    Args:
        path: the database file (created when missing); ":memory:" for tests.
        synchronous: SQLite `synchronous` pragma. FULL (default) survives power loss;
            NORMAL survives process crashes only.
        read_only: open an existing database read-only (the viewer): every write raises `StoreUnavailable`.

    Raises:
        StoreConfigError: read-only, and the file is not a simia database of the current schema.
        sqlite3.Error: the file cannot be opened.
    """

    shared = False
    """One process writes a SQLite file (several replicas need Postgres: README "Several replicas")."""

    executor_type: type[BatchExecutor] = BatchExecutor
    """How jobs reach the connection (tests swap in an unsafe variant for the durability control)."""

    def __init__(self, path: str | Path, *, synchronous: str = "FULL", read_only: bool = False) -> None:
        self.path = str(path)
        found = _check_schema(self.path)
        if read_only and found != SCHEMA_VERSION:
            raise StoreSchemaError(
                f"{self.path!r} is not a simia database"
                if found is None
                else f"{self.path!r} was written by an older simia (schema version {found}); bring it up to date "
                f"first: simia db migrate --db {self.path}"
            )
        setup = _no_setup if read_only else _setup
        self._db = self.executor_type(
            self.path, synchronous=synchronous, setup=setup, read_only=read_only, page_size=PAGE_SIZE
        )
        self.migrated_from = found if found is not None and found < SCHEMA_VERSION else None
        """The schema version this store upgraded the database from (None: it was current, or new)."""
        self._bases = BaseStates(_StatesTable(self._db))
        self._worlds = ServedWorlds(_WorldsTable(self._db), self._bases)

    async def close(self) -> None:
        await self._db.close()

    async def put_base(self, state: State) -> None:
        await self._bases.put(state)

    async def base(self, base_hash: str) -> State:
        return await self._bases.get(base_hash)

    async def put_world(self, world: World) -> None:
        await self._worlds.put(world)

    async def served_world(self, world_hash: str) -> World | None:
        return await self._worlds.get(world_hash)

    async def world_versions(self) -> list[WorldVersion]:
        return await self._worlds.versions()

    async def create_episode(self, episode: EpisodeRecord) -> EpisodeRecord:
        await self._bases.attach(episode)
        values = episode_params(episode)

        def run(conn: sqlite3.Connection) -> EpisodeRecord:
            conn.execute(INSERT_EPISODE, values)
            return episode

        return await self._db.run(run, point=True)

    async def get_episode(self, episode_id: str) -> EpisodeRecord | None:
        def run(conn: sqlite3.Connection) -> EpisodeRecord | None:
            row = conn.execute(EPISODE_SQL, (episode_id,)).fetchone()
            return episode_from_row(row) if row else None

        return await self._db.run(run, point=True)

    async def list_episodes(
        self,
        *,
        world: str | None = None,
        status: str | None = None,
        principal: str | None = None,
        task: str | None = None,
        since: float | None = None,
        limit: int = 1000,
        offset: int = 0,
        newest_first: bool = False,
    ) -> list[EpisodeRecord]:
        sql, params = list_sql(
            world=world, status=status, principal=principal, task=task, since=since, newest_first=newest_first
        )

        def run(conn: sqlite3.Connection) -> list[EpisodeRecord]:
            return [episode_from_row(r) for r in conn.execute(sql, [*params, limit, offset]).fetchall()]

        return await self._db.run(run)

    async def query_episodes(self, query: EpisodeQuery) -> EpisodePage:
        rows_sql, count_sql, params = page_sql(query, text_of=TEXT_OF)

        def run(conn: sqlite3.Connection) -> EpisodePage:
            rows = [EpisodeRow(*r) for r in conn.execute(rows_sql, [*params, query.limit, query.offset])]
            total = int(conn.execute(count_sql, params).fetchone()[0])
            if rows:
                by_id = {row.id: row for row in rows}
                for episode_id, agent, infra in conn.execute(error_counts_sql(len(rows)), list(by_id)):
                    by_id[episode_id].agent_errors, by_id[episode_id].infra_errors = agent, infra
                for episode_id, forks in conn.execute(fork_counts_sql(len(rows)), list(by_id)):
                    by_id[episode_id].forks = forks
            complete = True
            if query.text:
                complete = (conn.execute("SELECT MAX(rowid) FROM events").fetchone()[0] or 0) <= TEXT_SCAN_LIMIT
            return EpisodePage(rows, total, complete)

        return await self._db.run(run)

    async def task_stats(self, *, world: str | None = None, principal: str | None = None) -> list[TaskStats]:
        sql, params = task_stats_sql(world, principal)

        def run(conn: sqlite3.Connection) -> list[TaskStats]:
            return [TaskStats(*row) for row in conn.execute(sql, params)]

        return await self._db.run(run)

    async def progress(self, episode_id: str, after: int, limit: int) -> Progress | None:
        def run(conn: sqlite3.Connection) -> Progress | None:
            return progress_from_rows(conn.execute(PROGRESS_SQL, (after, after + limit, episode_id)).fetchall())

        return await self._db.run(run, point=True)

    async def count_live(self, principal: str | None = None) -> int:
        def run(conn: sqlite3.Connection) -> int:
            if principal is None:
                return int(conn.execute("SELECT COUNT(*) FROM episodes WHERE status = 'active'").fetchone()[0])
            sql = "SELECT COUNT(*) FROM episodes WHERE status = 'active' AND principal = ?"
            return int(conn.execute(sql, (principal,)).fetchone()[0])

        return await self._db.run(run)

    async def set_status(
        self,
        episode_id: str,
        status: str,
        *,
        reason: str | None = None,
        verdict: Verdict | None = None,
        transcript: list[dict[str, Any]] | None = None,
        tokens: dict[str, Any] | None = None,
    ) -> None:
        params = set_status_params(episode_id, status, reason, verdict, transcript, tokens)

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(SET_STATUS_SQL, params)

        await self._db.run(run)

    async def abandon_idle(self, idle_seconds: float) -> list[str]:
        """Mark active episodes idle for longer than `idle_seconds` as abandoned (their events are kept)."""
        cutoff = time.time() - idle_seconds

        def run(conn: sqlite3.Connection) -> list[str]:
            ids = [
                r[0]
                for r in conn.execute("SELECT id FROM episodes WHERE status = 'active' AND updated_at < ?", (cutoff,))
            ]
            conn.execute(
                "UPDATE episodes SET status = 'abandoned', status_reason = 'idle timeout', ended_at = ? "
                "WHERE status = 'active' AND updated_at < ?",
                (time.time(), cutoff),
            )
            return ids

        return await self._db.run(run)

    async def commit_event(
        self, episode_id: str, event: EventRecord, *, expected_seq: int | None = None
    ) -> EventRecord:
        """Append `event` and advance its episode in one transaction (SQLite's write transactions are exclusive,
        so the `expected_seq` check and the write are one step).

        Retries are recognised by the caller (`EpisodeService` matches a request against
        an episode's latest events under the episode's lock); an index on random request
        keys would cost every commit more than the rest of its writes.

        Returns:
            The committed event, with its `seq`.
        """

        def run(conn: sqlite3.Connection) -> EventRecord:
            params: list[Any] = [*event.counter_deltas(), event.created_at, episode_id]
            if expected_seq is not None:
                params.append(expected_seq)
            rows = conn.execute(_ADVANCE if expected_seq is None else _ADVANCE_AT, params).fetchall()
            if not rows:
                if conn.execute("SELECT 1 FROM episodes WHERE id = ?", (episode_id,)).fetchone():
                    raise StoreConflict(f"episode {episode_id} moved on since seq {expected_seq}")
                raise LookupError(f"no episode {episode_id!r}")
            seq = rows[0][0]
            event.seq = seq
            e = event
            values = (  # episode_id, then EVENT_COLUMNS in order
                episode_id,
                seq,
                e.request_key,
                e.tool,
                packed(compact_json(e.arguments)),
                packed(compact_json(e.output)),
                packed(stored_text(e)),
                int(e.is_error),
                e.error_code,
                e.error_kind,
                compact_json(e.state_patch),
                compact_json(e.usage),
                e.latency_ms,
                e.model,
                e.detail,
                e.created_at,
                e.injected,
                e.source,
                e.side,
            )
            conn.execute(_INSERT_EVENT, values)
            return event

        return await self._db.run(run, point=True)

    @contextlib.asynccontextmanager
    async def hold(self, episode_id: str) -> AsyncIterator[None]:
        """Nothing to hold: one process owns a SQLite file's episodes (another process's commits are still
        refused by `expected_seq`, but nothing keeps it from winning every race: use Postgres for replicas)."""
        yield

    async def recent_events(self, episode_id: str, n: int) -> list[EventRecord]:
        """The last `n` events, oldest first."""

        def run(conn: sqlite3.Connection) -> list[EventRecord]:
            rows = conn.execute(
                f"SELECT {', '.join(EVENT_COLUMNS)} FROM events WHERE episode_id = ? ORDER BY seq DESC LIMIT ?",
                (episode_id, n),
            ).fetchall()
            return [event_from_row(r) for r in reversed(rows)]

        return await self._db.run(run, point=True) if n > 0 else []

    async def events(self, episode_id: str) -> list[EventRecord]:
        def run(conn: sqlite3.Connection) -> list[EventRecord]:
            rows = conn.execute(
                f"SELECT {', '.join(EVENT_COLUMNS)} FROM events WHERE episode_id = ? ORDER BY seq", (episode_id,)
            )
            return [event_from_row(r) for r in rows]

        return await self._db.run(run)

    async def state_path(self, episode_id: str, step: int) -> StatePath:
        def run(conn: sqlite3.Connection) -> StatePath:
            start = conn.execute(STATE_START_SQL, (episode_id,)).fetchone()
            patches = conn.execute(PATCHES_SQL, (episode_id, step)).fetchall() if start is not None else []
            return state_path_of(start, (row[0] for row in patches), episode_id)

        return await self._db.run(run, point=True)

    async def state_at(self, episode_id: str, step: int) -> State:
        path = await self.state_path(episode_id, step)
        return apply_patches(await self.base(path.base_hash), path.patches)

    async def integrity_check(self) -> str:
        def run(conn: sqlite3.Connection) -> str:
            found = str(conn.execute("PRAGMA integrity_check").fetchone()[0])
            if found != "ok":
                return found
            return consistency_report(
                [r[0] for r in conn.execute(CONSISTENCY_SQL)], [r[0] for r in conn.execute(MISSING_BASES_SQL)]
            )

        return await self._db.run(run)

    async def get(self, key: str) -> dict[str, Any] | None:
        return await self._db.run(lambda conn: read_cached(conn, key), point=True)

    async def put(self, key: str, replay_key: str, data: dict[str, Any], model: str) -> None:
        await self._db.run(lambda conn: write_cached(conn, key, replay_key, data, model), point=True)


class _StatesTable:
    """The `states` table through the store's executor (`simia.sim.storage._bases.BaseRows`); a base's text is
    read on the writer thread, never inline on the event loop."""

    def __init__(self, db: BatchExecutor) -> None:
        self._db = db

    async def base_exists(self, digest: str) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            return conn.execute(BASE_EXISTS_SQL, (digest,)).fetchone() is not None

        return await self._db.run(run, point=True)

    async def insert_base(self, digest: str, text: str) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute(INSERT_BASE, (digest, text))

        await self._db.run(run)

    async def base_text(self, digest: str) -> str | None:
        def run(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(BASE_SQL, (digest,)).fetchone()
            return None if row is None else str(row[0])

        return await self._db.run(run)


class _WorldsTable:
    """The `worlds` table through the store's executor (`simia.sim.storage._worlds.WorldRows`)."""

    def __init__(self, db: BatchExecutor) -> None:
        self._db = db

    async def insert_world(self, world_hash: str, name: str, base_hash: str, text: str) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute(INSERT_WORLD, (world_hash, name, base_hash, text, time.time()))

        await self._db.run(run)

    async def world_row(self, world_hash: str) -> tuple[str, str] | None:
        def run(conn: sqlite3.Connection) -> tuple[str, str] | None:
            row = conn.execute(WORLD_SQL, (world_hash,)).fetchone()
            return None if row is None else (str(row[0]), str(row[1]))

        return await self._db.run(run)

    async def version_rows(self) -> list[WorldVersion]:
        def run(conn: sqlite3.Connection) -> list[WorldVersion]:
            return [WorldVersion(w, h, int(n), bool(s)) for w, h, n, s in conn.execute(WORLD_VERSIONS_SQL)]

        return await self._db.run(run)
