"""Reading real MCP servers (subprocesses) for import: every page, serverInfo, instructions, probes, failures."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from simia.clients.mcp_import import read_server
from simia.server.inprocess import free_port
from simia.sim import load_world
from simia.sim.errors import ImportSourceError
from simia.sim.importers import ProbeCall
from simia.testing.processes import serve_process

pytestmark = [pytest.mark.processes, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
ODD = [sys.executable, str(ROOT / "tests" / "fixtures" / "mcp_servers" / "odd_server.py")]
SCRIPT = ROOT / "tests" / "fixtures" / "mock_script.json"
ENV = {k: v for k, v in os.environ.items() if k == "PYTHONPATH"}  # the stdio client passes a minimal environment


def simia_serve(*flags: str) -> list[str]:
    return [sys.executable, "-m", "simia.cli", "serve", "--worlds-dir", str(ROOT / "tool_specs"), *flags]


async def test_every_page_of_tools_list_is_read_with_server_info_and_instructions() -> None:
    listing = await read_server([*ODD, "paged"], timeout=60)
    assert [t["name"] for t in listing.tools] == ["lookup", "bad name", "restock", "lookup"]
    assert (listing.name, listing.title, listing.version) == ("odd-shop", "Odd Shop", "3.1.4")
    assert listing.instructions == "Stock levels are whole numbers. Never sell what is not in stock."
    assert (
        listing.tools[0]["inputSchema"]["$schema"] == "http://json-schema.org/draft-04/schema#"
    )  # as the server sent it


async def test_probes_run_read_only_tools_and_writes_only_when_allowed() -> None:
    restock = [ProbeCall("restock", {"sku": "A1", "qty": 2}, 1), ProbeCall("lookup", {"sku": "A1"}, 2)]
    with pytest.raises(ImportSourceError, match="probe file:1: 'restock' is not marked read-only"):
        await read_server([*ODD, "paged"], probe=restock, timeout=60)
    listing = await read_server([*ODD, "paged"], probe=restock, allow_writes=True, timeout=60)
    assert [(p.text, p.is_error, p.structured) for p in listing.probes] == [
        ("A1: 5 in stock", False, {"sku": "A1", "stock": 5}),
        ("A1: 5 in stock", False, {"sku": "A1", "stock": 5}),
    ]
    missing = await read_server([*ODD, "paged"], probe=[ProbeCall("lookup", {"sku": "Z9"}, 1)], timeout=60)
    assert [(p.text, p.is_error) for p in missing.probes] == [("no product Z9", True)]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ([*ODD, "fail"], "the server answered with an error: the tool registry is offline"),
        ("http://127.0.0.1:{port}/mcp", "cannot reach http://127.0.0.1:"),
        (["simia-no-such-command"], "cannot start 'simia-no-such-command': No such file or directory"),
        (
            [sys.executable, "-c", "import sys; print('bad config', file=sys.stderr); sys.exit(3)"],
            "(server said: bad config)",
        ),
    ],
)
async def test_a_server_that_cannot_be_read_is_one_clear_line(target: str | list[str], message: str) -> None:
    if isinstance(target, str):
        target = target.format(port=free_port())
    with pytest.raises(ImportSourceError) as raised:
        await read_server(target, timeout=60)
    assert message in str(raised.value) and "\n" not in str(raised.value)


async def test_a_silent_server_times_out_with_the_flag_to_raise_it() -> None:
    with pytest.raises(ImportSourceError, match=r"no answer within 2 s \(pass --timeout to wait longer\)"):
        await read_server([sys.executable, "-c", "import sys; sys.stdin.read()"], timeout=2)


async def test_simias_own_stdio_server_lists_its_worlds_tools_as_they_are_in_the_world() -> None:
    command = simia_serve(
        "--transport", "stdio", "--world", "mock", "--backend", f"scripted:{SCRIPT}", "--db", ":memory:"
    )
    listing = await read_server(command, env=ENV, timeout=120)
    assert listing.tools == [tool.mcp_dict() for tool in load_world(ROOT / "tool_specs" / "mock").tools]
    assert listing.instructions == "Simulated tools of the mock world."


@pytest.fixture
def simia_http(tmp_path: Path) -> Iterator[str]:
    """`simia serve` over streamable HTTP, as a real process that wants a bearer token."""
    args = ["--worlds-dir", str(ROOT / "tool_specs"), "--world", "mock", "--backend", f"scripted:{SCRIPT}"]
    db, log = str(tmp_path / "serve.db"), tmp_path / "serve.log"
    with serve_process(*args, "--token", "s3cret", "--db", db, log=log) as server:
        yield f"{server.url}/worlds/mock/mcp"


async def test_simias_own_http_server_lists_a_worlds_tools_over_streamable_http(simia_http: str) -> None:
    with pytest.raises(ImportSourceError) as refused:
        await read_server(simia_http, timeout=60)
    assert str(refused.value) == (
        f"{simia_http}: the server refused the request: HTTP 401 Unauthorized "
        "(check the URL, and --header for credentials)"
    )
    listing = await read_server(simia_http, headers={"Authorization": "Bearer s3cret"}, timeout=60)
    assert listing.tools == [tool.mcp_dict() for tool in load_world(ROOT / "tool_specs" / "mock").tools]
    assert listing.name == "simia-world"
