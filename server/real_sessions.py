"""A real session: one MCP SDK client session on a world's real server, held open for one episode.

The session is owned by a task of its own, because the SDK's transports are anyio task groups, which close
in the task that opened them, while an episode's calls arrive in the tasks of different requests. Calls are
queued to that task and answered in order. The session ends when it is closed, or when its server goes
away (the process exited, the connection closed, a call ran past the server's timeout): `ended` then says
why, and every call still waiting fails with that reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from typing import Any, TextIO

import anyio
import httpx2 as httpx
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from simia.sim.errors import SimiaError
from simia.sim.world import RealServer

__all__ = ["RealServerFailed", "RealSession"]

_Request = tuple[str, dict[str, Any], "asyncio.Future[types.CallToolResult]"]


class RealServerFailed(SimiaError):
    """The real server could not answer (unreachable, a protocol error, past its timeout): one line."""


class RealSession:
    """One open client session on `server` (started at once, in the background).

    Args:
        server: the world's real server.
        headers, env: its headers and environment, variables already filled (`RealServer.resolved`).
    """

    def __init__(self, server: RealServer, headers: dict[str, str], env: dict[str, str]) -> None:
        self.server = server
        self.ended: str | None = None
        """Why the session ended, in a few words (None while it is open)."""
        self._requests: asyncio.Queue[_Request | None] = asyncio.Queue()
        self._current: _Request | None = None
        self._scope: anyio.CancelScope | None = None
        self._task = asyncio.create_task(self._serve(headers, env), name=f"real session {server.address}")

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """One call, after those queued before it.

        Raises:
            RealServerFailed: no answer (the session has ended, or ends now: past the server's timeout, it is
                closed, since a late answer could not be told from the next call's).
        """
        if self.ended is not None:
            raise RealServerFailed(f"{self.server.address}: its session ended ({self.ended})")
        future: asyncio.Future[types.CallToolResult] = asyncio.get_running_loop().create_future()
        self._requests.put_nowait((tool, arguments, future))
        try:
            with anyio.fail_after(self.server.timeout):
                return await asyncio.shield(future)
        except TimeoutError:
            future.cancel()  # nobody waits for it any more
            self.ended = f"no answer within {self.server.timeout:g} s"
            await self.close()
            raise RealServerFailed(f"{self.server.address}: {self.ended}; its session is closed") from None

    async def close(self) -> None:
        """End the session and wait until its server is stopped (a process: stdin closed, then terminated
        after the SDK's grace period). Idempotent."""
        self.ended = self.ended or "closed"
        self._requests.put_nowait(None)
        if self._scope is None:
            self._task.cancel()  # it has not started: nothing to stop
        elif self._current is not None:
            self._scope.cancel()  # a call is in flight: it will not be answered
        await asyncio.wait([self._task])

    async def _serve(self, headers: dict[str, str], env: dict[str, str]) -> None:
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
            try:
                with anyio.CancelScope() as self._scope:
                    async with self._connect(headers, env, errlog) as client:
                        while (request := await self._requests.get()) is not None:
                            self._current = request
                            tool, arguments, future = request
                            try:
                                answer: types.CallToolResult | BaseException = await client.call_tool(tool, arguments)
                            except MCPError as exc:
                                if exc.code == types.CONNECTION_CLOSED:
                                    raise
                                answer = RealServerFailed(f"{self.server.address}: {_leaf(exc)}")
                            _settle(future, answer)
                            self._current = None
            except Exception as exc:  # the SDK and its transports raise many kinds, often grouped
                said = _last_line(errlog)
                self.ended = self.ended or (f"{_leaf(exc)}; the server said: {said}" if said else _leaf(exc))
            finally:
                self.ended = self.ended or "closed"
                failed = RealServerFailed(f"{self.server.address}: its session ended ({self.ended})")
                for waiting in [self._current, *_drain(self._requests)]:
                    if waiting is not None:
                        _settle(waiting[2], failed)

    @contextlib.asynccontextmanager
    async def _connect(self, headers: dict[str, str], env: dict[str, str], errlog: TextIO) -> AsyncIterator[Client]:
        server = self.server
        if server.url is not None:
            async with (
                httpx.AsyncClient(headers=headers, timeout=server.timeout) as http,
                Client(streamable_http_client(server.url, http_client=http)) as client,
            ):
                yield client
            return
        command, *args = server.command or [""]
        params = StdioServerParameters(command=command, args=args, env=env)  # beside the SDK's safe defaults
        async with Client(stdio_client(params, errlog=errlog)) as client:
            yield client


def _settle(future: asyncio.Future[types.CallToolResult], answer: types.CallToolResult | BaseException) -> None:
    if future.done():  # its caller gave up waiting
        return
    if isinstance(answer, BaseException):
        future.set_exception(answer)
    else:
        future.set_result(answer)


def _drain(queue: asyncio.Queue[_Request | None]) -> list[_Request | None]:
    items: list[_Request | None] = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


def _leaf(exc: BaseException) -> str:
    """The first leaf of an exception group, as one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def _last_line(errlog: TextIO) -> str:
    """What a stdio server last wrote to stderr (its last non-blank line), to say why it went away."""
    errlog.seek(0)
    said = [line for line in errlog.read()[-4000:].splitlines() if line.strip()]
    return said[-1].strip()[:200] if said else ""
