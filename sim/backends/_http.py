"""A lean HTTP/1.1 JSON client for OpenAI-compatible servers on plain http (vLLM, SGLang, llama.cpp, Ollama).

The openai SDK's HTTP stack costs about 1.2 ms of CPU per call (`bench/backend_http_cost.py`),
more than the rest of a simulated call; this client costs about 0.1 ms. It keeps a pool of
keep-alive connections, reads Content-Length or chunked bodies, and maps failures onto
simia's retry layer. https URLs keep using the SDK.

A POST is sent at most once: a request is re-sent (once, on a fresh connection) only when it
provably never left this process (the pooled connection was found closed before writing, or the
very first send was refused). A connection that fails after the request was written raises
`ConnectionError`; whether to try again is the retry layer's decision, since the server may
already be running (and billing) the model call.
"""

from __future__ import annotations

import asyncio
import json
import select
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["HTTPResponse", "LeanHTTP"]


@dataclass
class HTTPResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter


class LeanHTTP:
    """POSTs JSON to one http:// origin over pooled keep-alive connections.

    Raises:
        ConnectionError: the server could not be reached, or the connection failed after the request was written
            (the request is then not re-sent: the caller's retry policy decides).
        ValueError: the answer is not valid HTTP/1.1.
    """

    def __init__(self, base_url: str, *, headers: dict[str, str] | None = None, max_idle: int = 128) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"LeanHTTP serves plain http:// URLs, got {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.headers = {
            "host": parts.netloc,
            "content-type": "application/json",
            "accept": "application/json",
            **{k.lower(): v for k, v in (headers or {}).items()},
        }
        self.max_idle = max_idle
        self._idle: list[_Conn] = []

    async def _connect(self) -> _Conn:
        while self._idle:
            conn = self._idle.pop()
            if not conn.reader.at_eof() and not conn.writer.is_closing() and not _readable(conn.writer):
                return conn
            conn.writer.close()  # the server closed it while idle (keep-alive timeout): nothing was sent on it
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port, limit=2**24)
        except OSError as exc:
            raise ConnectionError(f"connection to {self.host}:{self.port} failed: {exc}") from None
        return _Conn(reader, writer)

    async def post(self, path: str, body: dict[str, Any]) -> HTTPResponse:
        payload = json.dumps(body, ensure_ascii=False).encode()
        head = "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
        request = (f"POST {self.prefix}{path} HTTP/1.1\r\n{head}content-length: {len(payload)}\r\n\r\n").encode()
        conn = await self._connect()
        conn.writer.write(request + payload)
        if conn.writer.is_closing():  # the first send() failed (reset, broken pipe): not a byte of it left here
            conn.writer.close()
            conn = await self._connect()
            conn.writer.write(request + payload)
            if conn.writer.is_closing():
                conn.writer.close()
                raise ConnectionError(f"connection to {self.host}:{self.port} failed: the server refused the request")
        try:
            response, keep = await self._read(conn.reader)
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as exc:
            conn.writer.close()  # the request was written: it may have reached the server, so it is not re-sent
            reason = str(exc) or type(exc).__name__
            raise ConnectionError(f"connection to {self.host}:{self.port} failed after sending: {reason}") from None
        except BaseException:
            conn.writer.close()  # cancelled or timed out mid-request: the connection is unusable
            raise
        if keep and len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            conn.writer.close()
        return response

    async def _read(self, reader: asyncio.StreamReader) -> tuple[HTTPResponse, bool]:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            raise ValueError(f"not an HTTP response: {lines[0][:80]!r}") from None
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                data = await reader.readexactly(size + 2)
                if size == 0:
                    break
                chunks.append(data[:-2])
            body = b"".join(chunks)
        else:
            body = await reader.read()
            return HTTPResponse(status, headers, body), False
        return HTTPResponse(status, headers, body), headers.get("connection", "").lower() != "close"

    async def aclose(self) -> None:
        while self._idle:
            self._idle.pop().writer.close()


def _readable(writer: asyncio.StreamWriter) -> bool:
    """Whether an idle keep-alive connection has something to read: only the server's FIN or RST, not yet seen by
    the event loop. One poll(2) with a zero timeout, as httpcore checks a pooled connection before reusing it."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))
