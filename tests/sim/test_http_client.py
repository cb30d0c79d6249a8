"""The lean HTTP client of openai-compatible backends: pooled keep-alive, chunked bodies, stale connections."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import Callable
from typing import Literal

import pytest
from simia.sim.backends import CompletionRequest, RetryPolicy, resolve_backend
from simia.sim.backends._http import LeanHTTP
from simia.sim.errors import BackendUnavailable

Fate = Literal["answer", "answer then reset", "drop"]


class CountingServer:
    """A local HTTP/1.1 server on raw asyncio streams that counts the requests it reads; `fate(n)` decides what
    happens to the n-th: answered (kept alive), answered then the connection reset, or read and dropped unanswered."""

    def __init__(self, fate: Callable[[int], Fate], body: object = None) -> None:
        self.fate = fate
        self.body = json.dumps(body if body is not None else {}).encode()
        self.received: list[int] = []  # the connection number each request arrived on
        self.reset = asyncio.Event()
        self.connections = 0
        self._handlers: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> CountingServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await asyncio.wait_for(asyncio.gather(*self._handlers), 5)
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        self.connections += 1
        connection = self.connections
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                await reader.readexactly(length)
                self.received.append(connection)
                fate = self.fate(len(self.received))
                if fate == "drop":
                    return
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(self.body), self.body))
                await writer.drain()
                if fate == "answer then reset":  # an abortive close (RST) of the now idle keep-alive connection
                    linger = struct.pack("ii", 1, 0)
                    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    return
        finally:
            writer.close()
            await writer.wait_closed()
            if self.fate(len(self.received)) == "answer then reset":
                self.reset.set()


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


async def test_a_request_the_server_received_is_never_sent_twice() -> None:
    """The server answers the first request, then reads the second and drops the connection unanswered: a POST
    that reached the server is not re-sent (it may have billed a model call); the retry layer decides."""
    async with CountingServer(lambda n: "answer" if n == 1 else "drop") as server:
        client = LeanHTTP(server.url)
        assert (await client.post("/chat/completions", {"n": 1})).json() == {}
        with pytest.raises(ConnectionError, match="failed after sending"):
            await client.post("/chat/completions", {"n": 2})  # on the pooled connection
        await client.aclose()
    assert server.received == [1, 1]


async def test_a_pooled_connection_the_server_reset_while_idle_is_replaced_before_sending() -> None:
    async with CountingServer(lambda n: "answer then reset" if n == 1 else "answer") as server:
        client = LeanHTTP(server.url)
        await client.post("/chat/completions", {"n": 1})
        await asyncio.wait_for(server.reset.wait(), 5)
        assert (await client.post("/chat/completions", {"n": 2})).status == 200
        await client.aclose()
    assert server.received == [1, 2]


async def test_a_request_whose_first_send_is_refused_goes_out_once_on_a_fresh_connection() -> None:
    """When the kernel refuses the very first send (broken pipe), not a byte has left: sending again is safe."""
    async with CountingServer(lambda n: "answer") as server:
        client = LeanHTTP(server.url)
        await client.post("/chat/completions", {"n": 1})
        (pooled,) = client._idle
        pooled.writer.get_extra_info("socket").shutdown(socket.SHUT_WR)  # its next send() fails with EPIPE
        assert (await client.post("/chat/completions", {"n": 2})).status == 200
        await client.aclose()
    assert server.received == [1, 2]


async def test_each_attempt_of_the_retry_layer_reaches_the_server_once() -> None:
    """A server that reads requests and drops them: the one retry layer, not the HTTP client, decides how many
    times the call is made, so `max_attempts=3` is three requests received, not six."""
    answer = {"choices": [{"message": {"role": "assistant", "content": '{"answer": 4}'}}], "model": "m"}
    request = CompletionRequest(messages=[{"role": "user", "content": "2+2?"}], schema={"type": "object"})

    async def no_sleep(seconds: float) -> None:
        return None

    async with CountingServer(lambda n: "answer" if n == 1 else "drop", body=answer) as server:
        backend = resolve_backend(
            "openai-compatible:m", base_url=server.url, retry=RetryPolicy(max_attempts=3, sleep=no_sleep)
        )
        assert (await backend.complete(request)).data == {"answer": 4}  # leaves a pooled connection
        with pytest.raises(BackendUnavailable, match=r"gave up after 3 attempts .*failed after sending"):
            await backend.complete(request)
        await backend.aclose()
    assert len(server.received) == 1 + 3
