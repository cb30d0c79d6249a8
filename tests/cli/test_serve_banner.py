"""`simia serve`'s banner, from a real process: `--port 0` listens on a port the system picks and the banner names
that port, and the banner says what a world URL does to a client that reconnects for every call."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from pathlib import Path

import httpx2 as httpx
import pytest
from simia.sim import __version__, load_worlds

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "fixtures" / "mock_script.json"
MOCK = load_worlds([ROOT / "tool_specs"]).worlds["mock"]


async def banner(process: asyncio.subprocess.Process) -> list[str]:
    """The banner's lines, up to its last one (`auth: ...`)."""
    assert process.stdout is not None
    lines: list[str] = []
    while not lines or not lines[-1].startswith("  auth:"):
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert line, f"simia serve exited before its banner was printed: {lines}"
        lines.append(line.decode().rstrip("\n"))
    return lines


async def test_serve_on_port_0_listens_on_a_free_port_and_names_it_in_the_banner(tmp_path: Path) -> None:
    db = tmp_path / "simia.db"
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "simia.cli", "serve", "--worlds-dir", str(ROOT / "tool_specs"), "--world", "mock"),
        *("--backend", f"scripted:{SCRIPT}", "--db", str(db), "--port", "0"),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        lines = await banner(process)
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", lines[2])
        assert found is not None, lines
        port = int(found.group(1))
        base = f"http://127.0.0.1:{port}"
        assert port != 0 and lines == [
            f"simia {__version__} serving 1 world(s) with backend scripted:{SCRIPT}",
            f"  database: {db}",
            f"  mock             {len(MOCK.tools):>3} tools  {len(MOCK.tasks):>3} tasks  {base}/worlds/mock/mcp",
            f'  episodes: POST {base}/v1/episodes {{"world": ...}} -> mcp_url {base}/episodes/{{id}}/mcp',
            "  a world URL opens a new episode for each MCP session: a client that reconnects for every call "
            "(LlamaIndex's BasicMCPClient) starts over each time; give it an episode's mcp_url",
            f"  auth: none (local only); metrics: {base}/metrics",
        ]
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:  # the port it named is the one it serves
            health = await http.get("/healthz")
            created = await http.post("/v1/episodes", json={"world": "mock"})
        assert health.status_code == 200 and created.status_code == 201
        assert created.json()["mcp_url"] == f"{base}/episodes/{created.json()['id']}/mcp"
    finally:
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 60)
    assert code == 0  # drained and stopped on SIGTERM
