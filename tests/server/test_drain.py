"""SIGTERM drains a real `simia serve`: calls in flight finish and are acknowledged, new requests on the API and
the MCP URLs get 503 with the API's error body and Retry-After, and the process exits 0 within its bound."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from simia.server.inprocess import free_port
from simia.testing import FakeProvider
from simia.testing.mock_world import mock_world_answer
from simia.testing.processes import ServeProcess, serve_process

pytestmark = [pytest.mark.processes, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "drain-test", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def mcp_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A sessionless (2026-07-28) `tools/call`: one POST, one answer, as agents under load send them."""
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": META},
    }


def mcp_headers(name: str) -> dict[str, str]:
    return {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }


MCP_CALL = mcp_call("get_item", {"name": "milk"})
_MCP = mcp_headers("get_item")


def serve(db: Path, port: int, provider: FakeProvider, drain_timeout: float) -> ServeProcess:
    """`simia serve` on `db` simulating with `provider`; killed at the end of the block (the SIGTERM is the test's)."""
    return serve_process(
        *("--db", str(db), "--worlds-dir", str(ROOT / "tool_specs"), "--world", "mock", "--log-level", "warning"),
        *("--backend", "openai-compatible:fake", "--base-url", provider.base_url),
        *("--drain-timeout", str(drain_timeout)),
        port=port,
        grace=0,
    )


async def at_the_model(provider: FakeProvider, n: int) -> None:
    """Wait until `n` simulated calls are waiting on the (slow) model."""
    for _ in range(600):
        if len(provider.requests) >= n:
            return
        await asyncio.sleep(0.02)
    raise TimeoutError(f"{n} calls did not reach the model within 12 s")


async def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int, float]:
    """The exit code and how long the process took to exit (polled without blocking the event loop)."""
    start = time.monotonic()
    while proc.poll() is None:
        assert time.monotonic() - start < timeout, f"simia serve still running {timeout} s after SIGTERM"
        await asyncio.sleep(0.05)
    return proc.returncode, time.monotonic() - start


async def test_sigterm_lets_calls_in_flight_finish_refuses_new_ones_with_503_and_exits_0(tmp_path: Path) -> None:
    db, port = tmp_path / "simia.db", free_port()
    url = f"http://127.0.0.1:{port}"
    provider = FakeProvider(mock_world_answer, latency=1.5)  # every simulated call takes 1.5 s
    async with provider.running(), serve(db, port, provider, drain_timeout=20) as server:
        proc = server.process
        async with httpx.AsyncClient(base_url=url) as http:
            episodes = [(await http.post("/v1/episodes", json={"world": "mock"})).json() for _ in range(4)]

            async def call(episode: dict[str, Any], qty: int) -> dict[str, Any]:
                body = mcp_call("set_quantity", {"name": "milk", "qty": qty})
                response = await http.post(
                    episode["mcp_url"].removeprefix(url), json=body, headers=mcp_headers("set_quantity")
                )
                assert response.status_code == 200, response.text
                result: dict[str, Any] = response.json()["result"]
                return result

            in_flight = [asyncio.create_task(call(e, i + 1)) for i, e in enumerate(episodes)]
            await at_the_model(provider, len(episodes))
            assert not any(t.done() for t in in_flight)
            proc.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            refused = []
            for _ in range(200):  # the signal lands within a few ms; requests before it are answered
                refused = [
                    await http.post("/v1/episodes", json={"world": "mock"}),
                    await http.post(episodes[0]["mcp_url"].removeprefix(url), json=MCP_CALL, headers=_MCP),
                    await http.get("/healthz"),
                ]
                if refused[0].status_code == 503:
                    break
                assert refused[0].status_code == 201
                await asyncio.sleep(0.01)
            results = await asyncio.gather(*in_flight)
        code, _ = await wait_exit(proc, timeout=30)
        took = time.monotonic() - sent
    assert [r.status_code for r in refused] == [503, 503, 503]
    for response in refused:
        assert response.headers["retry-after"] == "5"
        error = response.json()["error"]
        assert set(error) == {"code", "message"} and error["code"] == "draining"
    assert all(not r["isError"] for r in results)  # acknowledged while draining ...
    acked = {(e["id"], r["_meta"]["simia/seq"]) for e, r in zip(episodes, results, strict=True)}
    with sqlite3.connect(db) as conn:  # ... and committed
        stored = {(e, s) for e, s in conn.execute("SELECT episode_id, seq FROM events")}
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert acked == stored
    assert code == 0
    assert took < 20  # drained as soon as the calls finished, not at the timeout
    print(f"drain: {len(acked)} calls in flight acknowledged, exit 0 {took:.1f} s after SIGTERM")


async def test_a_call_that_outlasts_the_drain_timeout_does_not_hold_the_exit(tmp_path: Path) -> None:
    db, port = tmp_path / "simia.db", free_port()
    url = f"http://127.0.0.1:{port}"
    provider = FakeProvider(mock_world_answer, latency=60)  # a model that hangs
    async with provider.running(), serve(db, port, provider, drain_timeout=1) as server:
        proc = server.process
        async with httpx.AsyncClient(base_url=url) as http:
            episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
            hung = asyncio.create_task(
                http.post(episode["mcp_url"].removeprefix(url), json=MCP_CALL, headers=_MCP, timeout=60)
            )
            await at_the_model(provider, 1)
            proc.send_signal(signal.SIGTERM)
            code, took = await wait_exit(proc, timeout=30)
            cut = await hung  # cut off at the bound, in the API's error shape
    assert (cut.status_code, cut.json()["error"]["code"]) == (503, "draining")
    assert "may have taken effect or not" in cut.json()["error"]["message"]
    assert code == 0
    assert took < 1 + 4  # --drain-timeout, then uvicorn's 1 s for what is left and closing the store
    print(f"drain: a hung call with --drain-timeout 1 answered 503, exit 0 {took:.1f} s after SIGTERM")
