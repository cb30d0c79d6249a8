"""A fake model provider speaking the OpenAI chat-completions and Anthropic messages APIs over real HTTP.

Ships with simia (like httpx's `MockTransport`) for tests and benchmarks: start it
on 127.0.0.1, point `openai-compatible:` / `anthropic:` backends at its URL, and
script its replies (status, body, headers, delay) or answer with a function: `schema_answer(seed)`
(`--answer schema`) answers any request with a seeded instance of its JSON schema, so any world,
an imported one included, can be served and called offline; `offline_answer(mode)`
(`simia.testing.fake_answers`, what `python -m simia.testing.fake_provider` runs) answers every kind of
request simia sends (simulator, agent, user, judge, bootstrap) in each `--answer` mode. With
`refuse_tools=True` it answers any chat-completions request carrying `tools` or `tool_choice`
with the HTTP 400 vLLM gives when started without `--enable-auto-tool-choice`.

With `chaos=Chaos(seed=...)` it mixes provider faults into its answers at random (seeded): 429
with and without Retry-After, 500/502/503, a hang past the client's deadline, a slow trickle,
a truncated body, garbage, a connection closed mid-answer, and valid JSON of the wrong schema.
`faults` counts what each request got.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import json
import random
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from simia.server.inprocess import serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .fake_answers import ANSWER_MODES, offline_answer, request_kind
from .fake_batches import FakeBatches
from .fake_cache import PromptCache

__all__ = ["FAULTS", "VLLM_TOOLS_REFUSED", "Chaos", "ChaosReset", "FakeProvider", "FakeReply"]

VLLM_TOOLS_REFUSED = {
    "object": "error",
    "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
"""vLLM's answer to native tool calling when the server was started without a tool-call parser."""


@dataclass
class FakeReply:
    """One scripted HTTP reply. `answer` is wrapped in the provider's response shape; `body` is sent as is."""

    answer: dict[str, Any] | None = None
    status: int = 200
    body: str | bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


FAULTS = (
    "429",
    "429_retry_after",
    "500",
    "502",
    "503",
    "hang",
    "trickle",
    "truncated",
    "garbage",
    "reset",
    "wrong_schema",
)
"""The faults of chaos mode: `429_retry_after` carries `Retry-After`; `hang` answers only after `Chaos.hang`
seconds; `trickle` sends a good answer a few bytes at a time over `Chaos.trickle` seconds; `truncated` is a
200 whose JSON stops halfway; `garbage` a 200 that is not JSON (or JSON nested past any parser's limit);
`reset` closes the connection in the middle of the body; `wrong_schema` is a well-formed completion whose
content is JSON that does not fit the request's schema."""


@dataclass
class Chaos:
    """Provider faults mixed into the answers at random, reproducibly for one seed and one arrival order.

    Attributes:
        seed: seeds the draw of each request's fault.
        rate: the share of requests that get a fault (the rest are answered normally).
        faults: the faults to draw from, equally likely (default: all of `FAULTS`).
        hang: seconds a `hang` waits before answering (set it past the client's deadline).
        trickle: seconds a `trickle` takes to send its whole answer.
        retry_after: the `Retry-After` seconds of `429_retry_after`.
    """

    seed: int = 0
    rate: float = 0.5
    faults: tuple[str, ...] = FAULTS
    hang: float = 30.0
    trickle: float = 1.0
    retry_after: float = 0.2

    def __post_init__(self) -> None:
        unknown = sorted(set(self.faults) - set(FAULTS))
        if unknown:
            raise ValueError(f"unknown chaos fault(s) {unknown}; known: {', '.join(FAULTS)}")
        self._random = random.Random(self.seed)

    def draw(self) -> str:
        """The next request's fault, or `ok`."""
        if self._random.random() >= self.rate:
            return "ok"
        return self._random.choice(self.faults)


_FAULT: contextvars.ContextVar[str] = contextvars.ContextVar("fake_provider_fault", default="ok")
"""The chaos fault the request being answered got (each request is answered in its own context)."""


class ChaosReset(ConnectionResetError):
    """Raised by the fake provider's app to close a connection mid-answer (the server logs it; it is no bug)."""


class _ClosedMidBody(Response):
    """Announces a body, sends part of it, then drops the connection."""

    def __init__(self, body: bytes) -> None:
        super().__init__(body, media_type="application/json")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.body[: len(self.body) // 2], "more_body": True})
        raise ChaosReset("chaos: connection closed mid-answer")


class FakeProvider:
    """A fake OpenAI + Anthropic server.

    Args:
        answer: the default answer (a JSON object) when no scripted reply is queued;
            a callable receives the request body.
        latency: seconds every reply waits (for load tests).
        refuse_tools: answer OpenAI requests that carry `tools` or `tool_choice` with vLLM's HTTP 400
            (`VLLM_TOOLS_REFUSED`), recording the request but using no scripted reply.
        chaos: mix provider faults into the answers (scripted replies are sent as scripted; chaos draws
            for the others). `faults` counts what each request got, `ok` included.
        prompt_cache: emulate the providers' prompt caches (`simia.testing.fake_cache`): usage then counts each
            prompt's tokens and reports the cached ones as OpenAI and Anthropic do; without it usage is fixed.
        log: called with one line per request answered: its number, route, kind (`request_kind`: simulator,
            agent, judge, ...), status and chaos fault (`python -m simia.testing.fake_provider` prints them).
    """

    def __init__(
        self,
        answer: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        latency: float = 0.0,
        *,
        refuse_tools: bool = False,
        chaos: Chaos | None = None,
        prompt_cache: PromptCache | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.default = answer if answer is not None else {"ok": True}
        self.log = log
        self.latency = latency
        self.refuse_tools = refuse_tools
        self.chaos = chaos
        self.prompt_cache = prompt_cache
        self.faults: Counter[str] = Counter()
        self.queue: list[FakeReply] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.port = 0
        self._stopping = asyncio.Event()
        self.batches = FakeBatches()
        """The OpenAI Batch API and Anthropic Message Batches (`simia.testing.fake_batches`)."""
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._logged(self._openai), methods=["POST"]),
                Route("/v1/messages", self._logged(self._anthropic), methods=["POST"]),
                *self.batches.routes(),
            ]
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _logged(self, handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        """`handler`, refusing a body that is not a JSON object (400, never a 500) and logging one line a request."""

        async def answer(request: Request) -> Response:
            _FAULT.set("ok")
            try:
                body = await request.json()  # starlette keeps the parsed body for the handler
            except ValueError:
                body = None
            if not isinstance(body, dict):
                response: Response = JSONResponse(
                    {"error": {"message": "the request body is not a JSON object", "type": "invalid_request_error"}},
                    status_code=400,
                )
                kind = "not JSON"
            else:
                response, kind = await handler(request), request_kind(body)
            if self.log is not None:
                drawn = _FAULT.get()
                fault = f" ({drawn})" if drawn != "ok" else ""
                number, status = len(self.requests), response.status_code
                self.log(f"fake provider: #{number} {request.url.path} {kind} -> {status}{fault}")
            return response

        return answer

    def script(self, *replies: FakeReply) -> None:
        self.queue.extend(replies)

    async def _reply(self, request: Request) -> tuple[FakeReply, dict[str, Any]]:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        reply = self.queue.pop(0) if self.queue else FakeReply()
        delay = reply.delay or self.latency
        if delay:
            await self._wait(delay)
        if reply.answer is None and reply.body is None:
            reply.answer = self.default(body) if callable(self.default) else self.default
        return reply, body

    async def _openai(self, request: Request) -> Response:
        if self.refuse_tools:
            body = await request.json()  # starlette keeps the parsed body for `_reply`
            if "tools" in body or "tool_choice" in body:
                self.requests.append(body)
                self.headers.append(dict(request.headers))
                return JSONResponse(VLLM_TOOLS_REFUSED, status_code=400)
        scripted = bool(self.queue)
        reply, body = await self._reply(request)
        fault = self._fault(scripted)
        if fault not in ("ok", "trickle", "truncated", "reset", "wrong_schema"):
            return await self._failure(fault, {"error": {"message": f"chaos: {fault}", "type": "fake_error"}})
        if fault == "wrong_schema":
            reply.answer = {"chaos": "an answer of the wrong shape"}
        if reply.body is not None:
            return Response(reply.body, status_code=reply.status, headers=reply.headers, media_type="application/json")
        if reply.status != 200:
            error = {"error": {"message": json.dumps(reply.answer), "type": "fake_error"}}
            return JSONResponse(error, status_code=reply.status, headers=reply.headers)
        completion = chat_completion(body, reply.answer, len(self.requests))
        if self.prompt_cache is not None:
            completion["usage"] = self.prompt_cache.openai_usage(body, completion["usage"]["completion_tokens"])
        return self._deliver(fault, completion, reply.headers)

    async def _anthropic(self, request: Request) -> Response:
        scripted = bool(self.queue)
        reply, body = await self._reply(request)
        fault = self._fault(scripted)
        if fault not in ("ok", "trickle", "truncated", "reset", "wrong_schema"):
            error = {"type": "error", "error": {"type": "fake_error", "message": f"chaos: {fault}"}}
            return await self._failure(fault, error)
        if fault == "wrong_schema":
            reply.answer = {"chaos": "an answer of the wrong shape"}
        if reply.body is not None:
            return Response(reply.body, status_code=reply.status, headers=reply.headers, media_type="application/json")
        if reply.status != 200:
            error = {"type": "error", "error": {"type": "fake_error", "message": json.dumps(reply.answer)}}
            return JSONResponse(error, status_code=reply.status, headers=reply.headers)
        tool = (body.get("tool_choice") or {}).get("name", "respond")
        content: list[dict[str, Any]] = [{"type": "tool_use", "id": "toolu_1", "name": tool, "input": reply.answer}]
        if not body.get("tool_choice") and isinstance(reply.answer, dict) and "tool_calls" in reply.answer:
            content = [{"type": "text", "text": reply.answer.get("message") or ""}] + [
                {
                    "type": "tool_use",
                    "id": f"toolu_{len(self.requests)}_{i}",
                    "name": c["name"],
                    "input": c["arguments"],
                }
                for i, c in enumerate(reply.answer["tool_calls"])
            ]
        answer = {
            "id": f"msg_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake"),
            "content": content,
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 120, "output_tokens": 30},
        }
        if self.prompt_cache is not None:
            answer["usage"] = self.prompt_cache.anthropic_usage(body, len(json.dumps(reply.answer)) // 4 + 1)
        return self._deliver(fault, answer, reply.headers)

    def _fault(self, scripted: bool) -> str:
        """This request's chaos fault (`ok` without chaos, and for scripted replies)."""
        fault = "ok" if self.chaos is None or scripted else self.chaos.draw()
        self.faults[fault] += 1
        _FAULT.set(fault)  # for the log line (the request's own context: others' draws do not touch it)
        return fault

    async def _failure(self, fault: str, error: dict[str, Any]) -> Response:
        """A fault that replaces the answer: an error status, a hang, or garbage."""
        assert self.chaos is not None
        if fault == "hang":
            await self._wait(self.chaos.hang)
            return JSONResponse(error, status_code=504)
        if fault == "garbage":
            junk = random.Random(len(self.requests)).choice(
                [b"<html>502 Bad Gateway</html>", b"\x00\xff not json", b"[" * 100_000, b'{"choices": 3}', b""]
            )
            return Response(junk, status_code=200, media_type="application/json")
        status = int(fault.split("_")[0])
        headers = {"retry-after": f"{self.chaos.retry_after:g}"} if fault == "429_retry_after" else {}
        return JSONResponse(error, status_code=status, headers=headers)

    def _deliver(self, fault: str, answer: dict[str, Any], headers: dict[str, str]) -> Response:
        """A good answer, sent whole, trickled, truncated or cut off mid-body."""
        data = json.dumps(answer).encode()
        if fault == "truncated":
            return Response(data[: len(data) // 2], media_type="application/json", headers=headers)
        if fault == "reset":
            return _ClosedMidBody(data)
        if fault == "trickle":
            assert self.chaos is not None
            return StreamingResponse(_trickle(data, self.chaos.trickle), media_type="application/json")
        return Response(data, media_type="application/json", headers=headers)

    async def _wait(self, seconds: float) -> None:
        """Sleep `seconds`, or less when the provider stops: a reply still waiting then is sent at once (its caller
        has long given up) instead of holding the provider's shutdown for its whole delay."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[FakeProvider]:
        """Serve on a free 127.0.0.1 port for the duration of the block."""
        self._stopping = asyncio.Event()
        async with serving(self.app) as port:
            self.port = port
            self.batches.base = self.anthropic_url
            try:
                yield self
            finally:
                self._stopping.set()


def chat_completion(body: dict[str, Any], answer: Any, n: int) -> dict[str, Any]:
    """The OpenAI chat completion that carries `answer` (as JSON content, or as native tool calls when the
    request has `tools` and the answer `tool_calls`), for the `n`th request whose body was `body`."""
    content = json.dumps(answer)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if body.get("tools") and isinstance(answer, dict) and "tool_calls" in answer:  # native tool calls
        calls = [
            {
                "id": c.get("id") or f"call_{n}_{i}",
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
            }
            for i, c in enumerate(answer["tool_calls"])
        ]
        message = {"role": "assistant", "content": answer.get("message") or None, "tool_calls": calls or None}
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
        "usage": {"prompt_tokens": 100, "completion_tokens": len(content) // 4, "total_tokens": 0},
    }


class _LeanCompletions(asyncio.Protocol):
    """Chat completions on keep-alive HTTP/1.1 connections with no framework, for load benchmarks: the
    Starlette app costs the machine more CPU per answer than a simia replica spends on the call, and on a
    shared machine the benchmark would then measure its own provider. Any POST gets a completion of
    `answer(body)` after `latency` seconds (timers, not tasks); any other method a 404."""

    def __init__(self, answer: Callable[[dict[str, Any]], Any], latency: float) -> None:
        self._answer = answer
        self._latency = latency
        self._buffer = b""
        self._served = 0
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while (end := self._buffer.find(b"\r\n\r\n")) >= 0:
            head = self._buffer[:end].decode("latin-1").split("\r\n")
            length = next(
                (int(line.partition(":")[2]) for line in head[1:] if line.lower().startswith("content-length:")), 0
            )
            if len(self._buffer) < end + 4 + length:
                return  # the rest of the body is on its way
            body, self._buffer = self._buffer[end + 4 : end + 4 + length], self._buffer[end + 4 + length :]
            if not head[0].startswith("POST "):
                self._send(404, b'{"error": {"message": "POST chat completions here"}}')
                continue
            request = json.loads(body)
            self._served += 1
            data = json.dumps(chat_completion(request, self._answer(request), self._served)).encode()
            asyncio.get_running_loop().call_later(self._latency, self._send, 200, data)

    def _send(self, status: int, data: bytes) -> None:
        if self._transport is not None:
            head = f"HTTP/1.1 {status} {'OK' if status == 200 else 'Not Found'}\r\ncontent-type: application/json"
            self._transport.write(f"{head}\r\ncontent-length: {len(data)}\r\n\r\n".encode() + data)


async def serve_lean(port: int, answer: Callable[[dict[str, Any]], Any], latency: float = 0.0) -> None:
    """Serve chat completions of `answer` on 127.0.0.1:`port` until cancelled (`_LeanCompletions`)."""
    server = await asyncio.get_running_loop().create_server(
        lambda: _LeanCompletions(answer, latency), "127.0.0.1", port, backlog=4096
    )
    async with server:
        await server.serve_forever()


async def _trickle(data: bytes, seconds: float, pieces: int = 10) -> AsyncIterator[bytes]:
    size = max(1, len(data) // pieces)
    for start in range(0, len(data), size):
        await asyncio.sleep(seconds / pieces)
        yield data[start : start + size]


def main() -> None:
    """`python -m simia.testing.fake_provider --port P [--latency S] [--answer mock|schema|ok] [--seed N]
    [--chaos RATE] [--lean] [--quiet]`: serve until killed, a line on stderr per request (`offline_answer`)."""
    parser = argparse.ArgumentParser(description="A fake OpenAI/Anthropic provider for tests and benchmarks.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds every reply waits")
    parser.add_argument(
        "--answer",
        choices=ANSWER_MODES,
        default="mock",
        help="mock: the mock world played flawlessly (simulator, a pantry agent, user, judge), any other request an "
        "instance of its schema; schema: an instance of each request's JSON schema (any world, offline); ok: "
        '{"ok": true} where the schema takes it, else as schema (with --lean: {"ok": true} to every request). '
        "In every mode each kind of request (simulator, agent, user, judge, bootstrap) gets an answer simia accepts",
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the schema instances")
    parser.add_argument("--chaos", type=float, default=0.0, metavar="RATE", help="share of answers that are faults")
    parser.add_argument("--chaos-seed", type=int, default=0, help="seeds the faults' draw")
    parser.add_argument(
        "--lean", action="store_true", help="chat completions only, without a framework (load benchmarks; no chaos)"
    )
    parser.add_argument("--quiet", action="store_true", help="no line on stderr per request answered")
    args = parser.parse_args()
    if args.lean:
        if args.chaos:
            parser.error("--lean serves answers only: drop --chaos")
        lean: Any = (lambda body: {"ok": True}) if args.answer == "ok" else offline_answer(args.answer, args.seed)
        asyncio.run(serve_lean(args.port, lean, args.latency))
        return
    chaos = Chaos(seed=args.chaos_seed, rate=args.chaos) if args.chaos else None
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    provider = FakeProvider(offline_answer(args.answer, args.seed), latency=args.latency, chaos=chaos, log=log)
    print(
        f"fake provider: --answer {args.answer} at http://127.0.0.1:{args.port}/v1 (OpenAI chat completions) and "
        f"http://127.0.0.1:{args.port} (Anthropic messages); one line per request follows",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(provider.app, host="127.0.0.1", port=args.port, log_level="warning", backlog=4096)


if __name__ == "__main__":
    main()
