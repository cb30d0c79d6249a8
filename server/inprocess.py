"""Serving an ASGI app inside the running event loop: the in-process server of rollouts, demos and tests."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import uvicorn

__all__ = ["free_port", "serving"]


_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000  # below: ports other services are configured on


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux; 32768 where it cannot be read)."""
    try:
        return int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A 127.0.0.1 port nobody listens on now, chosen below the ephemeral range when there is room.

    The kernel hands ports of its ephemeral range to every outgoing connection, so a port found free there (as a
    bind to port 0 finds one) can be taken as a client's local port before the server binds it: with many
    processes connecting at once (parallel tests), "Address already in use". Below that range only listeners
    compete, and a random pick rarely meets another.
    """
    start = _ephemeral_start()
    if start - _LOWEST >= 1000:
        for _ in range(20):
            port = random.randrange(_LOWEST, start)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def serving(app: Any, port: int | None = None) -> AsyncIterator[int]:
    """Run an ASGI app with uvicorn on 127.0.0.1 (a free port by default) in this event loop; yields the port."""
    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield port
    finally:
        server.should_exit = True
        await task
