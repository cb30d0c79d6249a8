"""`replay:DB`: answer simulator calls from the responses recorded in a simia database, without a model."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import BackendConfigError, BackendRejected, StoreConfigError
from ..storage import open_recorded
from ._base import Backend, Completion, CompletionRequest, RetryPolicy, Usage

__all__ = ["ReplayBackend"]


class ReplayBackend(Backend):
    """Serves each request by its cache key from a recorded database (read-only): a SQLite file, or a
    Postgres URL (the database several replicas recorded into)."""

    def __init__(self, db: str | Path, *, retry: RetryPolicy | None = None) -> None:
        super().__init__(max_concurrency=64, retry=retry or RetryPolicy(max_attempts=1))
        try:
            recorded = open_recorded(db)
        except StoreConfigError as exc:
            raise BackendConfigError(f"replay: {exc}") from None
        self.model = f"replay:{recorded.engine if recorded.engine == 'postgres' else Path(recorded.label).name}"
        self.spec = f"replay:{recorded.label}"
        self.lookup, self._close = recorded.lookup, recorded.close

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
