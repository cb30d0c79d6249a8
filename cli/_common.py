"""What every command shares: flags declared once, worlds and backends loaded once, one error type.

The CLI's environment variables (API keys, SIMIA_DB_URL) are read here; the only other readers are the
training scripts' entry points (`simia.training.models`, `grpo.main`). A `CliError` is a
problem with the user's input: `main` prints it as one line and exits 2, writing nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import math
import os
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

from simia.server import ServerSettings, build_server, serving
from simia.server.inprocess import free_port
from simia.sim.backends import Backend, BatchBackend, Price, ScriptedBackend, parse_price, resolve_backend
from simia.sim.backends.local import LocalBackend
from simia.sim.backends.replay import ReplayBackend
from simia.sim.errors import BackendConfigError, SimiaError
from simia.sim.judging import Judge
from simia.sim.storage import Store, is_postgres_url, open_store, redact_url
from simia.sim.world import World, default_worlds_dir, load_worlds

__all__ = [
    "CliError",
    "add_model_flags",
    "add_worlds_dir",
    "backend",
    "bearer_token",
    "default_db",
    "existing_file",
    "finite",
    "http_header",
    "http_url",
    "in_process_server",
    "load_world_set",
    "one_world",
    "open_db",
    "positive",
    "readable_db",
    "seed",
    "whole",
    "writable_dir",
]


class CliError(SimiaError):
    """Bad input on the command line: what is wrong and how to fix it, in one line."""


def add_worlds_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--worlds-dir",
        action="append",
        type=_folder,
        metavar="DIR",
        help="folder of worlds (repeatable; default: ./tool_specs or the bundled worlds)",
    )


def _folder(text: str) -> Path:
    """argparse type of `--worlds-dir`: an existing folder."""
    folder = Path(text)
    if not folder.is_dir():
        what = "is a file" if folder.exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"{text!r} {what}; give a folder of world folders (or one world's folder)")
    return folder


def add_model_flags(p: argparse.ArgumentParser) -> None:
    """The flags every command with a model backend shares: `--base-url` and `--price`."""
    p.add_argument(
        "--base-url", type=http_url, metavar="URL", help="server URL for openai-compatible (vLLM, SGLang, Ollama, ...)"
    )
    p.add_argument(
        "--price",
        action="append",
        type=_price,
        metavar="MODEL=IN,OUT[,CACHED[,WRITE]]",
        help="USD per million input and output tokens (then cache-read and cache-write tokens, else billed as input) "
        "of a model the price database lacks (repeatable)",
    )


def add_batch_flags(p: argparse.ArgumentParser, *, journal: str) -> None:
    """`--batch` and its options, for commands whose model calls can wait (`synth`, `judge`)."""
    p.add_argument(
        "--batch",
        action="store_true",
        help="send the model requests through the provider's batch API (OpenAI Batch API, Anthropic Message "
        "Batches): half price, answered within 24 h; run the same command again to resume",
    )
    p.add_argument(
        "--batch-journal",
        type=Path,
        metavar="FILE",
        help=f"--batch: where submitted batches are recorded, to resume without paying twice (default: {journal})",
    )
    p.add_argument(
        "--batch-poll", type=finite, default=30.0, metavar="SECONDS", help="--batch: seconds between status checks (30)"
    )


def batched(model: Backend, args: argparse.Namespace, journal: Path) -> Backend:
    """`model` behind its provider's batch API when `--batch` is given (else `model` itself)."""
    if not getattr(args, "batch", False):
        return model
    if not callable(getattr(model, "batches", None)) or getattr(model, "compatible", False):
        raise CliError(
            f"--batch needs a provider with a batch API (openai:MODEL or anthropic:MODEL); {model.spec} has none: "
            "drop --batch to run it interactively"
        )
    try:
        return BatchBackend(model, args.batch_journal or journal, poll=max(args.batch_poll, 0.01))  # type: ignore[arg-type]
    except BackendConfigError as exc:
        raise CliError(str(exc)) from None


def batch_summary(model: BatchBackend) -> str:
    """One line on what the batch API did: requests batched, resumed, answered, retried interactively, failed."""
    r = model.report
    return (
        f"batch: {r['submitted']} requests in {r['batches']} batch(es) at half price, {r['resumed']} resumed from "
        f"{model.journal}, {r['succeeded']} answered, {r['interactive']} answered interactively (their batch did "
        f"not), {r['failed']} failed"
    )


def _price(text: str) -> tuple[str, Price]:
    try:
        model, price = parse_price(text)
    except BackendConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not all(map(math.isfinite, price)):
        raise argparse.ArgumentTypeError(f"prices must be finite numbers of USD, e.g. {model}=0.2,0.6; got {text!r}")
    return model, price


def positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def number(
    low: float, high: float = math.inf, *, above: bool = False, what: str = "a number"
) -> Callable[[str], float]:
    """argparse type: a finite number (`finite`) from `low` (excluded when `above`) to `high`; `what` names it."""

    def parse(text: str) -> float:
        value = finite(text)
        if value < low or (above and value == low) or value > high:
            lower = f"more than {low:g}" if above else f"at least {low:g}"
            bound = lower if high == math.inf else f"{lower} and at most {high:g}"
            raise argparse.ArgumentTypeError(f"must be {what} {bound}, got {text}")
        return value

    return parse


def whole(low: int, high: int) -> Callable[[str], int]:
    """argparse type: an integer from `low` to `high`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value

    return parse


SEED_LIMIT = 2**62
"""The largest seed the HTTP API takes (`CreateEpisode.seed`), either sign."""
seed = whole(-SEED_LIMIT, SEED_LIMIT)
"""argparse type of `--seed`: a whole number the API takes."""


def finite(text: str) -> float:
    """argparse type: a real number (not nan or inf, which would make every comparison false)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number such as 1 or 0.5, got {text!r}")
    return value


def http_url(text: str) -> str:
    """argparse type: an http(s) URL with a host."""
    try:
        parts = urlsplit(text)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(f"expected an http(s) URL such as http://127.0.0.1:8765, got {text!r}")
    return text


def http_header(text: str) -> tuple[str, str]:
    """argparse type of `--header "Name: value"` (`simia import mcp`, `simia fidelity`): the name and the value,
    each stripped of the spaces around it; a name that is no HTTP token, or a value with control characters,
    is refused."""
    name, sep, value = (part.strip() for part in text.partition(":"))
    if not sep or not name or not all(c.isascii() and (c.isalnum() or c in "!#$%&'*+-.^_`|~") for c in name):
        raise argparse.ArgumentTypeError(f"expected NAME:VALUE, got {text!r} (e.g. 'Authorization: Bearer TOKEN')")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise argparse.ArgumentTypeError(f"the value of header {name!r} holds a control character (a line break?)")
    return name, value


def bearer_token(text: str) -> str:
    """argparse type of a client's `--token`: what an Authorization header can carry."""
    if not text or text != text.strip() or not all(" " <= c <= "~" for c in text):
        raise argparse.ArgumentTypeError(
            "a bearer token is printable ASCII without surrounding spaces (an HTTP header carries nothing else)"
        )
    return text


def load_world_set(args: argparse.Namespace, *, quiet: bool = False) -> dict[str, World]:
    """The valid worlds of `--worlds-dir` (default: ./tool_specs or the bundled ones); invalid ones are skipped
    with a warning naming `simia validate`."""
    report = load_worlds(args.worlds_dir or [default_worlds_dir()])
    if not report.worlds and not report.errors:
        where = ", ".join(repr(str(d)) for d in args.worlds_dir or [default_worlds_dir()])
        raise CliError(f"no worlds in {where}: a world is a folder with world.yaml; pass --worlds-dir DIR")
    if not quiet:
        for path in report.empty:
            print(f"warning: no world in {path!r} (a world is a folder with world.yaml)", file=sys.stderr)
        for error in report.errors:
            where = f" ({error.source})" if error.source else ""
            first = f": {error.issues[0].message}" if error.issues else ""
            more = f" (and {len(error.issues) - 1} more)" if len(error.issues) > 1 else ""
            print(
                f"warning: skipped invalid world {error.world!r}{where}{first}{more}; run `simia validate` for details",
                file=sys.stderr,
            )
    return dict(report.worlds)


def one_world(worlds: Mapping[str, World], name: str) -> World:
    world = worlds.get(name)
    if world is None:
        close = difflib.get_close_matches(name, list(worlds), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        loaded = ", ".join(sorted(worlds)) or "(none)"
        raise CliError(
            f"unknown world {name!r}{hint}; loaded: {loaded} (pass --worlds-dir DIR with the world's folder)"
        )
    return world


def backend(spec: str | None, args: argparse.Namespace, *, max_concurrency: int = 16) -> Backend:
    """The backend SPEC names (keys from the environment, `--base-url` from args), checked now: a file it
    reads that cannot serve (an empty script, a database with no recorded answers, a missing model file)
    is refused here rather than at the first call."""
    try:
        model = resolve_backend(
            spec,
            base_url=getattr(args, "base_url", None),
            env=os.environ,
            max_concurrency=max_concurrency,
            prices=dict(getattr(args, "price", None) or ()),
        )
    except BackendConfigError as exc:
        raise CliError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise CliError(f"{spec}: the file is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except RecursionError:
        raise CliError(f"{spec}: the file's JSON is nested too deeply to read") from None
    except (OSError, sqlite3.Error) as exc:
        raise CliError(f"{spec}: cannot read the file: {exc}") from None
    if isinstance(model, ScriptedBackend) and not (model.rules or model.queue):
        raise CliError(f"{spec}: the script has no entries; give it at least one answer")
    if (
        isinstance(model, ReplayBackend)
        and not is_postgres_url(model.spec.removeprefix("replay:"))  # its schema was checked when it was opened
        and "llm_cache" not in _tables(Path(model.spec.removeprefix("replay:")))
    ):
        raise CliError(f"{spec}: not a simia database; pass replay:PATH to a file `simia serve --db` wrote")
    if isinstance(model, LocalBackend) and model.spec != "local" and _head(model.path, 4) != b"GGUF":
        raise CliError(f"{spec}: {str(model.path)!r} is not a GGUF model file; pass local:PATH to a .gguf file")
    return model


_SQLITE_HEADER = b"SQLite format 3\x00"


def _head(path: Path, n: int) -> bytes:
    """The first `n` bytes of a file (empty when it cannot be read)."""
    try:
        with path.open("rb") as file:
            return file.read(n)
    except OSError:
        return b""


def _tables(path: Path) -> set[str]:
    """The tables of the SQLite database at `path`, read without writing (empty when it is not one)."""
    if not path.is_file() or _head(path, 16) not in (_SQLITE_HEADER, b""):
        return set()
    try:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error:
        return set()


def existing_file(path: str | Path, what: str, fix: str) -> Path:
    found = Path(path)
    if not found.is_file():
        raise CliError(f"no {what} at {str(path)!r}; {fix}")
    return found


def writable_dir(path: str | Path, flag: str) -> Path:
    """A folder that exists or can be created (never an existing file). Nothing is created here: the command
    creates it once every other flag has been checked."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise CliError(f"{flag} {str(path)!r} is a file; give a folder (it is created when missing)")
    parent = folder
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise CliError(f"cannot create {flag} folder {str(path)!r}: {str(parent)!r} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CliError(f"cannot create {flag} folder {str(path)!r}: {str(parent)!r} is not writable")
    return folder


def default_db() -> str:
    """The `--db` default: `$SIMIA_DB_URL` (a database URL for every replica), else simia.db."""
    return os.environ.get("SIMIA_DB_URL") or "simia.db"


def readable_db(target: str, flag: str = "--db") -> None:
    """Check a database readers open (`judge`, `export`): a file or a Postgres database `simia serve --db`
    wrote (an older one is upgraded), or CliError naming `flag`, the option that gave it."""
    if is_postgres_url(target):
        try:
            open_store(target, create=False)  # checks the schema; its connections open only on first use
        except SimiaError as exc:
            raise CliError(f"{flag}: {exc}") from None
        return
    path = Path(target.removeprefix("sqlite:///"))
    if not path.is_file():
        raise CliError(f"no database at {target!r}; pass {flag} PATH (the file `simia serve --db` wrote)")
    if "episodes" not in _tables(path):
        raise CliError(
            f"{flag} {target!r} is not a simia database; pass {flag} PATH (the file `simia serve --db` wrote)"
        )


def open_db(target: str, *, synchronous: str = "FULL", must_exist: bool = False, flag: str = "--db") -> Store:
    """The store at `--db`: a Postgres URL, or a SQLite path whose folder must exist (and the file too, for readers).

    An existing file must be a simia database or empty: SQLite would take a short file of anything else for
    an empty database and overwrite it, and would add simia's tables to another program's database. Errors name
    `flag`, the option that gave `target`."""
    if "://" not in target or target.startswith("sqlite:///"):
        path = Path(target.removeprefix("sqlite:///"))
        if must_exist:
            readable_db(target, flag)
        if not path.parent.is_dir():
            raise CliError(f"{flag} {target!r}: folder {str(path.parent)!r} does not exist; create it first")
        if path.is_dir():
            raise CliError(f"{flag} {target!r} is a folder; give a database file path")
        if path.is_file() and _head(path, 16) not in (_SQLITE_HEADER, b""):
            raise CliError(f"{flag} {target!r} is not a SQLite database; give a new file path or a simia database")
        if (tables := _tables(path)) and "episodes" not in tables:
            raise CliError(f"{flag} {target!r} is another program's SQLite database; give a new file path")
    try:
        return open_store(target, synchronous=synchronous, create=not must_exist)
    except (ValueError, OSError, SimiaError, sqlite3.Error) as exc:
        where = "" if is_postgres_url(target) else f" {redact_url(target)!r}"  # a Postgres message names it
        raise CliError(f"{flag}{where}: {exc}") from None


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
