"""The response cache: validated simulator answers keyed by everything that determines them.

The key covers (world hash, tool, canonical arguments, state hash, backend and
model, prompt version, seed). Only seeded calls are cached, so a seeded episode
replays identically while unseeded rollouts (GRPO groups) stay diverse. The
`replay:DB` backend answers from the same table without any model. This module
holds all of the table's SQL; the store and `SqliteCache` both go through it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ..world import canonical_json, compact_json

__all__ = [
    "CACHE_TABLE_SQL",
    "ResponseCache",
    "SqliteCache",
    "cache_key",
    "read_cached",
    "read_replay",
    "write_cached",
]

CACHE_TABLE_SQL = """
CREATE TABLE IF NOT EXISTS llm_cache (
    key TEXT PRIMARY KEY,
    replay_key TEXT NOT NULL,
    data TEXT NOT NULL,
    model TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS llm_cache_replay ON llm_cache (replay_key, created)"""
_SELECT = "SELECT data FROM llm_cache WHERE key = ?"
_SELECT_REPLAY = "SELECT data FROM llm_cache WHERE replay_key = ? ORDER BY created DESC LIMIT 1"
_INSERT = "INSERT OR REPLACE INTO llm_cache (key, replay_key, data, model, created) VALUES (?, ?, ?, ?, ?)"


def read_cached(conn: sqlite3.Connection, key: str) -> dict[str, Any] | None:
    """The answer cached under `key`, if any (inside the caller's transaction)."""
    row = conn.execute(_SELECT, (key,)).fetchone()
    return json.loads(row[0]) if row else None


def read_replay(conn: sqlite3.Connection, replay_key: str) -> dict[str, Any] | None:
    """The latest answer recorded for this call by any backend."""
    row = conn.execute(_SELECT_REPLAY, (replay_key,)).fetchone()
    return json.loads(row[0]) if row else None


def write_cached(conn: sqlite3.Connection, key: str, replay_key: str, data: dict[str, Any], model: str) -> None:
    """Record `data` under `key` (and `replay_key`), replacing any earlier answer; the caller commits."""
    conn.execute(_INSERT, (key, replay_key, compact_json(data), model, time.time()))


def cache_key(
    *,
    world_hash: str,
    tool: str,
    arguments: dict[str, Any],
    state_hash: str,
    backend: str,
    prompt_version: str,
    seed: int | None,
) -> str:
    parts = [world_hash, tool, canonical_json(arguments), state_hash, backend, prompt_version, str(seed)]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


class ResponseCache(Protocol):
    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def put(self, key: str, replay_key: str, data: dict[str, Any], model: str) -> None: ...


class SqliteCache:
    """A cache in a SQLite file (the store's database by default), written through one connection."""

    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        if readonly:
            self._conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        else:
            self._conn = sqlite3.connect(self.path, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.executescript(CACHE_TABLE_SQL)
            self._conn.commit()
        self._lock = threading.Lock()

    def _read(
        self, read: Callable[[sqlite3.Connection, str], dict[str, Any] | None], key: str
    ) -> dict[str, Any] | None:
        with self._lock:
            try:
                return read(self._conn, key)
            except sqlite3.OperationalError:
                return None  # no cache table: nothing was recorded

    def _put(self, key: str, replay_key: str, data: dict[str, Any], model: str) -> None:
        with self._lock:
            write_cached(self._conn, key, replay_key, data, model)
            self._conn.commit()

    async def get(self, key: str) -> dict[str, Any] | None:
        return await asyncio.to_thread(self._read, read_cached, key)

    async def get_replay(self, replay_key: str) -> dict[str, Any] | None:
        """The latest answer recorded for this call by any backend."""
        return await asyncio.to_thread(self._read, read_replay, replay_key)

    async def put(self, key: str, replay_key: str, data: dict[str, Any], model: str) -> None:
        await asyncio.to_thread(self._put, key, replay_key, data, model)

    def close(self) -> None:
        self._conn.close()
