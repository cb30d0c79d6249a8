"""Opening a database by its `--db` target: the store (`open_store`), or its recorded answers alone for replay
(`open_recorded`). The one place that decides which engine a target names."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import StoreConfigError
from .cache import SqliteCache
from .postgres import PgStore, is_postgres_url, redact_url
from .protocol import Store
from .sqlite import SqliteStore

__all__ = ["RecordedAnswers", "open_recorded", "open_store"]


def _sqlite_path(target: str | Path) -> str | Path | None:
    """The SQLite file a target names (a path, or `sqlite:///PATH`), or None for a URL of another scheme."""
    if isinstance(target, Path):
        return target
    scheme, sep, rest = target.partition("://")
    if not sep:
        return target
    if scheme == "sqlite" and rest.startswith("/"):
        return rest[1:]
    return None


def _unknown_scheme(target: str) -> StoreConfigError:
    scheme = target.partition("://")[0]
    return StoreConfigError(
        f"cannot open a database from a {scheme}:// URL; pass a SQLite file path or sqlite:///PATH "
        "(three slashes, then the path), or postgresql://USER@HOST:PORT/DB"
    )


def open_store(target: str | Path, *, synchronous: str = "FULL", create: bool = True, read_only: bool = False) -> Store:
    """The store behind a `--db` target, its schema created or upgraded (`simia.sim.storage.migrations`).

    Args:
        target: a SQLite file path (or `sqlite:///PATH`), or a `postgresql://` (`postgres://`) URL.
        synchronous: how durable a SQLite commit is: FULL (default) survives power loss, NORMAL
            survives a crash of the process only (Postgres commits follow the server's settings).
        create: create the tables in an empty Postgres database (False: refuse it, for readers; a
            SQLite reader checks its file first, `simia.cli._common.readable_db`).
        read_only: open an existing database of the current schema without writing to it (the viewer);
            writes then fail.

    Raises:
        StoreConfigError: a URL no store implementation opens, or a database that cannot be reached.
        StoreSchemaError: a database of a newer schema, or not simia's (nothing is written).
    """
    path = _sqlite_path(target)
    if path is not None:
        return SqliteStore(path, synchronous=synchronous, read_only=read_only)
    if is_postgres_url(str(target)):
        return PgStore(str(target), create=create, read_only=read_only)
    raise _unknown_scheme(str(target))


@dataclass(frozen=True)
class RecordedAnswers:
    """A database's recorded simulator answers, looked up by cache key (read-only): what `replay:DB` serves."""

    engine: str
    """`sqlite` or `postgres`."""
    label: str
    """The database as it may be shown: the file's path, or the URL without its password."""
    lookup: Callable[[str], Awaitable[dict[str, Any] | None]]
    close: Callable[[], Awaitable[None]]


def open_recorded(target: str | Path) -> RecordedAnswers:
    """The recorded answers of an existing database: a SQLite file (path or `sqlite:///PATH`) or a Postgres URL.

    Raises:
        StoreConfigError: no SQLite file at the path, a Postgres database that cannot be reached, or a URL of
            another scheme.
    """
    path = _sqlite_path(target)
    if path is not None:
        if not Path(path).is_file():
            raise StoreConfigError(f"no database at {str(path)!r}; pass the path of a simia --db file")
        cache = SqliteCache(Path(path), readonly=True)
        return RecordedAnswers("sqlite", str(path), cache.get_replay, lambda: asyncio.to_thread(cache.close))
    if is_postgres_url(str(target)):
        store = PgStore(str(target), create=False)
        return RecordedAnswers("postgres", redact_url(str(target)), store.get_replay, store.close)
    raise _unknown_scheme(str(target))
