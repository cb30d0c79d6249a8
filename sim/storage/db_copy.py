"""Copy every row of a simia database to another, between SQLite and Postgres in either direction.

Both engines hold the same tables with the same columns and the same JSON text
(`simia.sim.storage.postgres`), so rows move as they are, but for the event columns SQLite keeps compressed
(`simia.sim.storage.sql.packed`): they are inflated on their way to Postgres, whose TOAST compresses them
itself. The destination is written in one transaction that commits only after its row counts match the source's.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg

from ..errors import StoreConfigError
from .postgres import is_postgres_url, libpq_url, redact_url
from .sql import EPISODE_COLUMNS, EVENT_COLUMNS, PACKED_EVENT, unpacked

__all__ = ["TABLES", "CopyReport", "copy_database", "count_rows"]

TABLES: dict[str, list[str]] = {  # in the order rows may be inserted (events after episodes)
    "episodes": [*EPISODE_COLUMNS, "reward"],
    "events": ["episode_id", *EVENT_COLUMNS],
    "states": ["hash", "state"],
    "worlds": ["hash", "name", "base_hash", "world", "created_at"],
    "llm_cache": ["key", "replay_key", "data", "model", "created"],
}
_BATCH = 1000
_BATCH_OF = {"states": 4, "worlds": 16}
"""Rows read at a time, where a table's rows may be megabytes (a base state is a whole world's)."""


@dataclass
class CopyReport:
    """The rows copied, per table (each equal to the source's count, checked before the commit)."""

    counts: dict[str, int]

    def render(self) -> str:
        return ", ".join(f"{table} {n}" for table, n in self.counts.items())


@contextlib.contextmanager
def _connect(target: str) -> Iterator[Any]:
    """A DB-API connection to an existing simia database (its schema already set up by `open_store`)."""
    if is_postgres_url(target):
        with psycopg.connect(libpq_url(target), connect_timeout=5) as pg:
            yield pg
    else:
        with contextlib.closing(sqlite3.connect(target.removeprefix("sqlite:///"), isolation_level=None)) as lite:
            yield lite


def count_rows(target: str) -> dict[str, int]:
    """The number of rows in each simia table of `target`."""
    with _connect(target) as conn:
        return _counts(conn)


def _counts(conn: Any) -> dict[str, int]:
    return {table: int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]) for table in TABLES}


def _rows(conn: Any, table: str, columns: list[str]) -> Iterator[list[tuple[Any, ...]]]:
    sql = f"SELECT {', '.join(columns)} FROM {table}"
    cursor = conn.cursor(name=f"copy_{table}") if isinstance(conn, psycopg.Connection) else conn.cursor()
    cursor.execute(sql)
    while batch := cursor.fetchmany(_BATCH_OF.get(table, _BATCH)):
        yield batch
    cursor.close()


def copy_database(source: str, destination: str, *, replace: bool = False) -> CopyReport:
    """Copy every row of `source` into `destination` (both simia databases at the current schema version).

    Args:
        replace: delete the destination's rows first; without it a destination that has any is refused.

    Raises:
        StoreConfigError: the destination is not empty (and `replace` is False), or the counts disagree
            after the copy (nothing is committed then).
    """
    expected = count_rows(source)
    where = redact_url(destination)
    with _connect(source) as src, _connect(destination) as dst:
        pg = isinstance(dst, psycopg.Connection)
        mark = "%s" if pg else "?"
        if not pg:  # psycopg opens its transaction itself
            dst.execute("BEGIN IMMEDIATE")
        try:
            if any(_counts(dst).values()):
                if not replace:
                    raise StoreConfigError(
                        f"{where} already holds episodes or cache rows; pass --replace to overwrite them"
                    )
                for table in reversed(TABLES):
                    dst.execute(f"DELETE FROM {table}")
            for table, columns in TABLES.items():
                insert = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join([mark] * len(columns))})"
                inflate = [columns.index(c) for c in PACKED_EVENT] if pg and table == "events" else []
                for batch in _rows(src, table, columns):
                    if inflate:
                        batch = [_inflated(row, inflate) for row in batch]
                    dst.cursor().executemany(insert, batch)
            copied = _counts(dst)
            if copied != expected:
                raise StoreConfigError(f"copy to {where} is incomplete ({copied} != {expected}); nothing was written")
        except BaseException:
            dst.rollback()
            raise
        dst.commit()
    return CopyReport(copied)


def _inflated(row: tuple[Any, ...], at: list[int]) -> tuple[Any, ...]:
    """`row` with its values at the indexes `at` as text (`unpacked`)."""
    values = list(row)
    for i in at:
        values[i] = unpacked(values[i])
    return tuple(values)
