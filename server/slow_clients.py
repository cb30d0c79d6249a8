"""Slow clients: uvicorn's HTTP/1.1 protocol (h11) with a deadline for a request's headers and one for its body, so a
client that trickles either (a byte every few seconds) is disconnected instead of holding a connection for ever.

uvicorn times out only an idle keep-alive connection; a connection that sends nothing, or sends its headers or body a
byte at a time, stays open. `timed_h11` closes one whose headers are not whole `header_timeout` seconds after its
first byte of a request (or after it connected), and one whose body is not whole `body_timeout` seconds after its
headers (the app reading it then sees the client gone: one INFO line). Deadlines, not idle timers: a trickle resets
nothing. A WebSocket upgrade leaves both behind (its own idle limit is `--ws-idle-timeout`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["timed_h11"]


class _TimedH11(H11Protocol):
    header_timeout = 10.0
    body_timeout = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting: str = ""  # "headers", "body" or "" (none pending)

    def _arm(self, waiting: str, seconds: float) -> None:
        self._disarm()
        self._waiting = waiting
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline, self._waiting = None, ""

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.logger.info("closed a connection whose request %s did not arrive in time", self._waiting)
            self.transport.close()

    def _follow(self) -> None:
        """Move the deadline along with what the client has sent: headers whole -> the body's, body whole -> none."""
        if self.transport.get_protocol() is not self:  # upgraded to a WebSocket
            self._disarm()
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            if self._waiting != "headers" and self.conn.our_state is h11.IDLE:
                self._arm("headers", self.header_timeout)
        elif state is h11.SEND_BODY:
            if self._waiting != "body":
                self._arm("body", self.body_timeout)
        elif self._waiting:
            self._disarm()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm("headers", self.header_timeout)  # a connection that sends nothing is a slow one too

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing() or self.conn.their_state is h11.IDLE:
            self._disarm()  # uvicorn's keep-alive timer closes an idle connection; a new request's first byte re-arms
        else:
            self._follow()  # a pipelined request, or a body still coming after an early answer

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._disarm()
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def timed_h11(header_timeout: float, body_timeout: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with these deadlines (seconds), for `uvicorn.Config(http=...)`."""
    return type("TimedH11Protocol", (_TimedH11,), {"header_timeout": header_timeout, "body_timeout": body_timeout})
