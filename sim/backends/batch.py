"""Batch APIs: work that can wait is answered through a provider's batch endpoint, at half the price.

`BatchBackend` is a `Backend` like any other, so the judge and the synthesis pipeline use it unchanged: each
`complete` call joins a queue, the queue is submitted as one provider batch (`chunk` requests at most, after
`linger` seconds of gathering), and every caller gets the answer its request would have had interactively,
read by the same provider backend (`batch_answer`) and checked by the caller exactly as an interactive answer.
Providers: the OpenAI Batch API (`OpenAIBatches`: a JSONL file of chat-completions requests) and Anthropic
Message Batches (`AnthropicBatches`); both discount batched tokens by 50%, and the recorded cost says so.

Nothing is paid for twice: each request is named by the hash of its provider body (`custom_id`), and every
submitted batch is written to a journal file (its id and its requests' names) before it is waited for. A run
started again with the same journal (interrupted, or after a crash) finds its requests there and reads the
batches it already paid for instead of submitting them again. A request that its batch did not answer
(errored, expired, cancelled) is answered interactively at the full price (`fallback=True`, the default) or
fails as `BackendUnavailable` naming the batch; `report` counts each outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from ..errors import BackendConfigError, BackendUnavailable
from ._base import Backend, Completion, CompletionRequest, Usage

__all__ = [
    "BATCH_DISCOUNT",
    "BatchBackend",
    "BatchProvider",
    "BatchResult",
    "BatchStatus",
    "Batches",
    "ResultKind",
]

BATCH_DISCOUNT = 0.5
"""What a batched token costs, as a share of its interactive price (OpenAI and Anthropic alike)."""

ResultKind = Literal["succeeded", "errored", "expired", "canceled"]


@dataclass(frozen=True)
class BatchStatus:
    """Where a submitted batch stands: `ended` once no request of it will change any more."""

    ended: bool
    state: str
    """The provider's own word for it (`in_progress`, `completed`, `expired`, `ended`, ...)."""


@dataclass(frozen=True)
class BatchResult:
    """One request's outcome in an ended batch: the provider's answer body, or why there is none."""

    kind: ResultKind
    body: Any = None
    error: str = ""


class Batches(Protocol):
    """A provider's batch endpoint (`OpenAIBatches`, `AnthropicBatches`)."""

    async def submit(self, requests: list[tuple[str, dict[str, Any]]]) -> str:
        """Submit (custom_id, provider body) pairs as one batch; returns its id."""
        ...

    async def status(self, batch_id: str) -> BatchStatus: ...

    async def results(self, batch_id: str) -> dict[str, BatchResult]:
        """The outcome of each request of an ended batch, by custom_id (a request missing here was never run)."""
        ...


class BatchProvider(Protocol):
    """What `BatchBackend` needs of the interactive backend it batches for (OpenAIBackend, AnthropicBackend)."""

    spec: str
    model: str

    def request_body(self, request: CompletionRequest) -> dict[str, Any]: ...

    def batch_answer(self, body: Any, request: CompletionRequest) -> Completion: ...

    def batches(self) -> Batches: ...

    async def complete(self, request: CompletionRequest) -> Completion: ...

    async def aclose(self) -> None: ...


@dataclass
class _Waiting:
    custom_id: str
    request: CompletionRequest
    body: dict[str, Any]
    future: asyncio.Future[BatchResult]


class BatchBackend(Backend):
    """Answers `complete` through `inner`'s provider batch API (see the module docstring).

    Args:
        inner: the interactive backend: it builds each request's body, reads each answer, and answers what a
            batch could not (with `fallback`).
        journal: the JSON file where submitted batches are recorded (created when missing); give the same file
            to resume a run.
        chunk: the most requests in one batch.
        linger: seconds a batch waits for more requests before it is submitted.
        poll: seconds between two status checks of a batch.
        fallback: answer interactively, at the full price, the requests a batch did not answer.
    """

    def __init__(
        self,
        inner: BatchProvider,
        journal: Path,
        *,
        chunk: int = 1_000,
        linger: float = 2.0,
        poll: float = 30.0,
        fallback: bool = True,
    ) -> None:
        super().__init__(max_concurrency=max(chunk, 1))
        if chunk < 1:
            raise BackendConfigError(f"a batch holds at least one request; got chunk={chunk}")
        self.inner, self.journal, self.chunk, self.linger, self.poll, self.fallback = (
            inner,
            journal,
            chunk,
            linger,
            poll,
            fallback,
        )
        self.spec, self.model = inner.spec, inner.model
        self.report: Counter[str] = Counter()
        """Requests by outcome: `submitted`, `resumed` (found in the journal), `succeeded`, `interactive` (a batch
        did not answer them: answered interactively), `failed`; and `batches` submitted."""
        self._provider = inner.batches()
        self._batches = _read_journal(journal)  # batch id -> {"custom_ids": [...], "submitted_at": ...}
        self._owner = {cid: batch for batch, entry in self._batches.items() for cid in entry["custom_ids"]}
        self._queue: list[_Waiting] = []
        self._waiters: dict[str, list[asyncio.Future[BatchResult]]] = {}
        self._watching: dict[str, asyncio.Task[None]] = {}
        self._flush: asyncio.Task[None] | None = None
        self._full = asyncio.Event()

    async def generate(self, request: CompletionRequest, timeout: float) -> Completion:
        raise NotImplementedError("a batch backend answers through complete()")  # never called: complete overrides

    async def complete(self, request: CompletionRequest) -> Completion:
        body = self.inner.request_body(request)
        custom_id = "simia-" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:40]
        future: asyncio.Future[BatchResult] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(custom_id, []).append(future)
        batch = self._owner.get(custom_id)
        if batch is not None:
            self.report["resumed"] += 1
            self._watch(batch)
        elif len(self._waiters[custom_id]) == 1:  # the same request twice at once is submitted once
            self._queue.append(_Waiting(custom_id, request, body, future))
            self._schedule()
        return await self._answer(request, custom_id, await future)

    async def _answer(self, request: CompletionRequest, custom_id: str, result: BatchResult) -> Completion:
        if result.kind == "succeeded":
            completion = self.inner.batch_answer(result.body, request)
            self.report["succeeded"] += 1
            return replace(completion, usage=_discounted(completion.usage))
        batch = self._owner.get(custom_id, "?")
        why = f"batch {batch} did not answer request {custom_id}: {result.kind}" + (
            f" ({result.error})" if result.error else ""
        )
        if not self.fallback:
            self.report["failed"] += 1
            raise BackendUnavailable(f"{self.spec}: {why}; run again without --batch to answer it interactively")
        self.report["interactive"] += 1
        return await self.inner.complete(request)

    def _schedule(self) -> None:
        if len(self._queue) >= self.chunk:
            self._full.set()
        if self._flush is None or self._flush.done():
            self._flush = asyncio.create_task(self._submit_soon())

    async def _submit_soon(self) -> None:
        while self._queue:
            self._full.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._full.wait(), self.linger)
            taken, self._queue = self._queue[: self.chunk], self._queue[self.chunk :]
            await self._submit(taken)

    async def _submit(self, taken: list[_Waiting]) -> None:
        ids = [w.custom_id for w in taken]
        try:
            batch = await self._provider.submit([(cid, w.body) for cid, w in zip(ids, taken, strict=True)])
        except Exception as exc:  # a refused submission: every request of it is answered by the fallback
            refused = BatchResult("errored", error=f"the batch was not accepted: {exc}")
            for w in taken:
                for future in self._waiters.pop(w.custom_id, []):
                    if not future.done():
                        future.set_result(refused)
            return
        self._batches[batch] = {"custom_ids": ids, "submitted_at": time.time(), "provider": self.spec}
        for cid in ids:
            self._owner[cid] = batch
        _write_journal(self.journal, self._batches)  # before waiting: a crash from here on pays nothing twice
        self.report["submitted"] += len(ids)
        self.report["batches"] += 1
        self._watch(batch)

    def _watch(self, batch: str) -> None:
        if batch not in self._watching:
            self._watching[batch] = asyncio.create_task(self._collect(batch))

    async def _collect(self, batch: str) -> None:
        """Wait for `batch` to end, then hand each waiting request its result."""
        try:
            while not (await self._provider.status(batch)).ended:  # noqa: ASYNC110 (a remote state: polled)
                await asyncio.sleep(self.poll)
            results = await self._provider.results(batch)
        except Exception as exc:  # the provider could not say: the requests go to the fallback
            results, failure = {}, BatchResult("errored", error=f"reading the batch failed: {exc}")
        else:
            failure = BatchResult("expired", error="the batch ended without this request's result")
        del self._watching[batch]
        for cid in self._batches[batch]["custom_ids"]:
            for future in self._waiters.pop(cid, []):
                if not future.done():
                    future.set_result(results.get(cid, failure))

    async def aclose(self) -> None:
        for task in [*self._watching.values(), *([self._flush] if self._flush else [])]:
            task.cancel()
        await self.inner.aclose()


def _discounted(usage: Usage) -> Usage:
    cost = None if usage.cost_usd is None else usage.cost_usd * BATCH_DISCOUNT
    return replace(usage, cost_usd=cost)


def _read_journal(path: Path) -> dict[str, dict[str, Any]]:
    """The batches recorded in `path` ({} when it does not exist yet).

    Raises:
        BackendConfigError: the file is not a journal (a mistyped path must not be overwritten).
    """
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        batches = data["batches"]
        if not isinstance(batches, dict) or not all(isinstance(b.get("custom_ids"), list) for b in batches.values()):
            raise ValueError("each batch needs its custom_ids")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BackendConfigError(
            f"{path} is not a batch journal ({exc}); give a new file, or the journal of the run to resume"
        ) from None
    return batches


def _write_journal(path: Path, batches: dict[str, dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps({"version": 1, "batches": batches}, indent=1))
    os.replace(temporary, path)
