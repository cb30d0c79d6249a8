"""The fake provider as a user runs it: `python -m simia.testing.fake_provider` starts without warnings, and its
`schema` answers let `simia serve` simulate a world imported from a real MCP server, offline."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx2 as httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from simia.sim import load_world
from simia.sim.schema import validate_instance
from simia.testing import FakeProvider, schema_answer
from simia.testing.processes import serve_process

pytestmark = pytest.mark.processes
ROOT = Path(__file__).resolve().parents[2]
COUNTERS = [sys.executable, str(ROOT / "tests" / "fixtures" / "servers" / "counters.py")]


def test_running_the_fake_provider_as_a_module_prints_no_warning() -> None:
    # --lean with --chaos is refused at once: the run ends after the module is imported and its parser ran
    argv = [sys.executable, "-m", "simia.testing.fake_provider", "--port", "1", "--lean", "--chaos", "0.5"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert (run.returncode, run.stderr.splitlines()[-1]) == (
        2,
        "fake_provider.py: error: --lean serves answers only: drop --chaos",
    )
    assert "Warning" not in run.stderr, run.stderr


async def test_an_imported_world_is_served_and_called_offline_with_schema_valid_answers(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "simia.cli", "import", "mcp", "--out", str(tmp_path / "counters"), "--", *COUNTERS]
    imported = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
    world = load_world(tmp_path / "counters")
    async with FakeProvider(schema_answer(seed=0)).running() as fake:
        args = ("--worlds-dir", str(tmp_path), "--world", world.name, "--db", str(tmp_path / "simia.db"))
        backend = ("--backend", "openai-compatible:fake", "--base-url", fake.base_url)
        async with serve_process(*args, *backend) as server, httpx.AsyncClient(base_url=server.url) as http:
            episode = (await http.post("/v1/episodes", json={"world": world.name})).json()
            async with Client(streamable_http_client(episode["mcp_url"], http_client=http)) as client:
                results = {
                    t.name: await client.call_tool(t.name, {"name": "apples"})
                    for t in world.tools
                    if t.name != "increment"
                }
                results["increment"] = await client.call_tool("increment", {"name": "apples", "by": 2})
    assert sorted(results) == sorted(t.name for t in world.tools) and len(fake.requests) == len(results)
    for name, result in results.items():
        tool = world.tool(name)
        assert tool is not None and tool.output_schema is not None
        assert (result.is_error, validate_instance(tool.output_schema, result.structured_content)) == (False, []), name
        assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
