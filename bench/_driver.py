"""A lean asyncio HTTP/1.1 driver for load tests (httpx-based clients saturate 2 cores before the server does).

One keep-alive connection per simulated agent; MCP 2026-07-28 requests (no session),
JSON or SSE answers. Also: processes to benchmark (simia, bare SDK servers, the fake
provider) and their memory.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simia.server import free_port as free_port  # the benches import it from here
from simia.testing.processes import wait_answering

ROOT = Path(__file__).resolve().parent.parent
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "simia-bench", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


class Connection:
    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port, limit=2**22)
        assert self.reader is not None
        payload = b"" if body is None else json.dumps(body).encode()
        lines = [
            f"{method} {path} HTTP/1.1",
            f"Host: 127.0.0.1:{self.port}",
            f"Content-Length: {len(payload)}",
            "Content-Type: application/json",
            "Accept: application/json, text/event-stream",
        ]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        fields = {
            k.strip().lower(): v.strip()
            for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:] if line)
        }
        if b"content-length" in fields:
            data = await self.reader.readexactly(int(fields[b"content-length"]))
        elif fields.get(b"transfer-encoding") == b"chunked":
            chunks = []
            while True:
                size = int((await self.reader.readline()).strip(), 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                chunks.append(chunk[:-2])
            data = b"".join(chunks)
        else:
            data = await self.reader.read()
        if fields.get(b"connection") == b"close":
            await self.close()
        return status, data

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def rpc_result(status: int, data: bytes) -> dict[str, Any]:
    """The JSON-RPC result in a JSON or SSE answer; raises on HTTP or RPC errors."""
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {data[:200]!r}")
    text = data.decode()
    if text.lstrip().startswith("{"):
        message = json.loads(text)
    else:
        message = next(
            json.loads(line[5:])
            for line in text.splitlines()
            if line.startswith("data:") and line[5:].strip().startswith("{") and '"id"' in line
        )
    if "error" in message:
        raise RuntimeError(f"RPC error: {message['error']}")
    result: dict[str, Any] = message["result"]
    return result


async def call_tool(
    conn: Connection, path: str, name: str, arguments: dict[str, Any], request_id: int
) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": META},
    }
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name}
    return rpc_result(*await conn.request("POST", path, body, headers))


@dataclass
class Load:
    """Outcome of a load run."""

    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall: float = 0.0

    @property
    def calls(self) -> int:
        return len(self.latencies)

    @property
    def throughput(self) -> float:
        return self.calls / self.wall if self.wall else 0.0

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def drive(port: int, paths: list[str], calls_each: int, tool: str, arguments: dict[str, Any]) -> Load:
    """One agent per path, all at once; each makes `calls_each` sequential calls on its own connection."""
    load = Load()

    async def agent(path: str) -> None:
        conn = Connection(port)
        try:
            for i in range(calls_each):
                start = time.perf_counter()
                try:
                    result = await call_tool(conn, path, tool, arguments, i + 1)
                    if result.get("isError"):
                        load.errors.append(str(result.get("content"))[:200])
                except (RuntimeError, OSError, asyncio.IncompleteReadError) as exc:
                    load.errors.append(str(exc)[:200])
                    await conn.close()
                    continue
                load.latencies.append(time.perf_counter() - start)
        finally:
            await conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(agent(p) for p in paths))
    load.wall = time.perf_counter() - start
    return load


async def create_episodes(port: int, n: int, world: str = "mock") -> list[str]:
    conns = [Connection(port) for _ in range(min(n, 32))]
    ids: list[str] = []

    async def worker(conn: Connection, count: int) -> None:
        for _ in range(count):
            status, data = await conn.request("POST", "/v1/episodes", {"world": world})
            if status != 201:
                raise RuntimeError(f"creating an episode failed: HTTP {status} {data[:200]!r}")
            ids.append(json.loads(data)["id"])

    share = [n // len(conns) + (1 if i < n % len(conns) else 0) for i in range(len(conns))]
    await asyncio.gather(*(worker(c, k) for c, k in zip(conns, share, strict=True)))
    for conn in conns:
        await conn.close()
    return ids


def merged(loads: list[Load]) -> Load:
    """Several runs as one: all latencies and errors, the wall times added."""
    out = Load()
    for load in loads:
        out.latencies += load.latencies
        out.errors += load.errors
        out.wall += load.wall
    return out


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Process:
    """A benchmarked server process, stopped on exit."""

    def __init__(
        self, args: list[str], port: int, env: dict[str, str] | None = None, cpus: set[int] | None = None
    ) -> None:
        self.port = port
        self.proc = subprocess.Popen(
            args,
            env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )

    async def ready(self, path: str = "/healthz") -> Process:
        """Wait until `path` answers (under 500); raises if the process exits first or after 30 s."""
        await wait_answering(f"http://127.0.0.1:{self.port}{path}", self.proc, what=" ".join(map(str, self.proc.args)))
        return self

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


PY = sys.executable
