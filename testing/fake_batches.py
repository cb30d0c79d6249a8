"""The fake provider's batch APIs: the OpenAI Batch API (files and batches) and Anthropic Message Batches.

Mounted on every `FakeProvider` (`provider.batches`). A submitted batch answers each of its requests through
the provider's own interactive endpoint, over HTTP, so scripted replies, chaos, the default answer and the
request log apply to batched requests exactly as to interactive ones; a request the endpoint answers with an
error status is an errored result. A batch reports itself in progress for `polls` status checks after its
requests are answered (read when checked: a test may change it), then ended. Tests steer the outcome of
the next batch with `expire_next` (it ends expired, its requests unanswered) or `cancel` (the provider's
cancel endpoint), and read what was submitted in `submitted` (batch id -> the request bodies, by custom_id).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx2 as httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["FakeBatches"]


@dataclass
class _Batch:
    id: str
    kind: str  # "openai" or "anthropic"
    requests: dict[str, dict[str, Any]]
    created_at: float = field(default_factory=time.time)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # custom_id -> {"status", "body"}
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    polls_seen: int = 0
    outcome: str = ""  # "", "expired", "cancelled"
    input_file: str = ""
    output_file: str | None = None
    error_file: str | None = None


class FakeBatches:
    """The batch endpoints of one fake provider (see the module docstring)."""

    def __init__(self, base: str = "") -> None:
        self.base = base  # the provider's own URL, set when it starts serving
        self.polls = 1
        self.expire_next = False
        self.batches: dict[str, _Batch] = {}
        self.files: dict[str, bytes] = {}
        self.submitted: dict[str, dict[str, dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()

    def routes(self) -> list[Route]:
        return [
            Route("/v1/files", self._upload, methods=["POST"]),
            Route("/v1/files/{file_id}/content", self._content, methods=["GET"]),
            Route("/v1/batches", self._openai_create, methods=["POST"]),
            Route("/v1/batches/{batch_id}", self._openai_get, methods=["GET"]),
            Route("/v1/batches/{batch_id}/cancel", self._cancel, methods=["POST"]),
            Route("/v1/messages/batches", self._anthropic_create, methods=["POST"]),
            Route("/v1/messages/batches/{batch_id}", self._anthropic_get, methods=["GET"]),
            Route("/v1/messages/batches/{batch_id}/results", self._anthropic_results, methods=["GET"]),
            Route("/v1/messages/batches/{batch_id}/cancel", self._cancel, methods=["POST"]),
        ]

    # -- OpenAI: files, then a batch over one ------------------------------------------------------------------

    async def _upload(self, request: Request) -> Response:
        async with request.form() as form:
            upload = form.get("file")
            if upload is None or isinstance(upload, str) or form.get("purpose") != "batch":
                return _openai_error(400, "a batch file upload needs a file and purpose=batch")
            data = await upload.read()
        file_id = f"file-{next(self._ids)}"
        self.files[file_id] = data
        return JSONResponse(_file_object(file_id, len(data), upload.filename or "batch.jsonl"))

    async def _content(self, request: Request) -> Response:
        data = self.files.get(request.path_params["file_id"])
        if data is None:
            return _openai_error(404, "no such file")
        return Response(data, media_type="application/jsonl")

    async def _openai_create(self, request: Request) -> Response:
        body = await request.json()
        data = self.files.get(body.get("input_file_id", ""))
        if data is None or body.get("endpoint") != "/v1/chat/completions":
            return _openai_error(400, "input_file_id must name an uploaded file; endpoint /v1/chat/completions")
        lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
        requests = {line["custom_id"]: line["body"] for line in lines}
        batch = self._start("openai", f"batch_{next(self._ids)}", requests)
        batch.input_file = body["input_file_id"]
        return JSONResponse(self._openai_object(batch))

    async def _openai_get(self, request: Request) -> Response:
        batch = self.batches.get(request.path_params["batch_id"])
        if batch is None:
            return _openai_error(404, "no such batch")
        if self._ended(batch) and batch.output_file is None and batch.error_file is None:
            ok = [r for r in batch.results.values() if r["status"] == 200]
            bad = [r for r in batch.results.values() if r["status"] != 200]
            if ok:
                batch.output_file = self._file(ok)
            if bad:
                batch.error_file = self._file(bad)
        return JSONResponse(self._openai_object(batch))

    def _file(self, lines: list[dict[str, Any]]) -> str:
        file_id = f"file-{next(self._ids)}"
        self.files[file_id] = "".join(json.dumps(line["line"]) + "\n" for line in lines).encode()
        return file_id

    def _openai_object(self, batch: _Batch) -> dict[str, Any]:
        if batch.outcome:
            status = batch.outcome
        elif self._ended(batch):
            status = "completed"
        else:
            status = "in_progress"
        failed = sum(1 for r in batch.results.values() if r["status"] != 200)
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "errors": None,
            "input_file_id": batch.input_file,
            "completion_window": "24h",
            "status": status,
            "output_file_id": batch.output_file,
            "error_file_id": batch.error_file,
            "created_at": int(batch.created_at),
            "request_counts": {
                "total": len(batch.requests),
                "completed": len(batch.results) - failed,
                "failed": failed,
            },
        }

    # -- Anthropic: one batch of message parameters ------------------------------------------------------------

    async def _anthropic_create(self, request: Request) -> Response:
        body = await request.json()
        items = body.get("requests")
        if not isinstance(items, list) or not items:
            return JSONResponse({"type": "error", "error": {"type": "invalid_request_error"}}, status_code=400)
        requests = {item["custom_id"]: item["params"] for item in items}
        batch = self._start("anthropic", f"msgbatch_{next(self._ids)}", requests)
        return JSONResponse(self._anthropic_object(batch))

    async def _anthropic_get(self, request: Request) -> Response:
        batch = self.batches.get(request.path_params["batch_id"])
        if batch is None:
            return JSONResponse({"type": "error", "error": {"type": "not_found_error"}}, status_code=404)
        return JSONResponse(self._anthropic_object(batch))

    async def _anthropic_results(self, request: Request) -> Response:
        batch = self.batches[request.path_params["batch_id"]]
        lines = []
        for cid in batch.requests:
            answer = batch.results.get(cid)
            if batch.outcome or answer is None:
                kind = "canceled" if batch.outcome == "cancelled" else "expired"
                result: dict[str, Any] = {"type": kind}
            elif answer["status"] == 200:
                result = {"type": "succeeded", "message": answer["body"]}
            else:
                error = {"type": "api_error", "message": json.dumps(answer["body"])[:200]}
                result = {"type": "errored", "error": {"type": "error", "error": error}}
            lines.append(json.dumps({"custom_id": cid, "result": result}) + "\n")
        return Response("".join(lines), media_type="application/binary")

    def _anthropic_object(self, batch: _Batch) -> dict[str, Any]:
        ended = bool(batch.outcome) or self._ended(batch)
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        for cid in batch.requests:
            answer = batch.results.get(cid)
            if not ended:
                counts["processing"] += 1
            elif batch.outcome or answer is None:
                counts["canceled" if batch.outcome == "cancelled" else "expired"] += 1
            else:
                counts["succeeded" if answer["status"] == 200 else "errored"] += 1
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(batch.created_at))
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": counts,
            "ended_at": created if ended else None,
            "created_at": created,
            "expires_at": created,
            "archived_at": None,
            "cancel_initiated_at": created if batch.outcome == "cancelled" else None,
            "results_url": f"{self.base}/v1/messages/batches/{batch.id}/results" if ended else None,
        }

    # -- both --------------------------------------------------------------------------------------------------

    async def _cancel(self, request: Request) -> Response:
        batch = self.batches.get(request.path_params["batch_id"])
        if batch is None:
            return _openai_error(404, "no such batch")
        batch.outcome = "cancelled"
        if batch.kind == "openai":
            return JSONResponse(self._openai_object(batch))
        return JSONResponse(self._anthropic_object(batch))

    def _start(self, kind: str, batch_id: str, requests: dict[str, dict[str, Any]]) -> _Batch:
        batch = _Batch(batch_id, kind, requests)
        self.batches[batch_id] = batch
        self.submitted[batch_id] = requests
        if self.expire_next:
            self.expire_next = False
            batch.outcome = "expired"
            batch.answered.set()
            return batch
        task = asyncio.create_task(self._answer_all(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return batch

    def _ended(self, batch: _Batch) -> bool:
        """Ended once its requests are answered and it has been seen in progress `polls` times since."""
        if batch.outcome:
            return True
        if not batch.answered.is_set():
            return False
        if batch.polls_seen < self.polls:
            batch.polls_seen += 1
            return False
        return True

    async def _answer_all(self, batch: _Batch) -> None:
        """Each request through the provider's own interactive endpoint, one after another."""
        path = "/v1/chat/completions" if batch.kind == "openai" else "/v1/messages"
        async with httpx.AsyncClient(base_url=self.base, timeout=60) as client:
            for cid, body in batch.requests.items():
                reply = await client.post(path, json=body)
                try:
                    answer = reply.json()
                except ValueError:
                    answer = {"error": {"message": reply.text[:200]}}
                line = {
                    "id": f"req_{cid}",
                    "custom_id": cid,
                    "response": {"status_code": reply.status_code, "request_id": cid, "body": answer},
                    "error": None,
                }
                batch.results[cid] = {"status": reply.status_code, "body": answer, "line": line}
        batch.answered.set()


def _file_object(file_id: str, size: int, name: str) -> dict[str, Any]:
    return {
        "id": file_id,
        "object": "file",
        "bytes": size,
        "created_at": int(time.time()),
        "filename": name,
        "purpose": "batch",
        "status": "processed",
    }


def _openai_error(status: int, message: str) -> Response:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error"}}, status_code=status)
