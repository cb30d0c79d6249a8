"""What every command shares: flags declared once, worlds and backends loaded once, one error type.

Environment variables are read here and nowhere else in simia. A `CliError` is a
problem with the user's input: `main` prints it as one line and exits 2, writing nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from simia.server import ServerSettings, build_server, serving
from simia.server.inprocess import free_port
from simia.sim.backends import Backend, Price, parse_price, resolve_backend
from simia.sim.errors import BackendConfigError
from simia.sim.judge import Judge
from simia.sim.loader import default_worlds_dir, load_worlds
from simia.sim.store import Store, open_store
from simia.sim.world import World

__all__ = [
    "CliError",
    "add_model_flags",
    "add_worlds_dir",
    "backend",
    "existing_file",
    "in_process_server",
    "load_world_set",
    "one_world",
    "open_db",
    "positive",
    "writable_dir",
]


class CliError(Exception):
    """Bad input on the command line: what is wrong and how to fix it, in one line."""


def add_worlds_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--worlds-dir",
        action="append",
        type=Path,
        metavar="DIR",
        help="folder of worlds (repeatable; default: ./tool_specs or the bundled worlds)",
    )


def add_model_flags(p: argparse.ArgumentParser) -> None:
    """The flags every command with a model backend shares: `--base-url` and `--price`."""
    p.add_argument("--base-url", metavar="URL", help="server URL for openai-compatible (vLLM, SGLang, Ollama, ...)")
    p.add_argument(
        "--price",
        action="append",
        type=_price,
        metavar="MODEL=IN,OUT",
        help="USD per million input and output tokens of a model the price database lacks (repeatable)",
    )


def _price(text: str) -> tuple[str, Price]:
    try:
        return parse_price(text)
    except BackendConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def load_world_set(args: argparse.Namespace, *, quiet: bool = False) -> dict[str, World]:
    """The valid worlds of `--worlds-dir` (default: ./tool_specs or the bundled ones); invalid ones are skipped
    with a warning naming `simia validate`."""
    report = load_worlds(args.worlds_dir or [default_worlds_dir()])
    if not quiet:
        for error in report.errors:
            where = f" ({error.source})" if error.source else ""
            print(
                f"warning: skipped invalid world {error.world!r}{where}; run `simia validate` for details",
                file=sys.stderr,
            )
    return dict(report.worlds)


def one_world(worlds: Mapping[str, World], name: str) -> World:
    world = worlds.get(name)
    if world is None:
        loaded = ", ".join(sorted(worlds)) or "(none)"
        raise CliError(f"unknown world {name!r}; loaded: {loaded} (pass --worlds-dir DIR with the world's folder)")
    return world


def backend(spec: str | None, args: argparse.Namespace, *, max_concurrency: int = 16) -> Backend:
    """The backend SPEC names (keys from the environment, `--base-url` from args)."""
    try:
        return resolve_backend(
            spec,
            base_url=getattr(args, "base_url", None),
            env=os.environ,
            max_concurrency=max_concurrency,
            prices=dict(getattr(args, "price", None) or ()),
        )
    except BackendConfigError as exc:
        raise CliError(str(exc)) from None


def existing_file(path: str | Path, what: str, fix: str) -> Path:
    found = Path(path)
    if not found.is_file():
        raise CliError(f"no {what} at {str(path)!r}; {fix}")
    return found


def writable_dir(path: str | Path, flag: str) -> Path:
    """A folder that exists or can be created (never an existing file)."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise CliError(f"{flag} {str(path)!r} is a file; give a folder (it is created when missing)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot create {flag} folder {str(path)!r}: {exc.strerror}") from None
    return folder


def open_db(target: str, *, synchronous: str = "FULL", must_exist: bool = False) -> Store:
    """The store at `--db`: a SQLite path whose folder must exist (and the file too, for readers)."""
    if "://" not in target or target.startswith("sqlite:///"):
        path = Path(target.removeprefix("sqlite:///"))
        if must_exist and not path.is_file():
            raise CliError(f"no database at {target!r}; pass --db PATH (the file `simia serve --db` wrote)")
        if not path.parent.is_dir():
            raise CliError(f"--db {target!r}: folder {str(path.parent)!r} does not exist; create it first")
        if path.is_dir():
            raise CliError(f"--db {target!r} is a folder; give a database file path")
    try:
        return open_store(target, synchronous=synchronous)
    except (ValueError, OSError) as exc:
        raise CliError(f"--db {target!r}: {exc}") from None


@contextlib.asynccontextmanager
async def in_process_server(
    worlds: Mapping[str, World],
    sim_backend: Backend,
    db: Path,
    judge_backend: Backend | None,
    *,
    sim_max_tokens: int = 1024,
) -> AsyncIterator[str]:
    """Serve `worlds` on a free 127.0.0.1 port in this process (the server `simia serve` builds); yields its URL."""
    store = open_db(str(db))
    port = free_port()
    app = build_server(
        worlds,
        sim_backend,
        store,
        ServerSettings(port=port),
        judge=Judge(judge_backend, max_tokens=min(1024, sim_max_tokens)),
        sim_max_tokens=sim_max_tokens,
    )
    try:
        async with serving(app, port):
            yield f"http://127.0.0.1:{port}"
    finally:
        await store.close()
