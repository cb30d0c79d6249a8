"""A client that hangs up in the middle of its body is a normal end of a request: one INFO line, no ERROR and no
traceback in the server's log (300 such hang-ups used to log about 17,700 lines), and the server goes on serving."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import urlsplit

import httpx2 as httpx
import pytest


async def test_a_body_cut_short_by_the_client_logs_one_info_line_and_no_error(
    make_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with make_server() as server:
        uvicorn = logging.getLogger("uvicorn")  # it does not propagate to the root logger caplog listens on
        uvicorn.addHandler(caplog.handler)
        address = urlsplit(server.url)
        for _ in range(5):
            _, writer = await asyncio.open_connection(address.hostname, address.port)
            head = f"POST /v1/episodes HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json\r\n"
            writer.write(f"{head}Content-Length: 1000\r\n\r\n".encode() + b'{"world": "mo')
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.close()
            await writer.wait_closed()
        await asyncio.sleep(0.2)
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.post("/v1/episodes", json={"world": "mock"})).status_code == 201
        uvicorn.removeHandler(caplog.handler)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
    gone = [r for r in caplog.records if "disconnected before sending its whole body" in r.getMessage()]
    assert len(gone) == 5 and all(r.levelno == logging.INFO and r.exc_info is None for r in gone)
