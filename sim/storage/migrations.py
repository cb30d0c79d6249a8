"""Schema versions: which version of simia's tables a database holds, and what opening it must do.

Both stores record the version (SQLite: `PRAGMA user_version`; Postgres: the `simia_meta`
table) and keep a list of migrations, each bringing one version to the next. Opening a
database upgrades an older one in place before anything else is written to it (Postgres in
one transaction; SQLite step by step, each step checking what it changes, so that it can run
again); a database of a newer version, or one with tables that are not simia's, is refused
before any write. Version 0 is a SQLite file written before versions were kept.
"""

from __future__ import annotations

from ..errors import StoreSchemaError

__all__ = ["SCHEMA_VERSION", "not_simia", "schema_steps"]

SCHEMA_VERSION = 2
"""The version of the tables this simia writes (the same number on every engine: `simia db copy` relies on it).

1: the first versioned schema. 2: on Postgres, no index of `episodes` holds a column a call changes (the idle
sweep's index on `updated_at` became a partial index of the active episodes), so a call's update of its
episode's row is a heap-only (HOT) update that writes no index entries; SQLite, whose updates touch only the
indexes of the columns they change, kept its tables."""


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
