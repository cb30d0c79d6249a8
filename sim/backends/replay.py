"""`replay:DB`: answer simulator calls from the responses recorded in a simia database, without a model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..cache import SqliteCache
from ..errors import BackendConfigError, BackendRejected, StoreConfigError
from ..pg_store import PgStore, is_postgres_url, redact_url
from ._base import Backend, Completion, CompletionRequest, RetryPolicy, Usage

__all__ = ["ReplayBackend"]


class ReplayBackend(Backend):
    """Serves each request by its cache key from a recorded database (read-only): a SQLite file, or a
    Postgres URL (the database several replicas recorded into)."""

    def __init__(self, db: str | Path, *, retry: RetryPolicy | None = None) -> None:
        super().__init__(max_concurrency=64, retry=retry or RetryPolicy(max_attempts=1))
        self.lookup: Callable[[str], Awaitable[dict[str, Any] | None]]
        self._close: Callable[[], Awaitable[None]]
        if isinstance(db, str) and is_postgres_url(db):
            try:
                store = PgStore(db, create=False)
            except StoreConfigError as exc:
                raise BackendConfigError(f"replay: {exc}") from None
            self.model = "replay:postgres"
            self.spec = f"replay:{redact_url(db)}"
            self.lookup, self._close = store.get_replay, store.close
            return
        path = Path(db)
        if not path.is_file():
            raise BackendConfigError(f"replay: no database at {str(path)!r}; pass replay:PATH to a simia --db file")
        self.model = f"replay:{path.name}"
        self.spec = f"replay:{path}"
        cache = SqliteCache(path, readonly=True)
        self.lookup, self._close = cache.get_replay, lambda: asyncio.to_thread(cache.close)

    async def generate(self, request: CompletionRequest, timeout: float) -> Completion:
        if request.key is None:
            raise BackendRejected("replay: this request has no cache key; replay only serves seeded simulator calls")
        data = await self.lookup(request.key)
        if data is None:
            raise BackendRejected(
                "replay: no recorded answer for this call; replay needs the same world, state, arguments and seed "
                "as the recorded episode"
            )
        return Completion(data=data, text=json.dumps(data), model=self.model, usage=Usage(calls=1, cost_usd=0.0))

    async def aclose(self) -> None:
        await self._close()
