"""Schema versions: which version of simia's tables a database holds, and what opening it must do.

Both stores record the version (SQLite: `PRAGMA user_version`; Postgres: the `simia_meta`
table) and keep a list of migrations, each bringing one version to the next. Opening a
database upgrades an older one in place before anything else is written to it (Postgres in
one transaction; SQLite step by step, each step checking what it changes, so that it can run
again); a database of a newer version, or one with tables that are not simia's, is refused
before any write. Version 0 is a SQLite file written before versions were kept. A step that
moves data, not just tables, and that both engines share lives here (`move_initial_states`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..errors import StoreSchemaError
from ..world import state_hash

__all__ = ["SCHEMA_VERSION", "move_initial_states", "not_simia", "schema_steps"]

SCHEMA_VERSION = 5
"""The version of the tables this simia writes (the same number on every engine: `simia db copy` relies on it).

1: the first versioned schema. 2: on Postgres, no index of `episodes` holds a column a call changes (the idle
sweep's index on `updated_at` became a partial index of the active episodes), so a call's update of its
episode's row is a heap-only (HOT) update that writes no index entries; SQLite, whose updates touch only the
indexes of the columns they change, kept its tables. 3: an episode's row holds no state: its initial state is a
base, stored once in the `states` table under its digest however many episodes start from it, and the patches
from that base (`base_hash`, `base_patches`); every later state is the base with those patches and the events'
patches applied. The `initial_state`, `state` and `snapshot_seq` columns and the `snapshots` table are gone, so a
call writes its event and its episode's counters, nothing the size of the state; on SQLite the idle sweep's
`(status, updated_at)` index, which a call's update of `updated_at` rewrote, became an index on `status`. 4: a log
stands on its own: the `worlds` table keeps each world as it was served, once per content hash (the episodes'
`world_hash`): everything but its initial state, which is a base in `states`, named beside it. The step only adds
the table: episodes written before it have no stored world, and readers find theirs in a world folder (by hash,
or by name with a warning) or list them as missing (`simia.sim.storage.episode_worlds`). 5: an event says whose
call it was (`side`: `agent`, or `user` for a tool of the user's own in a dual-control world, as tau2-bench's
telecom); every earlier event was the agent's."""

_MOVE_BATCH = 16
"""Rows `move_initial_states` reads at a time (an old row's initial state may be megabytes)."""


def schema_steps(version: int, tables: set[str], where: str) -> range | None:
    """The migration steps that bring a database at `version` with `tables` to `SCHEMA_VERSION`.

    Returns:
        None for an empty database (create the current schema), else the steps to run (empty when current).

    Raises:
        StoreSchemaError: a newer version than this simia's, or tables and no simia schema (another
            program's database). `where` names the database in the message (never with a password).
    """
    if version > SCHEMA_VERSION:
        raise StoreSchemaError(
            f"{where} has simia schema version {version}, newer than this simia's ({SCHEMA_VERSION}); "
            "upgrade simia (pip install -U simia) to open it"
        )
    if version == 0:
        if not tables:
            return None
        if not tables & {"episodes", "llm_cache"}:
            raise not_simia(where, tables)
    return range(version, SCHEMA_VERSION)


def not_simia(where: str, tables: set[str]) -> StoreSchemaError:
    """The error for a database that has tables but no simia schema (another program's)."""
    shown = ", ".join(sorted(tables)[:3])
    return StoreSchemaError(f"{where} is not a simia database (it has other tables: {shown}); give a new or empty one")


def move_initial_states(conn: Any, ph: str) -> int:
    """Migration 2 -> 3's data step, on either engine (a DB-API connection, `ph` its placeholder): each episode
    row's `initial_state` becomes a base in `states` (under `state_hash` of its JSON, so equal states share one
    row, and a world's base put later finds its row there) and the row gets that `base_hash` and no base patches.

    Rows that have a `base_hash` already are skipped, so the step can run again after failing half-way.

    Returns:
        The number of rows moved.
    """
    digests: dict[str, str] = {}  # the SHA-256 of a text as stored -> its state's digest: each text parsed once
    moved = 0
    select = f"SELECT id, initial_state FROM episodes WHERE base_hash = '' LIMIT {_MOVE_BATCH}"
    insert = f"INSERT INTO states (hash, state) VALUES ({ph}, {ph}) ON CONFLICT (hash) DO NOTHING"
    update = f"UPDATE episodes SET base_hash = {ph}, base_patches = '[]' WHERE id = {ph}"
    while rows := conn.execute(select).fetchall():
        for episode_id, text in rows:
            seen = hashlib.sha256(text.encode()).hexdigest()
            digest = digests.get(seen)
            if digest is None:
                digest = digests[seen] = state_hash(json.loads(text))
                conn.execute(insert, (digest, text))
            conn.execute(update, (digest, episode_id))
        moved += len(rows)
    return moved
