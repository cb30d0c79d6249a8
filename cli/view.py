"""`simia view`: the episode viewer over a database, read-only, without serving worlds: the worlds it shows are the
ones the database recorded (`--worlds-dir` only for episodes logged before it did)."""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import uvicorn
from simia.server.settings import ServerSettings
from simia.server.viewer import viewer_app
from simia.sim.errors import SimiaError
from simia.sim.storage import EpisodeWorlds, open_store
from simia.sim.world import World

from ._common import CliError, add_worlds_dir, load_world_set
from .serve import _check_listen, _named_token, _port, simia_version

__all__ = ["register"]


async def _recorded_worlds(target: str, folders: Mapping[str, World] | None) -> dict[str, World]:
    """Each world of the database at `target` as its newest episodes ran it; what could not be found is printed."""
    store = open_store(target, read_only=True)
    try:
        found = EpisodeWorlds(store, folders)
        worlds = await found.latest()
    finally:
        await store.close()
    for note in found.notes():
        print(note, file=sys.stderr)
    return worlds


def _view(args: argparse.Namespace) -> int:
    folders = load_world_set(args) if args.worlds_dir else None
    try:
        settings = ServerSettings(
            host=args.host,
            port=args.port,
            tokens=tuple(args.token or ()),
            named_tokens=tuple(args.token_for or ()),
            allowed_hosts=tuple(args.allowed_host or ()),
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    target = args.db
    if "://" not in target or target.startswith("sqlite:///"):  # checked without opening it read-write, which
        target = target.removeprefix("sqlite:///")  # would checkpoint its WAL into the file
        if not Path(target).is_file():
            raise CliError(f"no database at {args.db!r}; pass --db PATH (the file `simia serve --db` wrote)")
    try:
        worlds = asyncio.run(_recorded_worlds(target, folders))
        store = open_store(target, read_only=True)
    except (SimiaError, sqlite3.Error) as exc:
        raise CliError(f"--db {args.db!r}: {exc}; pass --db PATH (the file `simia serve --db` wrote)") from None
    _check_listen(args.host, args.port)  # after the database: a bad --db is named whatever holds the port
    app = viewer_app(store, worlds, settings)
    url = f"http://{args.host}:{args.port}/ui"
    where = args.db if "://" in args.db else Path(target).resolve()
    print(f"simia {simia_version()} viewer (read-only) over {where}")
    print(f"  open {url}" + ("  (sign in with a --token)" if settings.requires_token else ""), flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=2)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("view", help="browse the episodes of a database in a web viewer (read-only)")
    p.add_argument("--db", required=True, metavar="PATH", help="the SQLite database `simia serve --db` wrote")
    add_worlds_dir(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8766, help="port (default: 8766)")
    p.add_argument("--token", action="append", metavar="SECRET", help="require this bearer token (repeatable)")
    p.add_argument(
        "--token-for", action="append", type=_named_token, metavar="NAME=SECRET", help="a named token (repeatable)"
    )
    p.add_argument("--allowed-host", action="append", metavar="HOST:PORT", help="accept this Host header too")
    p.set_defaults(func=_view)
