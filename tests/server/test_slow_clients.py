"""Slow clients are disconnected: a connection that trickles its headers, or its body, past the listener's deadline
(`--header-timeout`, `--body-timeout`) is closed, on the main listener and the ORS one; a request sent in time is
answered, and so is the next one on a kept-alive connection. Raw sockets, in process."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from simia.clients.prompt import agent_system_prompt
from simia.server import ServerSettings, serving
from simia.server.ors import OrsApp

pytestmark = pytest.mark.timeout(60)
SETTINGS = ServerSettings(header_timeout=0.5, body_timeout=0.5)


@contextlib.asynccontextmanager
async def connected(port: int) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()


async def trickle(writer: asyncio.StreamWriter, reader: asyncio.StreamReader, data: bytes) -> tuple[bytes, float]:
    """Send `data` a byte every 0.1 s until the server hangs up; what it answered and after how many seconds."""
    start = time.monotonic()
    reading = asyncio.create_task(reader.read())  # until the server hangs up
    for byte in data:
        with contextlib.suppress(ConnectionError):
            writer.write(bytes([byte]))
            await writer.drain()
        await asyncio.wait({reading}, timeout=0.1)
        if reading.done():
            break
    answer = await asyncio.wait_for(reading, 10)
    return answer, time.monotonic() - start


def get(port: int) -> bytes:
    return b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Padding: %s\r\n\r\n" % (port, b"x" * 100)


def post(port: int, body: bytes) -> bytes:
    head = b"POST /v1/episodes HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n" % port
    return head + b"Content-Length: %d\r\n\r\n" % len(body)


BODY = b'{"world": "mock"}' + b" " * 100


async def test_a_client_trickling_its_headers_or_its_body_is_disconnected_at_the_deadline(make_server: Any) -> None:
    async with make_server(SETTINGS) as server:
        port = int(server.url.rsplit(":", 1)[1])
        async with connected(port) as (reader, writer):
            headers, header_s = await trickle(writer, reader, get(port))
        async with connected(port) as (reader, writer):
            writer.write(post(port, BODY))
            body, body_s = await trickle(writer, reader, BODY)
        async with connected(port) as (reader, writer):
            silent = await asyncio.wait_for(reader.read(), 10)  # connected, never sent a byte
        async with connected(port) as (reader, writer):  # in time, twice on one connection
            writer.write(get(port) + get(port))
            answers = b""
            while answers.count(b"HTTP/1.1 200") < 2 and not reader.at_eof():
                answers += await asyncio.wait_for(reader.read(4096), 10)
        episodes = await server.store.list_episodes()
    assert (headers, silent) == (b"", b"")
    assert 0.4 < header_s < 3
    assert b"201" not in body and 0.4 < body_s < 3
    assert episodes == []  # the trickled body created nothing
    assert answers.count(b"HTTP/1.1 200 OK") == 2


async def test_the_ors_listener_has_the_same_deadlines(make_server: Any) -> None:
    async with make_server(SETTINGS) as server:
        app = server.app
        ors = OrsApp(app.service, app.settings, app.drain, system_prompt=agent_system_prompt, rewards=app.rewards)
        async with serving(ors) as port, connected(port) as (reader, writer):
            answer, seconds = await trickle(writer, reader, get(port))
    assert answer == b"" and 0.4 < seconds < 3
