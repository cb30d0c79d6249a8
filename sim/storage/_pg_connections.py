"""The Postgres store's connections: up to N open autocommit connections, lent one operation at a time.

A lean stand-in for `psycopg_pool`: lending and returning a connection is a list pop and
push, and a task waits only when all N are out (in arrival order). Under load
`psycopg_pool` spent about 0.14 ms of CPU on each lend (locks, conditions, a timer per
wait, statistics), as much as the statement it lent the connection for, and a call
lends two. A connection that comes back broken, closed or not idle (its operation
failed or was cancelled halfway) is closed and its place freed. A broken one also
retires every idle connection returned before it broke (the server restarted: they are
dead too), so a restart costs one failed operation, not one per idle connection.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import pq

__all__ = ["Connections"]

Conn = psycopg.AsyncConnection[dict[str, Any]]


class Connections:
    """At most `size` connections opened by `connect`, lent by `take` and returned by `give`.

    Args:
        connect: opens one new connection (its failure propagates from `take`).
        size: the most connections open (or lent) at once.
        timeout: seconds `take` waits for a free place before raising `TimeoutError`.
    """

    def __init__(self, connect: Callable[[], Awaitable[Conn]], size: int, timeout: float) -> None:
        self._connect = connect
        self._size = size
        self._timeout = timeout
        self._idle: list[tuple[Conn, float]] = []  # (connection, when it came back), the latest last
        self._out = 0  # places taken: connections lent or being opened, and places handed to a waiter
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._broken_at = -1.0  # when a connection last came back broken
        self._closed = False

    async def take(self) -> Conn:
        """A connection for one operation; give it back with `give`.

        Raises:
            TimeoutError: no place came free within the timeout.
            psycopg.OperationalError: opening a connection failed.
            RuntimeError: the connections are closed.
        """
        if self._closed:
            raise RuntimeError("the connections are closed")
        if self._out < self._size:
            self._out += 1
        else:
            await self._wait_for_a_place()
        try:
            while self._idle:
                conn, back_at = self._idle.pop()
                if back_at > self._broken_at and not conn.closed:
                    return conn
                await conn.close()  # idle since before the server went away: dead too
            conn = await self._connect()
            if self._closed:
                await conn.close()
                raise RuntimeError("the connections are closed")
            return conn
        except BaseException:
            self._free_place()
            raise

    async def _wait_for_a_place(self) -> None:
        """Wait until `_free_place` hands this task a place (it stays counted in `_out`)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            async with asyncio.timeout(self._timeout):
                await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._free_place()  # handed a place just as it gave up: pass the place on
            elif waiter in self._waiting:
                self._waiting.remove(waiter)
            raise

    async def give(self, conn: Conn) -> None:
        """Return a connection `take` lent: kept for the next operation when healthy and idle, else closed."""
        healthy = not conn.closed and not conn.broken and conn.info.transaction_status == pq.TransactionStatus.IDLE
        if healthy and not self._closed:
            self._idle.append((conn, time.monotonic()))
            self._free_place()
            return
        if conn.broken:
            self._broken_at = time.monotonic()
        self._free_place()
        await conn.close()

    def _free_place(self) -> None:
        """A place came free: hand it to the first task still waiting (it stays taken), or release it."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._out -= 1

    async def close(self) -> None:
        """Close the idle connections and refuse the waiting tasks; lent ones are closed when given back."""
        self._closed = True
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_exception(RuntimeError("the connections are closed"))
        idle, self._idle = self._idle, []
        for conn, _ in idle:
            await conn.close()
