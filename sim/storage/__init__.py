"""Storage: episodes, their events and state history, verdicts, the worlds they ran against and the response cache,
in one database.

`Store` is the interface; `open_store` opens the implementation a `--db` target names (`SqliteStore`, the
embedded default, or `PgStore` for several replicas on one Postgres database), its schema created or
upgraded. The SQL both engines share lives in `sql`; `queries` pages episodes for the viewer; `episode_worlds`
finds the world each logged episode ran against; `db_copy` copies a database between engines.
"""

from __future__ import annotations

from ._worlds import WorldVersion
from .cache import ResponseCache, SqliteCache, cache_key
from .db_copy import CopyReport, copy_database, count_rows
from .episode_worlds import EpisodeWorlds, short_hash
from .migrations import SCHEMA_VERSION
from .opening import RecordedAnswers, open_recorded, open_store
from .postgres import PgStore, is_postgres_url, redact_url
from .protocol import Store
from .queries import (
    PAGE_LIMIT,
    SORT_KEYS,
    TEXT_SCAN_LIMIT,
    EpisodePage,
    EpisodeQuery,
    EpisodeRow,
    TaskStats,
    unmatched_filter,
)
from .sqlite import SqliteStore

__all__ = [
    "PAGE_LIMIT",
    "SCHEMA_VERSION",
    "SORT_KEYS",
    "TEXT_SCAN_LIMIT",
    "CopyReport",
    "EpisodePage",
    "EpisodeQuery",
    "EpisodeRow",
    "EpisodeWorlds",
    "PgStore",
    "RecordedAnswers",
    "ResponseCache",
    "SqliteCache",
    "SqliteStore",
    "Store",
    "TaskStats",
    "WorldVersion",
    "cache_key",
    "copy_database",
    "count_rows",
    "is_postgres_url",
    "open_recorded",
    "open_store",
    "redact_url",
    "short_hash",
    "unmatched_filter",
]
