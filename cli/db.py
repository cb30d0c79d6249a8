"""`simia db migrate` and `simia db copy`: a database's schema version, and moving data between engines."""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
from typing import Any

import psycopg
from simia.sim.errors import SimiaError
from simia.sim.storage import SCHEMA_VERSION, Store, copy_database, redact_url

from ._common import CliError, default_db, open_db

__all__ = ["register"]


def _close(store: Store) -> None:
    asyncio.run(store.close())


def _migrate(args: argparse.Namespace) -> int:
    store = open_db(args.db, must_exist=True)  # opening upgrades an older schema (or refuses a newer one)
    _close(store)
    before = store.migrated_from
    if before is None:
        print(f"{redact_url(args.db)}: schema version {SCHEMA_VERSION}, up to date")
    else:
        print(f"{redact_url(args.db)}: upgraded from schema version {before} to {SCHEMA_VERSION}")
    return 0


def _copy(args: argparse.Namespace) -> int:
    if args.source == args.destination:
        raise CliError("--from and --to are the same database; give another destination")
    _close(open_db(args.source, must_exist=True, flag="--from"))  # checks (and upgrades) the source's schema
    _close(open_db(args.destination, flag="--to"))  # creates the destination's tables, or checks them
    try:
        report = copy_database(args.source, args.destination, replace=args.replace)
    except SimiaError as exc:
        raise CliError(str(exc)) from None
    except (psycopg.Error, sqlite3.Error) as exc:
        raise CliError(f"copy to {redact_url(args.destination)} failed: {' '.join(str(exc).split())}") from None
    print(f"copied {redact_url(args.source)} -> {redact_url(args.destination)}: {report.render()} (counts checked)")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("db", help="database maintenance: schema upgrades, copies between SQLite and Postgres")
    commands = p.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    m = commands.add_parser("migrate", help="upgrade a database to this simia's schema (serve does it on start too)")
    m.add_argument("--db", default=default_db(), metavar="PATH|URL", help="SQLite file or postgresql:// URL")
    m.set_defaults(func=_migrate)
    c = commands.add_parser("copy", help="copy every episode, event, state and cache row to another database")
    c.add_argument("--from", dest="source", required=True, metavar="PATH|URL", help="the database to copy")
    c.add_argument(
        "--to", dest="destination", required=True, metavar="PATH|URL", help="an empty database (or new file)"
    )
    c.add_argument("--replace", action="store_true", help="delete the destination's rows first")
    c.set_defaults(func=_copy)
