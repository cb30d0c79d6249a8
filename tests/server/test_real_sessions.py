"""Real sessions: an episode's routed calls go through one session with the real server, kept until it ends.

The kv fixture server (a real MCP SDK server over stdio, or streamable HTTP) keeps its values in memory and
needs a credential (`KV_TOKEN`). A world imported from it with `simia import mcp` routes every tool `real`;
simia serves it over real HTTP and the tests call it with the MCP SDK client, checking the real processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import Client
from simia.cli import main
from simia.clients.api import SimiaClient
from simia.server.inprocess import free_port
from simia.server.settings import ServerSettings
from simia.testing.processes import stop_process, wait_answering

KV = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "kv.py"
pytestmark = pytest.mark.processes  # the kv server


async def import_kv(worlds: Path, *target: str, credential: list[str]) -> Path:
    """`simia import mcp` of the kv server into `worlds/kv`, every tool routed `real`; returns `worlds`."""
    folder = worlds / "kv"
    command = ["import", "mcp", *credential, "--name", "kv", "--out", str(folder), *target]
    assert await asyncio.to_thread(main, command) == 0
    tools = json.loads((folder / "tools.json").read_text())
    (folder / "tools.json").write_text(json.dumps([{**tool, "route": "real"} for tool in tools]))
    return worlds


async def stdio_kv(worlds: Path) -> Path:
    """The kv server over stdio imported with `--env 'KV_TOKEN=${KV_TEST_TOKEN}'`: served, it reads KV_TEST_TOKEN."""
    return await import_kv(worlds, "--", sys.executable, str(KV), credential=["--env", "KV_TOKEN=${KV_TEST_TOKEN}"])


async def call(url: str, tool: str, **arguments: Any) -> Any:
    async with Client(url) as client:
        return await client.call_tool(tool, arguments)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_import_writes_where_the_credential_comes_from_and_says_what_to_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await import_kv(tmp_path, "--", sys.executable, str(KV), credential=["--env", "KV_TOKEN=s3cret"])
    world = (tmp_path / "kv" / "world.yaml").read_text()
    assert yaml.safe_load(world)["real_server"] == {
        "command": [sys.executable, str(KV)],
        "env": {"KV_TOKEN": "${KV_TOKEN}"},
    }
    assert "s3cret" not in world and "s3cret" not in (tmp_path / "kv" / "import_report.json").read_text()
    assert capsys.readouterr().out.splitlines()[1] == (
        "  note     real_server: world.yaml reads KV_TOKEN from the environment (its headers/env name them, never "
        "the values given here): set it where simia serve runs"
    )


async def test_an_episode_keeps_its_real_servers_state_and_two_episodes_have_two_processes(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KV_TEST_TOKEN", "t0k")  # what world.yaml's `${KV_TEST_TOKEN}` reads, at call time
    worlds = await stdio_kv(tmp_path / "worlds")
    async with make_server(worlds_dir=worlds) as server, SimiaClient(server.url) as api:
        first, second = await api.create("kv"), await api.create("kv")
        wrote = await call(first.mcp_url, "put", key="a", value="1")
        read = await call(first.mcp_url, "get", key="a")
        elsewhere = await call(second.mcp_url, "get", key="a")
        one = (await call(first.mcp_url, "whoami")).structured_content
        two = (await call(second.mcp_url, "whoami")).structured_content
        fork = await api.fork(first.id)
        forked = await call(fork.mcp_url, "get", key="a")
        detail = await api.get(first.id)
        assert len(server.app.service.real) == 3  # three episodes, three sessions
        await api.end(first.id)
        assert (alive(one["pid"]), alive(two["pid"])) == (False, True)  # ending an episode stops its process
        assert len(server.app.service.real) == 2
    assert not alive(two["pid"])  # the server stopped: every session closed
    assert (wrote.structured_content, read.structured_content) == ({"key": "a", "value": "1"},) * 2
    assert elsewhere.is_error and elsewhere.content[0].text.endswith("not_found: there is no key a")
    assert forked.is_error  # a fork starts a fresh session: the real server's state is not forked
    assert one["pid"] != two["pid"] and one["token"] == two["token"] == "t0k"
    command = f"{sys.executable} {KV}"
    assert [(e.tool, e.source, e.error_code, e.detail) for e in detail.events] == [
        ("put", "real", None, f"answered by the real server {command}"),
        ("get", "real", None, f"answered by the real server {command}"),
        ("whoami", "real", None, f"answered by the real server {command}"),
    ]
    assert detail.state == detail.initial_state == {}


async def test_a_real_server_that_died_is_started_again_on_the_next_call_which_says_so(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KV_TEST_TOKEN", "t0k")
    worlds = await stdio_kv(tmp_path / "w")
    async with make_server(worlds_dir=worlds) as server, SimiaClient(server.url) as api:
        episode = await api.create("kv")
        await call(episode.mcp_url, "put", key="a", value="1")
        crashed = await call(episode.mcp_url, "crash")
        after = await call(episode.mcp_url, "get", key="a")
        detail = await api.get(episode.id)
    assert crashed.is_error and (crashed.meta or {})["simia/error_kind"] == "infra"
    assert after.is_error and after.content[0].text.endswith("not_found: there is no key a")  # a new process
    command = f"{sys.executable} {KV}"
    assert [(e.tool, e.error_code, e.detail) for e in detail.events[1:]] == [
        ("crash", "real_server_failed", f"{command}: its session ended (MCPError: Connection closed)"),
        ("get", "not_found", f"answered by the real server {command} in a new session (the previous one ended: "
                             "MCPError: Connection closed)"),
    ]  # fmt: skip


async def test_a_variable_the_environment_lacks_is_a_real_server_failure_naming_it(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KV_TEST_TOKEN", "t0k")
    worlds = await stdio_kv(tmp_path / "w")
    monkeypatch.delenv("KV_TEST_TOKEN")
    async with make_server(worlds_dir=worlds) as server, SimiaClient(server.url) as api:
        episode = await api.create("kv")
        failed = await call(episode.mcp_url, "get", key="a")
        monkeypatch.setenv("KV_TEST_TOKEN", "later")  # read at each session's start, not when the server starts
        token = (await call(episode.mcp_url, "whoami")).structured_content["token"]
        detail = await api.get(episode.id)
    assert failed.is_error and (failed.meta or {})["simia/error_kind"] == "infra"
    assert detail.events[0].detail == (
        f"{sys.executable} {KV}: the real server's headers/env read KV_TEST_TOKEN from the environment, which does "
        "not set it: run `export KV_TEST_TOKEN=...` first (in the shell that starts simia)"
    )
    assert token == "later"


async def test_a_url_server_gets_its_header_from_the_environment(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    command = [sys.executable, str(KV), "--http", str(port)]
    proc = subprocess.Popen(command, env={**os.environ, "KV_TOKEN": "h3ader"})  # noqa: ASYNC220 (returns at once)
    try:
        await wait_answering(url, proc, what="the kv server")
        worlds = await import_kv(tmp_path / "w", url, credential=["--header", "Authorization: Bearer h3ader"])
        real_server = yaml.safe_load((worlds / "kv" / "world.yaml").read_text())["real_server"]
        monkeypatch.setenv("AUTHORIZATION", "h3ader")
        async with make_server(worlds_dir=worlds) as server, SimiaClient(server.url) as api:
            episode = await api.create("kv")
            await call(episode.mcp_url, "put", key="b", value="2")
            read = await call(episode.mcp_url, "get", key="b")
            monkeypatch.setenv("AUTHORIZATION", "wrong")
            refused = await call((await api.create("kv")).mcp_url, "get", key="b")
            detail = await api.get(episode.id)
    finally:
        stop_process(proc)
    assert real_server == {"url": url, "headers": {"Authorization": "Bearer ${AUTHORIZATION}"}}
    assert read.structured_content == {"key": "b", "value": "2"}
    assert [e.source for e in detail.events] == ["real", "real"]
    assert refused.is_error and (refused.meta or {})["simia/error_kind"] == "infra"


async def test_past_the_cap_of_real_sessions_a_routed_call_fails_until_an_episode_ends(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KV_TEST_TOKEN", "t0k")
    worlds = await stdio_kv(tmp_path / "w")
    async with (
        make_server(ServerSettings(max_real_sessions=1), worlds_dir=worlds) as server,
        SimiaClient(server.url) as api,
    ):
        first, second = await api.create("kv"), await api.create("kv")
        await call(first.mcp_url, "put", key="a", value="1")
        refused = await call(second.mcp_url, "put", key="a", value="2")
        await api.end(first.id)
        accepted = await call(second.mcp_url, "put", key="a", value="3")  # other arguments: not a retry
        detail = await api.get(second.id)
    assert refused.is_error and not accepted.is_error
    assert [(e.error_code, e.detail) for e in detail.events] == [
        ("real_server_failed", "1 real sessions are open, the cap: end finished episodes "
                               "(POST /v1/episodes/{id}/end) or raise simia serve --max-real-sessions"),
        (None, f"answered by the real server {sys.executable} {KV}"),
    ]  # fmt: skip


async def test_the_sweep_closes_the_session_of_an_episode_another_replica_closed(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KV_TEST_TOKEN", "t0k")
    worlds = await stdio_kv(tmp_path / "w")
    async with make_server(worlds_dir=worlds) as server, SimiaClient(server.url) as api:
        kept, closed = await api.create("kv"), await api.create("kv")
        pids = [(await call(e.mcp_url, "whoami")).structured_content["pid"] for e in (kept, closed)]
        await server.store.set_status(closed.id, "abandoned", reason="swept by another replica")
        assert await server.app.service.sweep_idle() == []  # nothing idle here
        assert [alive(pid) for pid in pids] == [True, False]
        assert server.app.service.real.episodes() == [kept.id]
