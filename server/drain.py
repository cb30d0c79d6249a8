"""Draining: how a server stops without dropping a call it accepted.

Once `Drain.start()` runs (`simia serve` calls it on SIGTERM), every new request, on the API and on both
MCP URLs, `/healthz` included (a load balancer then stops sending work), is answered `503` with the API's
error body `{"error": {"code": "draining", ...}}`, `Retry-After` and `Connection: close`, while the
requests already in flight run to their end and are answered as usual. `Drain.wait` returns when none is
left or the timeout passes; the server then stops listening and exits. A request still running then is
cancelled and answered the same 503, which says its outcome is unknown.

In flight means any request but a GET: tool calls, creates, forks and ends. GETs are quick reads, except
an MCP client's open event stream, which would otherwise hold the drain to its timeout.
"""

from __future__ import annotations

import asyncio

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["Drain", "DrainGate"]


class Drain:
    """The drain state of one server: whether it is draining, and how many requests are in flight."""

    def __init__(self, retry_after: int) -> None:
        self.retry_after = retry_after
        self.draining = False
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def start(self) -> None:
        """Refuse new requests from now on (idempotent)."""
        self.draining = True

    async def wait(self, timeout: float) -> bool:
        """Wait until no request is in flight; False when `timeout` seconds passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def _enter(self) -> None:
        self.in_flight += 1
        self._idle.clear()

    def _leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()


class DrainGate:
    """Outermost middleware: counts the requests in flight, and refuses new ones once the server drains."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        drain = self.drain
        if drain.draining:
            message = "the server is shutting down and takes no new requests"
            await self._refuse(message, scope, receive, send)
            return
        if scope["method"] == "GET":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        drain._enter()
        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:  # still running when the drain timed out: say so in the API's shape
            if drain.draining and not started:
                message = (
                    "the server shut down before this request finished (--drain-timeout passed); "
                    "it may have taken effect or not"
                )
                await self._refuse(message, scope, receive, send)
            raise
        finally:
            drain._leave()

    async def _refuse(self, message: str, scope: Scope, receive: Receive, send: Send) -> None:
        retry = self.drain.retry_after
        body = {"error": {"code": "draining", "message": f"{message}; retry in {retry} s or on another replica"}}
        headers = {"Retry-After": str(retry), "Connection": "close"}
        await JSONResponse(body, status_code=503, headers=headers)(scope, receive, send)
