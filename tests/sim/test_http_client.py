"""The lean HTTP client of openai-compatible backends: pooled keep-alive, chunked bodies, stale connections."""

from __future__ import annotations

import asyncio
import json

import pytest
from simia.sim.backends._http import LeanHTTP


async def test_it_reuses_connections_reads_chunked_bodies_and_survives_a_server_closing_one() -> None:
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        served = 0
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = int(
                next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
            )
            body = json.loads(await reader.readexactly(length))
            served += 1
            payload = json.dumps({"echo": body, "connection": connections}).encode()
            chunks = [payload[:7], payload[7:]]
            writer.write(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                + b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in chunks)
                + b"0\r\n\r\n"
            )
            await writer.drain()
            if served == 2:  # the server drops the connection after two answers, without saying so
                writer.close()
                break

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = LeanHTTP(f"http://127.0.0.1:{port}/v1", headers={"Authorization": "Bearer k"})
    answers = [(await client.post("/chat/completions", {"n": i})).json() for i in range(4)]
    assert [a["echo"] for a in answers] == [{"n": i} for i in range(4)]
    assert [a["connection"] for a in answers] == [1, 1, 2, 2]  # kept alive, and reconnected once when dropped
    await client.aclose()
    server.close()
    await server.wait_closed()


async def test_an_unreachable_server_is_a_connection_error() -> None:
    with pytest.raises(ConnectionError, match=r"connection to 127\.0\.0\.1:9 failed"):
        await LeanHTTP("http://127.0.0.1:9").post("/x", {})
    with pytest.raises(ValueError, match="plain http"):
        LeanHTTP("https://api.example.com/v1")
