"""Serving an ASGI app inside the running event loop: the in-process server of rollouts, demos and tests."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import uvicorn

from .slow_clients import timed_h11

__all__ = ["free_port", "serving"]


def free_port() -> int:
    """A 127.0.0.1 port nobody uses now, drawn below the kernel's ephemeral range (`ip_local_port_range`, 32768-60999
    on Linux): a port the kernel picks for `bind(0)` comes from the range it also gives outgoing connections, and
    under load one of those took it between the choice and the server's bind ("Address already in use"). It may
    still be taken before it is bound, rarely."""
    low = _ephemeral_low()
    for _ in range(200):
        port = 10_000 + secrets.randbelow(max(low - 10_000, 1))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # nothing free below the range: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


@contextlib.asynccontextmanager
async def serving(app: Any, port: int | None = None) -> AsyncIterator[int]:
    """Run an ASGI app with uvicorn on 127.0.0.1 (a free port by default) in this event loop; yields the port. A
    simia app (one with `settings`) gets its header and body deadlines (`simia.server.slow_clients`)."""
    port = port or free_port()
    settings = getattr(app, "settings", None)
    http = timed_h11(settings.header_timeout, settings.body_timeout) if settings is not None else "auto"
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1, http=http
    )
    server = uvicorn.Server(config)
    # The host program owns its signals: uvicorn's own Ctrl-C handling would stop this server under the program
    # (a rollout then failed its remaining runs against a dead server) instead of interrupting the program.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
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
