"""Serving an ASGI app inside the running event loop: the in-process server of rollouts, demos and tests."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import uvicorn

from .slow_clients import timed_h11

__all__ = ["free_port", "serving"]


def free_port() -> int:
    """A 127.0.0.1 port nobody listens on now (the kernel's choice: it may be taken again before it is bound)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
