"""Schema versions and `simia db`: an older database is upgraded with every row intact, copies between
SQLite and Postgres keep every row, and a database simia must not touch is refused in one line, unwritten.

Every command runs as a real `simia` subprocess, against real SQLite files and a real Postgres.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from simia.sim.records import EpisodeRecord
from simia.sim.storage import SCHEMA_VERSION, open_store
from simia.sim.storage.db_copy import TABLES
from simia.testing.postgres import PostgresCluster

pytestmark = pytest.mark.processes  # every command runs as a `simia` subprocess
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PREVIOUS = FIXTURES / "previous_release.db"  # written by simia before schema versions (make_previous_release_db.py)
SCRIPT = FIXTURES / "mock_script.json"


def simia(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simia.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=FIXTURES,
        env={**os.environ, **(env or {})},
    )


def sqlite_rows(db: Path | str, tables: dict[str, list[str]] = TABLES) -> dict[str, list[tuple[Any, ...]]]:
    with sqlite3.connect(db) as conn:
        return {t: sorted(conn.execute(f"SELECT {', '.join(c)} FROM {t}").fetchall()) for t, c in tables.items()}


def pg_rows(url: str, tables: dict[str, list[str]] = TABLES) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url) as conn:
        return {t: sorted(conn.execute(f"SELECT {', '.join(c)} FROM {t}").fetchall()) for t, c in tables.items()}


def previous_columns() -> dict[str, list[str]]:
    """Today's tables and columns that the previous release had too (it lacks the episodes' reward, base hash and
    base patches, the events' source, and the states table)."""
    with sqlite3.connect(PREVIOUS) as conn:
        had = {t: {row[1] for row in conn.execute(f"PRAGMA table_info({t})")} for t in TABLES}
    return {t: [c for c in columns if c in had[t]] for t, columns in TABLES.items() if had[t]}


def previous_states() -> dict[str, tuple[dict[str, Any], dict[str, Any], int]]:
    """Each of the fixture's episodes: its initial state, its last state and its seq, as the previous release kept
    them (whole, in the episode's row)."""
    with sqlite3.connect(PREVIOUS) as conn:
        rows = conn.execute("SELECT id, initial_state, state, seq FROM episodes").fetchall()
    return {i: (json.loads(initial), json.loads(state), seq) for i, initial, state, seq in rows}


def previous_rows() -> dict[str, list[tuple[Any, ...]]]:
    """The fixture's rows, read in the columns the previous release had."""
    return sqlite_rows(PREVIOUS, previous_columns())


async def test_a_database_of_the_previous_release_is_upgraded_on_open_with_every_row_intact(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    shutil.copy(PREVIOUS, db)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
    before = previous_rows()
    assert {t: len(rows) for t, rows in before.items()} == {"episodes": 3, "events": 23, "llm_cache": 22}
    store = open_store(db)
    try:
        assert store.migrated_from == 0
        assert sqlite_rows(db, previous_columns()) == before
        with sqlite3.connect(db) as conn:  # the columns it lacked: rewards from the stored verdicts, calls simulated
            rewards = conn.execute("SELECT reward, json_extract(verdict, '$.reward') FROM episodes").fetchall()
            assert all(r == v for r, v in rewards)
            assert {s for (s,) in conn.execute("SELECT DISTINCT source FROM events")} == {"simulated"}
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            columns = {row[1] for row in conn.execute("PRAGMA table_info(episodes)")}
            (bases,) = conn.execute("SELECT COUNT(*) FROM states").fetchone()
        assert "snapshots" not in tables and not columns & {"initial_state", "state", "snapshot_seq"}
        assert bases == 2  # the seeded and the task episode started from one state: one row for both
        for episode_id, (initial, last, seq) in previous_states().items():  # every state, from base and patches
            assert (await store.state_at(episode_id, 0), await store.state_at(episode_id, seq)) == (initial, last)
        [longest] = [e for e in await store.list_episodes() if e.seq == 21]
        assert (await store.state_at(longest.id, 10))["items"]["milk"]["qty"] == 10
        assert await store.integrity_check() == "ok"
    finally:
        await store.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_db_migrate_upgrades_once_then_says_it_is_current(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    shutil.copy(PREVIOUS, db)
    first = simia("db", "migrate", "--db", str(db))
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"{db}: upgraded from schema version 0 to {SCHEMA_VERSION}"
    again = simia("db", "migrate", "--db", str(db))
    assert again.stdout.strip() == f"{db}: schema version {SCHEMA_VERSION}, up to date"
    assert sqlite_rows(db, previous_columns()) == previous_rows()


async def test_db_migrate_brings_a_version_1_postgres_database_to_hot_updates(pg_url: str) -> None:
    store = open_store(pg_url)
    state = {"items": {"milk": {"qty": 0}}}
    await store.create_episode(EpisodeRecord(id="e1", world="mock", world_hash="h", initial_state=state, state=state))
    await store.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the indexes as schema version 1 left them
        conn.execute("DROP INDEX episodes_active")
        conn.execute("CREATE INDEX episodes_updated ON episodes (status, updated_at)")
        conn.execute("ALTER TABLE episodes RESET (fillfactor)")
        conn.execute("UPDATE simia_meta SET value = '1' WHERE key = 'schema_version'")
    done = simia("db", "migrate", "--db", pg_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith(f": upgraded from schema version 1 to {SCHEMA_VERSION}\n")
    with psycopg.connect(pg_url) as conn:
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'episodes'")}
        options = conn.execute("SELECT reloptions FROM pg_class WHERE relname = 'episodes'").fetchone()
        kept = conn.execute("SELECT id, status FROM episodes").fetchall()
    assert "episodes_active" in indexes and "episodes_updated" not in indexes
    assert options == (["fillfactor=50"],) and kept == [("e1", "active")]


async def test_simia_db_url_is_the_default_database(pg_url: str) -> None:
    await open_store(pg_url).close()  # a simia database, current
    done = simia("db", "migrate", env={"SIMIA_DB_URL": pg_url})
    assert done.returncode == 0, done.stderr
    shown = pg_url.replace(pg_url.split("@")[0].rsplit(":", 1)[1], "***")
    assert done.stdout == f"{shown}: schema version {SCHEMA_VERSION}, up to date\n"


def test_db_copy_sqlite_to_postgres_and_back_keeps_every_row(tmp_path: Path, pg_url: str) -> None:
    db = tmp_path / "old.db"
    shutil.copy(PREVIOUS, db)
    there = simia("db", "copy", "--from", str(db), "--to", pg_url)
    assert there.returncode == 0, there.stderr
    assert "episodes 3, events 23, states 2, worlds 0, llm_cache 22 (counts checked)" in there.stdout
    assert pg_rows(pg_url, previous_columns()) == previous_rows()
    rl = str(tmp_path / "rl.jsonl")  # the old release's 3 episodes were never judged: masked, so asked for
    exported = simia("export", "--db", pg_url, "--format", "rl", "--out", rl, "--include-masked")
    assert exported.returncode == 0 and "wrote 3 record(s)" in exported.stdout, exported.stderr  # readers work too
    refused = simia("db", "copy", "--from", str(db), "--to", pg_url)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "already holds episodes or cache rows; pass --replace" in refused.stderr
    assert simia("db", "copy", "--from", str(db), "--to", pg_url, "--replace").returncode == 0
    back = tmp_path / "back.db"
    home = simia("db", "copy", "--from", pg_url, "--to", str(back))
    assert home.returncode == 0, home.stderr
    assert sqlite_rows(back, previous_columns()) == previous_rows()
    assert pg_rows(pg_url) == sqlite_rows(back)  # today's columns too (reward, source), both ways
    assert pg_url.split("@")[0].split(":")[-1] not in there.stdout + home.stdout  # no password printed


def _newer_sqlite(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE episodes (id TEXT)")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")


def _other_sqlite(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")


def _newer_pg(url: str) -> None:
    open_store(url)  # a simia database, then stamped newer
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE simia_meta SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))


def _other_pg(url: str) -> None:
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")


def _pg_state(url: str) -> Any:
    with psycopg.connect(url) as conn:
        tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1").fetchall()
        meta = conn.execute("SELECT * FROM simia_meta").fetchall() if ("simia_meta",) in tables else None
        return tables, meta


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("newer_sqlite", f"has simia schema version {SCHEMA_VERSION + 1}, newer than this simia's ({SCHEMA_VERSION})"),
        ("other_sqlite", "is another program's SQLite database; give a new file path"),
        ("newer_pg", f"schema version {SCHEMA_VERSION + 1}, newer than this simia's ({SCHEMA_VERSION}); upgrade simia"),
        ("other_pg", "is not a simia database (it has other tables: invoices); give a new or empty one"),
        ("wrong_password", 'password authentication failed for user "simia"'),
        ("no_database", 'database "nope" does not exist'),
        ("unreachable", "cannot connect to Postgres at postgresql://simia:***@127.0.0.1:1/x: "),
        ("bad_url", 'invalid integer value "port" for connection option "port"'),
        ("unknown_scheme", "cannot open a database from a mysql:// URL"),
    ],
)
@pytest.mark.parametrize("command", ["serve", "db migrate"])
def test_a_database_simia_must_not_touch_is_one_line_exit_2_at_start_and_unwritten(
    tmp_path: Path, pg_cluster: PostgresCluster, case: str, says: str, command: str
) -> None:
    db: str
    if case.endswith("sqlite"):
        path = tmp_path / "x.db"
        (_newer_sqlite if case == "newer_sqlite" else _other_sqlite)(path)
        db = str(path)
        before: Any = path.read_bytes()
        after = path.read_bytes
    elif case.endswith("_pg"):
        db = pg_cluster.create_database()
        (_newer_pg if case == "newer_pg" else _other_pg)(db)
        before = _pg_state(db)
        after = lambda: _pg_state(db)  # noqa: E731
    else:
        db = {
            "wrong_password": pg_cluster.url(pg_cluster.create_database().rsplit("/", 1)[1], password="wrong"),
            "no_database": pg_cluster.url("nope"),
            "unreachable": "postgresql://simia:secret@127.0.0.1:1/x",
            "bad_url": "postgresql://simia:secret@127.0.0.1:port/x",
            "unknown_scheme": "mysql://simia:secret@db/x",
        }[case]
        before = None
        after = lambda: None  # noqa: E731
    argv = (
        ["serve", "--backend", f"scripted:{SCRIPT}", "--db", db]
        if command == "serve"
        else ["db", "migrate", "--db", db]
    )
    if case == "other_sqlite" and command == "db migrate":  # a reader's check of the file says it its own way
        says = "is not a simia database; pass --db PATH (the file `simia serve --db` wrote)"
    done = simia(*argv)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: --db"), done.stderr
    assert says in lines[0] and "Traceback" not in done.stderr and done.stdout == ""
    assert "secret" not in done.stderr and pg_cluster.password not in done.stderr
    assert after() == before
