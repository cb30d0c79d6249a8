"""`simia import mcp` against real servers run as subprocesses: the npm reference server (Node 22, stdio and
streamable HTTP) and simia's own `serve` (stdio and HTTP). Imported worlds validate and are served with the
same schemas; probes become examples; bad input is one line, exit 2, and no folder."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client
from simia.cli import main
from simia.server.inprocess import free_port

pytestmark = [pytest.mark.processes, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
ODD = [sys.executable, str(ROOT / "tests" / "fixtures" / "mcp_servers" / "odd_server.py")]
SCRIPT = ROOT / "tests" / "fixtures" / "mock_script.json"
EVERYTHING_TOOLS = [
    "echo",
    "get-annotated-message",
    "get-env",
    "get-resource-links",
    "get-resource-reference",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "gzip-file-as-resource",
    "toggle-simulated-logging",
    "toggle-subscriber-updates",
    "trigger-long-running-operation",
    "simulate-research-query",
]


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {log.read_text()[-500:]}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port}: {log.read_text()[-500:]}")


@contextlib.contextmanager
def process(command: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A server subprocess, terminated (by its own pid) when the test is done."""
    with log.open("w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=out, env=env)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def cli(*args: str) -> int:
    """`simia ARGS...` from an async test (the import command runs its own event loop)."""
    return await anyio.to_thread.run_sync(main, list(args))


async def served_tools(url: str) -> list[dict[str, Any]]:
    async with Client(url) as client:
        return [tool.model_dump(by_alias=True, exclude_none=True) for tool in (await client.list_tools()).tools]


def imported_tools(folder: Path) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in tool.items() if k != "errors"} for tool in json.loads((folder / "tools.json").read_text())
    ]


def simia_serve(*flags: str) -> list[str]:
    return [sys.executable, "-m", "simia.cli", "serve", "--worlds-dir", str(ROOT / "tool_specs"), "--world", "mock",
            "--backend", f"scripted:{SCRIPT}", *flags]  # fmt: skip


PYTHONPATH = [f"--env=PYTHONPATH={os.environ['PYTHONPATH']}"] if "PYTHONPATH" in os.environ else []


async def test_the_npm_reference_server_over_stdio_becomes_a_world_that_simia_serves_with_the_same_schemas(
    everything: list[str], tmp_path: Path, make_server: Callable[..., Any], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "worlds" / "everything-reference-server"  # the world is named after its folder
    assert await cli("import", "mcp", "--out", str(out), "--", *everything, "stdio") == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}: world 'everything-reference-server', 13 tool(s)")
    header = yaml.safe_load((out / "world.yaml").read_text())
    assert header == {
        "name": "everything-reference-server",
        "title": "Everything Reference Server",
        "description": "Tools imported from the MCP server Everything Reference Server.",
        "version": "2.0.0",
        "real_server": {"command": [*everything, "stdio"]},  # where tools routed `real` would go
    }
    assert (out / "policy.md").read_text().startswith("# Everything Server")
    tools = imported_tools(out)
    assert [t["name"] for t in tools] == EVERYTHING_TOOLS
    assert all("$schema" not in t["inputSchema"] for t in tools)  # draft-07 upgraded to MCP's 2020-12
    assert await cli("validate", str(out)) == 0
    async with make_server(worlds_dir=tmp_path / "worlds") as running:
        assert await served_tools(f"{running.url}/worlds/everything-reference-server/mcp") == tools


def test_the_npm_reference_server_over_streamable_http_gives_the_same_world(
    everything: list[str], tmp_path: Path
) -> None:
    port = free_port()
    with process([*everything, "streamableHttp"], tmp_path / "node.log", {**os.environ, "PORT": str(port)}) as proc:
        wait_for_port(port, proc, tmp_path / "node.log")
        url = f"http://127.0.0.1:{port}/mcp"
        assert (
            main(["import", "mcp", url, "--header", "X-Trace: import", "--name", "ev", "--out", str(tmp_path / "h")])
            == 0
        )
    assert main(["import", "mcp", "--name", "ev", "--out", str(tmp_path / "s"), "--", *everything, "stdio"]) == 0
    assert imported_tools(tmp_path / "h") == imported_tools(tmp_path / "s")


def test_probe_calls_on_the_real_server_become_reference_trajectories(
    everything: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = tmp_path / "calls.jsonl"
    calls.write_text(
        '{"tool": "get-sum", "arguments": {"a": 2, "b": 3}}\n'
        '{"tool": "echo", "arguments": {"message": "hi"}, "trajectory": "greet", "user": "Say hi"}\n'
    )
    out = tmp_path / "w"
    assert main(["import", "mcp", "--probe", str(calls), "--out", str(out), "--", *everything, "stdio"]) == 0
    assert sorted(p.name for p in (out / "examples").iterdir()) == ["greet.json", "probe_001_get-sum.json"]
    greet = json.loads((out / "examples" / "greet.json").read_text())["messages"]
    assert greet[0] == {"role": "user", "content": "Say hi"}
    assert greet[2] == {"role": "tool", "tool_call_id": "call_2", "content": "Echo: hi"}
    assert f"wrote {out}: world 'w', 13 tool(s), 2 example(s)" in capsys.readouterr().out
    assert main(["validate", str(out)]) == 0

    calls.write_text('{"tool": "toggle-simulated-logging", "arguments": {}}\n')
    assert main(["import", "mcp", "--probe", str(calls), "--out", str(tmp_path / "x"), "--", *everything, "stdio"]) == 2
    assert "is not marked read-only (annotations.readOnlyHint); pass --allow-writes" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    args = ["--probe", str(calls), "--allow-writes", "--out", str(tmp_path / "x")]
    assert main(["import", "mcp", *args, "--", *everything, "stdio"]) == 0


def test_simias_own_server_over_stdio_and_http_gives_back_the_worlds_tools(tmp_path: Path) -> None:
    mock = yaml.safe_load((ROOT / "tool_specs" / "mock" / "world.yaml").read_text())["tools"]
    expected = [{k: v for k, v in tool.items() if k != "errors"} for tool in mock]
    stdio = simia_serve("--transport", "stdio", "--db", str(tmp_path / "stdio.db"))
    assert main(["import", "mcp", *PYTHONPATH, "--name", "again", "--out", str(tmp_path / "a"), "--", *stdio]) == 0
    assert imported_tools(tmp_path / "a") == expected
    assert (tmp_path / "a" / "policy.md").read_text() == "Simulated tools of the mock world.\n"
    port = free_port()
    with process(
        [*simia_serve("--port", str(port), "--db", str(tmp_path / "http.db"))], tmp_path / "serve.log"
    ) as proc:
        wait_for_port(port, proc, tmp_path / "serve.log")
        url = f"http://127.0.0.1:{port}/worlds/mock/mcp"
        assert main(["import", "mcp", url, "--out", str(tmp_path / "b")]) == 0
    assert imported_tools(tmp_path / "b") == expected
    assert main(["validate", str(tmp_path / "a"), str(tmp_path / "b")]) == 0


def test_tools_simia_cannot_serve_are_skipped_with_the_offending_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", "mcp", "--out", str(tmp_path / "odd"), "--", *ODD, "paged"]) == 0
    assert capsys.readouterr().out.splitlines()[:3] == [
        f"wrote {tmp_path / 'odd'}: world 'odd', 2 tool(s) (2 skipped, 2 changed)",
        "  skipped  tool 'bad name': not a valid MCP tool name: use 1-128 of A-Z a-z 0-9 _ - . (e.g. 'bad_name')",
        "  skipped  tool 'lookup': the server lists this name twice; the first is kept",
    ]


def test_a_line_a_server_prints_on_stdout_is_one_warning_not_a_traceback(tmp_path: Path) -> None:
    """The MCP SDK logs a traceback for it (a pydantic dump of the line); the import goes on either way."""
    command = [sys.executable, "-m", "simia.cli", "import", "mcp", "--out", str(tmp_path / "odd"), "--", *ODD, "noisy"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "the MCP server wrote a line on stdout that is not JSON-RPC (skipped): a stdio server logs to stderr"
    ]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (["http://127.0.0.1:{port}/mcp"], "error: cannot reach http://127.0.0.1:"),
        (["--", *ODD, "fail"], "the server answered with an error: the tool registry is offline"),
        (["--", "simia-no-such-command"], "error: cannot start 'simia-no-such-command'"),
        (["http://127.0.0.1:1/mcp", "--env", "A=B"], "error: --env is for a server started as a command"),
        (["--probe", "missing.jsonl", "--", *ODD, "paged"], "error: no probe file at 'missing.jsonl'"),
    ],
)
def test_a_server_that_cannot_be_imported_is_one_line_exit_2_and_no_folder(
    target: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = [part.format(port=free_port()) for part in target]
    out = tmp_path / "worlds" / "w"
    assert main(["import", "mcp", "--out", str(out), "--timeout", "30", *target]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "worlds").exists()
