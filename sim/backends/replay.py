"""`replay:DB`: answer simulator calls from the responses recorded in a simia database, without a model."""

from __future__ import annotations

import json
from pathlib import Path

from ..cache import SqliteCache
from ..errors import BackendConfigError, BackendRejected
from ._base import Backend, Completion, CompletionRequest, RetryPolicy, Usage

__all__ = ["ReplayBackend"]


class ReplayBackend(Backend):
    """Serves each request by its cache key from a recorded database (read-only)."""

    def __init__(self, db: str | Path, *, retry: RetryPolicy | None = None) -> None:
        super().__init__(max_concurrency=64, retry=retry or RetryPolicy(max_attempts=1))
        path = Path(db)
        if not path.is_file():
            raise BackendConfigError(f"replay: no database at {str(path)!r}; pass replay:PATH to a simia --db file")
        self.model = f"replay:{path.name}"
        self.spec = f"replay:{path}"
        self._cache = SqliteCache(path, readonly=True)

    async def generate(self, request: CompletionRequest, timeout: float) -> Completion:
        if request.key is None:
            raise BackendRejected("replay: this request has no cache key; replay only serves seeded simulator calls")
        data = await self._cache.get_replay(request.key)
        if data is None:
            raise BackendRejected(
                "replay: no recorded answer for this call; replay needs the same world, state, arguments and seed "
                "as the recorded episode"
            )
        return Completion(data=data, text=json.dumps(data), model=self.model, usage=Usage(calls=1, cost_usd=0.0))

    async def aclose(self) -> None:
        self._cache.close()
