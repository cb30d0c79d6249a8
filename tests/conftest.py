"""Shared fixtures: the repository's worlds, a real simia server on a free port, and no real providers."""

from __future__ import annotations

import contextlib
import os
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
from simia.sim.store import Store, open_store
from simia.testing.mock_world import mock_world_answer

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
    db: Path,
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
def make_server(tmp_path: Path, mock_answer: Callable[..., Any]) -> Callable[..., Any]:
    def make(settings: ServerSettings | None = None, backend: Backend | None = None, **kwargs: Any) -> Any:
        return serve(tmp_path / "simia.db", backend or FunctionBackend(mock_answer), settings, **kwargs)

    return make
