"""The Postgres store: the same tables and semantics as the SQLite store, for several replicas on one database.

`PgStore` implements `simia.sim.storage.protocol.Store` with psycopg 3 (async) over a connection
pool of autocommit connections. Each write is one statement, committed before it
returns (a commit costs one round trip). Events of one episode get gap-free `seq`
because a commit advances the episode and inserts the event in one statement whose
UPDATE locks the episode's row: concurrent commits of one episode, from any number of
processes, queue on that row and never on each other's episodes. The columns, their
order and the JSON encoding are the SQLite store's (`simia db copy` moves rows between
the two as they are). Each method's SQL sits in that method (the commit's in
`_commit_sql`); the statements shared with SQLite come from `simia.sim.storage.sql`
with `?` made `%s`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.rows import dict_row, tuple_row

from ..errors import StoreConfigError, StoreConflict, StoreSchemaError, StoreUnavailable
from ..records import EpisodeRecord, EventRecord, Progress, StatePath
from ..verdict import Verdict
from ..world import State, World, apply_patches, compact_json
from ._bases import BaseStates
from ._pg_connections import Connections
from ._worlds import ServedWorlds, WorldVersion
from .migrations import SCHEMA_VERSION, move_initial_states, not_simia, schema_steps
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
    progress_from_rows,
    set_status_params,
    state_path_of,
    stored_text,
)

__all__ = ["PG_SCHEMA", "PgStore", "is_postgres_url", "redact_url"]

_FILLFACTOR = 50
"""Percent of each `episodes` page new rows fill: the rest is room for the next versions of its rows, so that
calls update them in place (heap-only)."""
_ACTIVE_INDEX = "CREATE INDEX IF NOT EXISTS episodes_active ON episodes (id) WHERE status = 'active'"
"""The active episodes (the idle sweep, the live count). No index of `episodes` may hold a column a call changes
(`seq`, the counters, `updated_at`): then a call's update writes no index entries."""
_STATES_TABLE = "CREATE TABLE IF NOT EXISTS states (hash TEXT PRIMARY KEY, state TEXT NOT NULL)"
"""Base states, each stored once under its digest (`simia.sim.world.State.digest`) as JSON text."""
_WORLDS_TABLE = (
    "CREATE TABLE IF NOT EXISTS worlds (hash TEXT PRIMARY KEY, name TEXT NOT NULL, base_hash TEXT NOT NULL, "
    "world TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL)"
)
"""Worlds as served, each once under its content hash (`simia.sim.storage._worlds`), its base state by digest."""

PG_SCHEMA = [
    f"""CREATE TABLE episodes (
    id TEXT PRIMARY KEY,
    world TEXT NOT NULL,
    world_hash TEXT NOT NULL,
    task TEXT,
    seed BIGINT,
    principal TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    seq BIGINT NOT NULL DEFAULT 0,
    calls BIGINT NOT NULL DEFAULT 0,
    prompt_tokens BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    base_hash TEXT NOT NULL DEFAULT '',
    base_patches TEXT NOT NULL DEFAULT '[]',
    parent_id TEXT,
    fork_step BIGINT,
    group_id TEXT,
    verdict TEXT,
    transcript TEXT,
    tokens TEXT,
    status_reason TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    ended_at DOUBLE PRECISION,
    perturbation TEXT,
    reward INTEGER
) WITH (fillfactor = {_FILLFACTOR})""",
    "CREATE INDEX episodes_world ON episodes (world, status)",
    _ACTIVE_INDEX,
    *[statement.strip() for statement in INDEX_SQL.split(";") if statement.strip()],
    """CREATE TABLE events (
    episode_id TEXT NOT NULL REFERENCES episodes (id),
    seq BIGINT NOT NULL,
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
    latency_ms DOUBLE PRECISION NOT NULL,
    model TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    injected TEXT,
    source TEXT NOT NULL DEFAULT 'simulated',
    side TEXT NOT NULL DEFAULT 'agent',
    PRIMARY KEY (episode_id, seq)
)""",
    "CREATE INDEX events_created ON events (created_at)",  # the viewer's text filter reads the newest events
    _STATES_TABLE,
    _WORLDS_TABLE,
    """CREATE TABLE llm_cache (
    key TEXT PRIMARY KEY,
    replay_key TEXT NOT NULL,
    data TEXT NOT NULL,
    model TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL
)""",
    "CREATE INDEX llm_cache_replay ON llm_cache (replay_key, created)",
]
"""The current schema (version `SCHEMA_VERSION`), as a new database gets it."""


def _hot_updates(conn: psycopg.Connection[Any]) -> None:
    """Migration 1 -> 2: the idle sweep's index on (status, updated_at) becomes a partial index of the active
    episodes, and pages keep room for new row versions, so that a call's update is a heap-only one."""
    conn.execute(f"ALTER TABLE episodes SET (fillfactor = {_FILLFACTOR})")  # type: ignore[arg-type]  # pages written from now on
    conn.execute("DROP INDEX IF EXISTS episodes_updated")
    conn.execute(_ACTIVE_INDEX)  # type: ignore[arg-type]  # our own constant SQL


def _states_table(conn: psycopg.Connection[Any]) -> None:
    """Migration 2 -> 3: each episode's initial state moves to the `states` table (`move_initial_states`), and the
    state columns and the snapshots go (`simia.sim.storage.migrations.SCHEMA_VERSION`).

    Nothing is lost: a version 2 database changed an episode's `state` only in the commit of an event carrying
    the patch that made the change (errors, reads and refused calls carry an empty patch and left it alone), so
    its `initial_state` and its events' patches rebuild every state, as `state_at` always did after the last
    snapshot; a snapshot was such a state, written again. It runs in the transaction of the whole upgrade, and
    each change checks what it changes."""
    conn.execute(_STATES_TABLE)  # type: ignore[arg-type]  # our own constant SQL
    conn.execute("ALTER TABLE episodes ADD COLUMN IF NOT EXISTS base_hash TEXT NOT NULL DEFAULT ''")
    conn.execute("ALTER TABLE episodes ADD COLUMN IF NOT EXISTS base_patches TEXT NOT NULL DEFAULT '[]'")
    found = conn.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = 'episodes' AND column_name = 'initial_state'"
    ).fetchone()
    if found is not None:
        move_initial_states(conn, "%s")
    conn.execute(
        "ALTER TABLE episodes DROP COLUMN IF EXISTS state, DROP COLUMN IF EXISTS initial_state, "
        "DROP COLUMN IF EXISTS snapshot_seq"
    )
    conn.execute("DROP TABLE IF EXISTS snapshots")


def _worlds_table(conn: psycopg.Connection[Any]) -> None:
    """Migration 3 -> 4: the `worlds` table (`simia.sim.storage.migrations.SCHEMA_VERSION`), in the transaction of
    the whole upgrade; it can run again."""
    conn.execute(_WORLDS_TABLE)  # type: ignore[arg-type]  # our own constant SQL


def _call_sides(conn: psycopg.Connection[Any]) -> None:
    """Migration 4 -> 5: an event says whose call it was (`side`); every earlier call was the agent's."""
    conn.execute("ALTER TABLE events ADD COLUMN IF NOT EXISTS side TEXT NOT NULL DEFAULT 'agent'")


MIGRATIONS: list[Callable[[psycopg.Connection[Any]], None]] = [
    _hot_updates,
    _states_table,
    _worlds_table,
    _call_sides,
]
"""Step `v - 1` brings a Postgres database at version `v` to `v + 1`; version 1 is the first Postgres schema."""

_META = "CREATE TABLE IF NOT EXISTS simia_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
CONNECTION_WAIT = 10.0
"""Seconds an operation waits for one of the replica's connections before failing as `StoreUnavailable`."""
_SCHEMA_LOCK = 0x5149_4D49  # the advisory lock replicas starting at once take to set up the schema one at a time
_TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"


def _pg(sql: str) -> str:
    """A statement written for SQLite (`?` parameters) in psycopg's form (`%s`)."""
    return sql.replace("?", "%s")


_INSERT_EPISODE_PG = _pg(INSERT_EPISODE)
_EPISODE_PG = _pg(EPISODE_SQL)
_STATE_START_PG = _pg(STATE_START_SQL)
_PATCHES_PG = _pg(PATCHES_SQL)
_BASE_PG = _pg(BASE_SQL)
_BASE_EXISTS_PG = _pg(BASE_EXISTS_SQL)
_INSERT_BASE_PG = _pg(INSERT_BASE)
_INSERT_WORLD_PG = _pg(INSERT_WORLD)
_WORLD_PG = _pg(WORLD_SQL)
_SET_STATUS_PG = _pg(SET_STATUS_SQL)
_PROGRESS_PG = _pg(PROGRESS_SQL)
_EVENT_SELECT = f"SELECT {', '.join(EVENT_COLUMNS)} FROM events WHERE episode_id = %s"


def _commit_sql(*, expected: bool) -> str:
    """The one statement that commits an event: advance the episode (its row stays locked until the statement
    ends) and insert the event at the new `seq`. Nothing is written when the episode is missing or (with
    `expected`) not active at that seq."""
    guard = " AND seq = %(expected)s AND status = 'active'" if expected else ""
    columns = EVENT_COLUMNS[1:]  # after seq
    return (
        "WITH adv AS (UPDATE episodes SET seq = seq + 1, calls = calls + %(calls)s, "
        "prompt_tokens = prompt_tokens + %(prompt)s, completion_tokens = completion_tokens + %(completion)s, "
        f"cost_usd = cost_usd + %(cost)s, updated_at = %(created_at)s WHERE id = %(episode_id)s{guard} "
        "RETURNING seq), "
        f"ev AS (INSERT INTO events (episode_id, seq, {', '.join(columns)}) "
        f"SELECT %(episode_id)s, adv.seq, {', '.join(f'%({c})s' for c in columns)} FROM adv) "
        "SELECT seq FROM adv"
    )


_COMMIT_SQL = {expected: _commit_sql(expected=expected) for expected in (False, True)}


def is_postgres_url(target: str) -> bool:
    """Whether a `--db` target is a Postgres URL (`postgresql://`, `postgres://`, `postgresql+DRIVER://`)."""
    scheme = target.partition("://")[0]
    return "://" in target and (scheme in ("postgresql", "postgres") or scheme.startswith("postgresql+"))


def redact_url(url: str) -> str:
    """`url` with its password replaced by `***` (for messages and logs)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return _hide_passwords(url)


def _hide_passwords(text: str) -> str:
    """`text` with the password of any URL in it (`//user:password@`) replaced by `***`."""
    return re.sub(r"(//[^:/@\s]*):[^@\s]*@", r"\1:***@", text)


def libpq_url(url: str) -> str:
    """The URL as libpq reads it (a `postgresql+psycopg://` SQLAlchemy-style scheme loses its driver part)."""
    scheme, _, rest = url.partition("://")
    return f"postgresql://{rest}" if scheme.startswith("postgresql+") else url


def _one_line(exc: BaseException) -> str:
    """A driver error as one line, without any password (libpq quotes a malformed URL whole)."""
    return _hide_passwords(" ".join(str(exc).split())) or type(exc).__name__


class PgStore:
    """Episodes, events, base states and the response cache in one Postgres database (a `Store`).

    The schema is created, upgraded or refused (`simia.sim.storage.migrations`) here, before the
    constructor returns, on a connection of its own; the connections (`Connections`) open on first use.

    Args:
        url: `postgresql://USER[:PASSWORD]@HOST[:PORT]/DB` (any libpq URL; `postgres://` too).
        create: create simia's tables in an empty database (False, for readers: refuse it).
        read_only: a reader that writes nothing (the viewer): every transaction is read-only, and a database
            of an older schema is refused (upgrading it would write) with the command that upgrades it.
        max_connections: the most connections open at once (one operation holds one while it runs).
        connect_timeout: seconds to wait for the server when connecting.

    Raises:
        StoreConfigError: the URL is malformed, or the database cannot be reached or logged into.
        StoreSchemaError: the database has a newer simia schema, or tables that are not simia's, or
            (with `create` False) no tables.
    """

    shared = True
    """Several replicas write one Postgres database."""

    def __init__(
        self,
        url: str,
        *,
        create: bool = True,
        read_only: bool = False,
        max_connections: int = 16,
        connect_timeout: float = 5.0,
    ) -> None:
        self.path = url
        self.where = redact_url(url)
        self._conninfo = libpq_url(url)
        self._max = max_connections
        self._timeout = connect_timeout
        self._read_only = read_only
        self._connections = Connections(self._open_connection, max_connections, CONNECTION_WAIT)
        self._closed = False
        self._held: ContextVar[psycopg.AsyncConnection[dict[str, Any]] | None] = ContextVar("held", default=None)
        self.migrated_from: int | None = None
        """The schema version this store upgraded the database from (None: it was current, or new)."""
        self._bases = BaseStates(_StatesTable(self))
        self._worlds = ServedWorlds(_WorldsTable(self), self._bases)
        try:
            self._setup(create and not read_only)
        except psycopg.Error as exc:
            raise StoreConfigError(f"cannot set up simia's tables at {self.where}: {_one_line(exc)}") from None

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self._conninfo, connect_timeout=max(1, round(self._timeout)))
        except psycopg.Error as exc:
            raise StoreConfigError(f"cannot connect to Postgres at {self.where}: {_one_line(exc)}") from None

    def _setup(self, create: bool) -> None:
        with self._connect() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            tables = {row[0] for row in conn.execute(_TABLES)}
            version = 0
            if "simia_meta" in tables:
                row = conn.execute("SELECT value FROM simia_meta WHERE key = 'schema_version'").fetchone()
                version = int(row[0]) if row else 0
            elif tables:  # simia writes its meta table with its first tables: these are another program's
                raise not_simia(self.where, tables)
            steps = schema_steps(version, tables, self.where)
            if steps is None and not create:
                raise StoreSchemaError(f"{self.where} has no simia tables; pass the database `simia serve --db` wrote")
            if steps is not None and not steps:
                return
            if self._read_only and steps is not None:
                raise StoreSchemaError(
                    f"{self.where} was written by an older simia (schema version {version}); bring it up to date "
                    "first: simia db migrate --db URL"
                )
            conn.execute(_META)
            if steps is None:
                for statement in PG_SCHEMA:
                    conn.execute(statement)  # type: ignore[arg-type]  # our own constant SQL
            else:
                self.migrated_from = version
                for step in steps:
                    MIGRATIONS[step - 1](conn)
            conn.execute(
                "INSERT INTO simia_meta (key, value) VALUES ('schema_version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                (str(SCHEMA_VERSION),),
            )

    async def _open_connection(self) -> psycopg.AsyncConnection[dict[str, Any]]:
        extra: dict[str, Any] = {"options": "-c default_transaction_read_only=on"} if self._read_only else {}
        return await psycopg.AsyncConnection.connect(
            self._conninfo, row_factory=dict_row, autocommit=True, connect_timeout=max(1, round(self._timeout)), **extra
        )

    @asynccontextmanager
    async def hold(self, episode_id: str) -> AsyncIterator[None]:
        """Lock the episode's row until the block ends; the store's operations inside the block (in this
        task) run in that one transaction, committed when the block ends (rolled back on an error)."""
        async with self._conn() as conn, conn.transaction():
            await conn.execute("SELECT 1 FROM episodes WHERE id = %s FOR UPDATE", (episode_id,))
            token = self._held.set(conn)
            try:
                yield
            finally:
                self._held.reset(token)

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[psycopg.AsyncConnection[dict[str, Any]]]:
        """A lent connection in autocommit mode (each operation here is one statement, or reads only rows
        that no longer change); inside `hold`, the held transaction's.

        Raises:
            StoreUnavailable: the connection failed (the server is down or restarting), or none was free in time.
        """
        if self._closed:
            raise RuntimeError("the store is closed")
        held = self._held.get()
        if held is not None:
            yield held
            return
        try:
            conn = await self._connections.take()
        except TimeoutError:
            raise self._unavailable(
                f"none of this replica's {self._max} connections came free within {CONNECTION_WAIT:g} s"
            ) from None
        except psycopg.OperationalError as exc:
            raise self._unavailable(_one_line(exc)) from None
        try:
            yield conn
        except psycopg.OperationalError as exc:
            raise self._unavailable(_one_line(exc)) from None
        finally:
            await self._connections.give(conn)

    def _unavailable(self, why: str) -> StoreUnavailable:
        return StoreUnavailable(f"the database at {self.where} is unavailable: {why}")

    async def _rows(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            cursor = await conn.execute(sql, params)  # type: ignore[arg-type]  # our own constant SQL
            return await cursor.fetchall()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._connections.close()

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
        async with self._conn() as conn:
            await conn.execute(_INSERT_EPISODE_PG, episode_params(episode))  # type: ignore[arg-type]
        return episode

    async def get_episode(self, episode_id: str) -> EpisodeRecord | None:
        rows = await self._rows(_EPISODE_PG, (episode_id,))
        return episode_from_row(rows[0]) if rows else None  # type: ignore[arg-type]  # a dict row reads alike

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
            world=world, status=status, principal=principal, task=task, since=since, newest_first=newest_first, ph="%s"
        )
        rows = await self._rows(sql, [*params, limit, offset])
        return [episode_from_row(r) for r in rows]  # type: ignore[arg-type]

    async def query_episodes(self, query: EpisodeQuery) -> EpisodePage:
        """The SQLite store's statements (`simia.sim.storage.queries`), the text filter reading events newest
        `created_at` first."""
        rows_sql, count_sql, params = page_sql(query, "%s", recency="created_at")
        async with self._conn() as conn:
            cursor = conn.cursor(row_factory=tuple_row)
            await cursor.execute(rows_sql, [*params, query.limit, query.offset])  # type: ignore[arg-type]
            rows = [EpisodeRow(*r) for r in await cursor.fetchall()]
            await cursor.execute(count_sql, params)  # type: ignore[arg-type]
            total = int((await cursor.fetchone() or (0,))[0])
            if rows:
                by_id = {row.id: row for row in rows}
                await cursor.execute(error_counts_sql(len(rows), "%s"), list(by_id))  # type: ignore[arg-type]
                for episode_id, agent, infra in await cursor.fetchall():
                    by_id[episode_id].agent_errors, by_id[episode_id].infra_errors = int(agent), int(infra)
                await cursor.execute(fork_counts_sql(len(rows), "%s"), list(by_id))  # type: ignore[arg-type]
                for episode_id, forks in await cursor.fetchall():
                    by_id[episode_id].forks = int(forks)
            complete = True
            if query.text:
                await cursor.execute("SELECT 1 FROM events OFFSET %s LIMIT 1", (TEXT_SCAN_LIMIT,))
                complete = await cursor.fetchone() is None
        return EpisodePage(rows, total, complete)

    async def task_stats(self, *, world: str | None = None, principal: str | None = None) -> list[TaskStats]:
        sql, params = task_stats_sql(world, principal, "%s")
        async with self._conn() as conn:
            cursor = conn.cursor(row_factory=tuple_row)
            await cursor.execute(sql, params)  # type: ignore[arg-type]
            return [
                TaskStats(w, t, int(n), int(judged), int(passed)) for w, t, n, judged, passed in await cursor.fetchall()
            ]

    async def progress(self, episode_id: str, after: int, limit: int) -> Progress | None:
        rows = await self._rows(_PROGRESS_PG, (after, after + limit, episode_id))
        return progress_from_rows(rows)  # type: ignore[arg-type]  # a dict row reads alike

    async def count_live(self, principal: str | None = None) -> int:
        if principal is None:
            rows = await self._rows("SELECT COUNT(*) AS n FROM episodes WHERE status = 'active'")
        else:
            sql = "SELECT COUNT(*) AS n FROM episodes WHERE status = 'active' AND principal = %s"
            rows = await self._rows(sql, (principal,))
        return int(rows[0]["n"])

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
        async with self._conn() as conn:
            await conn.execute(_SET_STATUS_PG, params)

    async def abandon_idle(self, idle_seconds: float) -> list[str]:
        """Mark active episodes idle for longer than `idle_seconds` as abandoned, in one statement: replicas
        sweeping at once each get the ids they changed, and no id twice."""
        rows = await self._rows(
            "UPDATE episodes SET status = 'abandoned', status_reason = 'idle timeout', ended_at = %s "
            "WHERE status = 'active' AND updated_at < %s RETURNING id",
            (time.time(), time.time() - idle_seconds),
        )
        return [r["id"] for r in rows]

    async def commit_event(
        self, episode_id: str, event: EventRecord, *, expected_seq: int | None = None
    ) -> EventRecord:
        """Append `event` and advance its episode in one statement (`_commit_sql`): its UPDATE locks the episode's
        row, so the `expected_seq` check and the writes see no other commit in between."""
        calls, prompt, completion, cost = event.counter_deltas()
        e = event
        params = {
            "episode_id": episode_id, "calls": calls, "prompt": prompt, "completion": completion, "cost": cost,
            "expected": expected_seq,
            "request_key": e.request_key, "tool": e.tool, "arguments": compact_json(e.arguments),
            "output": compact_json(e.output), "text": stored_text(e), "is_error": int(e.is_error),
            "error_code": e.error_code, "error_kind": e.error_kind, "state_patch": compact_json(e.state_patch),
            "usage": compact_json(e.usage),
            "latency_ms": e.latency_ms, "model": e.model, "detail": e.detail, "created_at": e.created_at,
            "injected": e.injected, "source": e.source, "side": e.side,
        }  # fmt: skip
        sql = _COMMIT_SQL[expected_seq is not None]
        async with self._conn() as conn:
            row = await (await conn.execute(sql, params)).fetchone()
            if row is None:
                found = await (await conn.execute("SELECT 1 FROM episodes WHERE id = %s", (episode_id,))).fetchone()
                if found:
                    raise StoreConflict(f"episode {episode_id} moved on since seq {expected_seq}")
                raise LookupError(f"no episode {episode_id!r}")
        event.seq = row["seq"]
        return event

    async def recent_events(self, episode_id: str, n: int) -> list[EventRecord]:
        if n <= 0:
            return []
        rows = await self._rows(f"{_EVENT_SELECT} ORDER BY seq DESC LIMIT %s", (episode_id, n))
        return [event_from_row(r) for r in reversed(rows)]  # type: ignore[arg-type]

    async def events(self, episode_id: str) -> list[EventRecord]:
        rows = await self._rows(f"{_EVENT_SELECT} ORDER BY seq", (episode_id,))
        return [event_from_row(r) for r in rows]  # type: ignore[arg-type]

    async def state_path(self, episode_id: str, step: int) -> StatePath:
        async with self._conn() as conn:
            cursor = conn.cursor(row_factory=tuple_row)
            await cursor.execute(_STATE_START_PG, (episode_id,))
            start = await cursor.fetchone()
            patches = []
            if start is not None:
                await cursor.execute(_PATCHES_PG, (episode_id, step))
                patches = await cursor.fetchall()
        return state_path_of(start, (row[0] for row in patches), episode_id)

    async def state_at(self, episode_id: str, step: int) -> State:
        path = await self.state_path(episode_id, step)
        return apply_patches(await self.base(path.base_hash), path.patches)

    async def integrity_check(self) -> str:
        """`"ok"`, or the episodes whose `seq` disagrees with their events (`CONSISTENCY_SQL`) or whose base state
        is missing (`MISSING_BASES_SQL`)."""
        bad = [r["id"] for r in await self._rows(CONSISTENCY_SQL)]
        return consistency_report(bad, [r["id"] for r in await self._rows(MISSING_BASES_SQL)])

    async def get(self, key: str) -> dict[str, Any] | None:
        rows = await self._rows("SELECT data FROM llm_cache WHERE key = %s", (key,))
        return json.loads(rows[0]["data"]) if rows else None

    async def get_replay(self, replay_key: str) -> dict[str, Any] | None:
        """The latest answer recorded for this call by any backend (what `replay:` serves)."""
        rows = await self._rows(
            "SELECT data FROM llm_cache WHERE replay_key = %s ORDER BY created DESC LIMIT 1", (replay_key,)
        )
        return json.loads(rows[0]["data"]) if rows else None

    async def put(self, key: str, replay_key: str, data: dict[str, Any], model: str) -> None:
        async with self._conn() as conn:
            await conn.execute(
                "INSERT INTO llm_cache (key, replay_key, data, model, created) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (key) DO UPDATE SET replay_key = EXCLUDED.replay_key, data = EXCLUDED.data, "
                "model = EXCLUDED.model, created = EXCLUDED.created",
                (key, replay_key, compact_json(data), model, time.time()),
            )


class _StatesTable:
    """The `states` table through the store's connections (`simia.sim.storage._bases.BaseRows`)."""

    def __init__(self, store: PgStore) -> None:
        self._store = store

    async def base_exists(self, digest: str) -> bool:
        return bool(await self._store._rows(_BASE_EXISTS_PG, (digest,)))

    async def insert_base(self, digest: str, text: str) -> None:
        async with self._store._conn() as conn:
            await conn.execute(_INSERT_BASE_PG, (digest, text))  # type: ignore[arg-type]  # our own constant SQL

    async def base_text(self, digest: str) -> str | None:
        rows = await self._store._rows(_BASE_PG, (digest,))
        return str(rows[0]["state"]) if rows else None


class _WorldsTable:
    """The `worlds` table through the store's connections (`simia.sim.storage._worlds.WorldRows`)."""

    def __init__(self, store: PgStore) -> None:
        self._store = store

    async def insert_world(self, world_hash: str, name: str, base_hash: str, text: str) -> None:
        async with self._store._conn() as conn:
            await conn.execute(_INSERT_WORLD_PG, (world_hash, name, base_hash, text, time.time()))  # type: ignore[arg-type]

    async def world_row(self, world_hash: str) -> tuple[str, str] | None:
        rows = await self._store._rows(_WORLD_PG, (world_hash,))
        return (str(rows[0]["base_hash"]), str(rows[0]["world"])) if rows else None

    async def version_rows(self) -> list[WorldVersion]:
        async with self._store._conn() as conn:
            cursor = conn.cursor(row_factory=tuple_row)
            await cursor.execute(WORLD_VERSIONS_SQL)  # type: ignore[arg-type]  # our own constant SQL
            return [WorldVersion(w, h, int(n), bool(s)) for w, h, n, s in await cursor.fetchall()]
