"""Real tools side by side: a world imported from a real MCP server routes chosen tools to it.

The counters fixture server runs over streamable HTTP as the real server; simia serves a world
imported from it with `get_counter` routed `real` and `increment` simulated, over real MCP/HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client
from simia.clients.api import SimiaClient
from simia.clients.mcp_import import read_server
from simia.server.inprocess import free_port
from simia.sim import load_world
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.errors import WorldError
from simia.sim.importers import world_from_listing
from simia.sim.world import write_world
from simia.testing import parse_simulator_prompt
from simia.training.export import export

COUNTERS = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "counters.py"


@contextlib.asynccontextmanager
async def counters_over_http() -> AsyncIterator[str]:
    """The counters server as a subprocess on a free port; yields its MCP URL once it listens."""
    port = free_port()
    command = [sys.executable, str(COUNTERS), "--http", str(port)]
    proc = await asyncio.create_subprocess_exec(*command, stderr=asyncio.subprocess.DEVNULL)
    try:
        with anyio.fail_after(60):
            while not _listens(port):
                assert proc.returncode is None, "the counters server exited"
                await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        await proc.wait()


def _listens(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


async def imported_world(base: Path, url: str, routes: dict[str, dict[str, str]], real_url: str | None = None) -> Path:
    """The counters world as `simia import mcp URL` writes it (real_server included), with `routes` added to
    its tools.json (and the real server moved to `real_url`, when given) and a state."""
    imported = world_from_listing(await read_server(url), name="counters")
    if real_url is not None:
        imported.real_server = {"url": real_url}
    folder = base / "counters"
    write_world(folder, imported.files())
    tools = json.loads((folder / "tools.json").read_text())
    (folder / "tools.json").write_text(json.dumps([{**t, **routes.get(t["name"], {})} for t in tools]))
    (folder / "state.json").write_text(json.dumps({"counters": {"apples": 3, "pears": 7}}))
    assert yaml.safe_load((folder / "world.yaml").read_text())["real_server"] == {"url": real_url or url}
    return base


def simulated(request: CompletionRequest | dict[str, Any]) -> dict[str, Any]:
    """A faithful simulator of the counters world (a simulated read says `"simulated": true` apart)."""
    messages = request.messages if isinstance(request, CompletionRequest) else request["messages"]
    tool, arguments, state = parse_simulator_prompt(str(messages[-1]["content"]))
    name = arguments["name"]
    value = state["counters"][name] + (arguments.get("by", 1) if tool == "increment" else 0)
    patch = [{"op": "replace", "path": f"/counters/{name}", "value": value}] if tool == "increment" else []
    return {"is_error": False, "error_code": None, "message": "ok", "output": {"name": name, "value": value},
            "state_patch": patch}  # fmt: skip


async def call(url: str, tool: str, **arguments: Any) -> Any:
    async with Client(url) as client:
        return await client.call_tool(tool, arguments)


@pytest.mark.processes  # the counters server
async def test_a_read_only_tool_routed_real_is_answered_by_the_real_server_and_writes_are_simulated(
    make_server: Any, tmp_path: Path
) -> None:
    async with counters_over_http() as real:
        worlds = await imported_world(tmp_path / "worlds", real, {"get_counter": {"route": "real"}})
        await call(real, "increment", name="pears", by=10)  # the real server's own state: pears 17
        async with (
            make_server(backend=FunctionBackend(simulated), worlds_dir=worlds) as server,
            SimiaClient(server.url) as api,
        ):
            episode = await api.create("counters")
            pears = await call(episode.mcp_url, "get_counter", name="pears")
            added = await call(episode.mcp_url, "increment", name="apples", by=2)
            apples = await call(episode.mcp_url, "get_counter", name="apples")
            kiwis = await call(episode.mcp_url, "get_counter", name="kiwis")
            detail = await api.get(episode.id)
            await api.end(episode.id)
        rows = tmp_path / "rl.jsonl"
        worlds_by_name = {"counters": load_world(worlds / "counters")}
        await export(tmp_path / "simia.db", "rl", rows, worlds_by_name, include_masked=True)  # unjudged: asked for
    assert pears.structured_content == {"name": "pears", "value": 17}  # the real answer, not the state's 7
    assert added.structured_content == {"name": "apples", "value": 5}  # simulated: the state changes
    assert apples.structured_content == {"name": "apples", "value": 3}  # real: the real server saw no write
    assert kiwis.is_error and kiwis.content[0].text.endswith("not_found: there is no counter named kiwis")
    assert [(e.tool, e.source, e.error_code) for e in detail.events] == [
        ("get_counter", "real", None), ("increment", "simulated", None), ("get_counter", "real", None),
        ("get_counter", "real", "not_found"),
    ]  # fmt: skip
    assert detail.events[0].detail == f"answered by the real server {real}" and detail.events[0].state_patch == []
    assert detail.state == {"counters": {"apples": 5, "pears": 7}}
    row = json.loads(rows.read_text().splitlines()[0])
    assert row["sources"] == {"real": 3, "simulated": 1}


@pytest.mark.processes
async def test_a_real_server_that_is_down_falls_back_to_the_simulation_or_is_an_infra_error(
    make_server: Any, tmp_path: Path
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    async with counters_over_http() as real:
        routes = {"get_counter": {"route": "real", "fallback": "simulate"}, "increment": {"route": "real"}}
        worlds = await imported_world(tmp_path / "worlds", real, routes, real_url=dead)
    async with (
        make_server(backend=FunctionBackend(simulated), worlds_dir=worlds) as server,
        SimiaClient(server.url) as api,
    ):
        episode = await api.create("counters")
        read = await call(episode.mcp_url, "get_counter", name="apples")
        write = await call(episode.mcp_url, "increment", name="apples")
        detail = await api.get(episode.id)
    assert read.structured_content == {"name": "apples", "value": 3}
    assert write.is_error and write.content[0].text == "The tool's server did not answer. Try again later."
    assert (write.meta or {})["simia/error_kind"] == "infra"
    first, second = detail.events
    assert (first.source, second.source, second.error_code) == ("simulated", "real", "real_server_failed")
    assert first.detail.startswith(f"the real server failed ({dead}: ") and "simulated instead" in first.detail
    assert second.detail.startswith(f"{dead}: ")
    assert detail.state == detail.initial_state


def test_a_tool_routed_real_needs_the_worlds_real_server(tmp_path: Path) -> None:
    folder = tmp_path / "w"
    folder.mkdir()
    tool = {"name": "t", "inputSchema": {"type": "object"}, "route": "real"}
    (folder / "world.yaml").write_text(yaml.safe_dump({"name": "w", "tools": [tool]}))
    with pytest.raises(WorldError) as caught:
        load_world(folder)
    assert "a tool has route: real but the world names no real server" in str(caught.value)
