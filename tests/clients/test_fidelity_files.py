"""`simia fidelity` against a stateful real server over a real folder (tests/fixtures/servers/files.py):
a write and a later read of the file it names are checked as a pair, a repeated read is held to what the
real server answers, writes run there only with `--allow-writes`, and `--header "Name: value"` reaches a
server over HTTP that needs it."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import Client, StdioServerParameters
from simia.clients.agent import Agent
from simia.clients.fidelity import Check, Pair, load_calls, run_agent_fidelity, run_fidelity
from simia.server.inprocess import serving
from simia.sim import load_world
from simia.sim.backends import CompletionRequest, FunctionBackend, ScriptedBackend
from simia.sim.world import Task
from simia.testing import FakeProvider, parse_simulator_prompt

pytestmark = pytest.mark.processes  # the real server is a subprocess (stdio) or served over real HTTP
ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "tests" / "fixtures" / "servers" / "files.py"
CALLS = [
    {"tool": "read_text_file", "arguments": {"path": "notes.txt"}},  # 0: not there yet (not_found)
    {"tool": "write_file", "arguments": {"path": "notes.txt", "content": "hello world"}},  # 1
    {"tool": "read_text_file", "arguments": {"path": "notes.txt"}},  # 2: reads what 1 wrote
    {"tool": "read_text_file", "arguments": {"path": "notes.txt"}},  # 3: repeats 2
    {"tool": "write_file", "arguments": {"path": "other.txt", "content": "elsewhere"}},  # 4: another file
    {"tool": "read_text_file", "arguments": {"path": "notes.txt"}},  # 5: a write since 3, none of notes.txt
]
Answer = Callable[[str, dict[str, Any], dict[str, Any]], dict[str, Any]]


def server(folder: Path) -> list[str]:
    folder.mkdir(exist_ok=True)
    return [sys.executable, str(FILES), str(folder)]


async def files_world(base: Path) -> Path:
    """The files server's tools as `simia import mcp` saves them, an empty folder as the state, CALLS."""
    command = server(base / "listing")
    async with Client(StdioServerParameters(command=command[0], args=command[1:])) as client:
        tools = [t.model_dump(by_alias=True, exclude_none=True) for t in (await client.list_tools()).tools]
    folder = base / "files"
    folder.mkdir()
    (folder / "world.yaml").write_text(yaml.safe_dump({"name": "files", "title": "Files"}))
    (folder / "tools.json").write_text(json.dumps(tools))
    (folder / "state.json").write_text(json.dumps({"files": {}}))
    (base / "calls.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CALLS))
    return folder


def ok(output: dict[str, Any], patch: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"is_error": False, "error_code": None, "message": "ok", "output": output, "state_patch": patch or []}


BROKEN = {"is_error": False, "error_code": None, "message": "ok", "output": "no object", "state_patch": []}  # infra


def read(_tool: str, args: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    if args["path"] not in state["files"]:
        return {"is_error": True, "error_code": "not_found", "message": f"there is no file {args['path']}",
                "output": None, "state_patch": []}  # fmt: skip
    return ok({"text": state["files"][args["path"]]})


def write(_tool: str, args: dict[str, Any], _state: dict[str, Any]) -> dict[str, Any]:
    patch = [{"op": "add", "path": f"/files/{args['path']}", "value": args["content"]}]
    return ok({"text": f"Successfully wrote to {args['path']}"}, patch)


def stale_read(tool: str, args: dict[str, Any], _state: dict[str, Any]) -> dict[str, Any]:
    return read(tool, args, {"files": {}})  # answers from the initial state, whatever was written


def broken(_tool: str, _args: dict[str, Any], _state: dict[str, Any]) -> dict[str, Any]:
    return BROKEN


def files_simulator(on_read: Answer, on_write: Answer) -> Callable[[CompletionRequest | dict[str, Any]], Any]:
    """A simulator model of the files tools (a CompletionRequest, or an OpenAI request body)."""

    def answer(request: CompletionRequest | dict[str, Any]) -> dict[str, Any]:
        messages = request.messages if isinstance(request, CompletionRequest) else request["messages"]
        tool, args, state = parse_simulator_prompt(str(messages[-1]["content"]))
        return (on_read if tool == "read_text_file" else on_write)(tool, args, state)

    return answer


LACKS = "the simulation errs where the real server answers, or answers where it errs"


@pytest.mark.parametrize(
    ("on_read", "on_write", "expected"),
    [
        pytest.param(read, write, [
            Pair("read_after_write", 1, 2, True, True, 'the read shows "hello world"'),
            Pair("repeated_read", 2, 3, True, True, "the simulated answers agree as the real ones do"),
        ], id="faithful"),
        pytest.param(stale_read, write, [
            Pair("read_after_write", 1, 2, True, False, "the simulated read failed with not_found"),
            Pair("repeated_read", 2, 3, True, False, LACKS),  # not_found twice where the file is there
        ], id="stale reads"),
        pytest.param(broken, write, [
            Pair("read_after_write", 1, 2, False, False, "the simulated read failed (infra)"),
            Pair("repeated_read", 2, 3, False, False, "the simulation failed (infra) on a read"),
        ], id="reads fail"),
        # the simulated write failed, the real one wrote: reads 0 and 2 are no repeated read
        pytest.param(read, broken, [
            Pair("read_after_write", 1, 2, True, False, "the simulated read failed with not_found"),
            Pair("repeated_read", 2, 3, True, False, LACKS),
        ], id="writes fail"),
    ],
)  # fmt: skip
async def test_a_write_and_a_read_of_the_file_it_names_are_checked_as_a_pair(
    tmp_path: Path, on_read: Answer, on_write: Answer, expected: list[Pair]
) -> None:
    world = load_world(await files_world(tmp_path))
    calls = load_calls(tmp_path / "calls.jsonl", world)
    simulator = FunctionBackend(files_simulator(on_read, on_write))
    report = await run_fidelity(world, server(tmp_path / "real"), calls, simulator, allow_writes=True)
    assert [c.real for c in report.calls[1:3]] == [{"text": "Successfully wrote to notes.txt"}, {"text": "hello world"}]
    assert report.pairs == expected
    checked = int(expected[0].checked)
    assert report.read_after_write == Check(int(expected[0].consistent), checked, 1)
    assert report.repeated_read == Check(int(expected[1].consistent), checked, 1)
    lines = report.render().splitlines()
    if checked:
        consistent = "1/1" if expected[0].consistent else "0/1"
        assert lines[-2:] == [
            f"repeated read: {consistent} consistent (1 pair found, 1 checked)",
            f"read after write: {consistent} consistent (1 pair found, 1 checked)",
        ]
    else:
        assert lines[-2:] == [
            "repeated read: 1 pair found, none could be checked (see the report's pairs)",
            "read after write: 1 pair found, none could be checked (see the report's pairs)",
        ]
    assert report.as_dict()["pairs"][0] == {
        "kind": "read_after_write", "first": 1, "second": 2, "checked": expected[0].checked,
        "consistent": expected[0].consistent, "why": expected[0].why,
    }  # fmt: skip


async def test_writes_are_refused_before_anything_runs_unless_allowed(tmp_path: Path) -> None:
    world = load_world(await files_world(tmp_path))
    calls = load_calls(tmp_path / "calls.jsonl", world)
    real = tmp_path / "real"
    simulator = FunctionBackend(files_simulator(read, write))
    message = (
        "{} writes (write_file: not annotated readOnlyHint), which would change the real server's data:"
        " pass --allow-writes to run them there, or leave them out"
    )
    with pytest.raises(ValueError) as caught:
        await run_fidelity(world, server(real), calls, simulator)
    assert str(caught.value) == message.format("the calls include")
    task = Task(id="note", instruction="Write a note.")
    with pytest.raises(ValueError) as caught:
        await run_agent_fidelity(world, server(real), Agent(ScriptedBackend([])), task, simulator)
    assert str(caught.value) == message.format("the agent may call")
    assert list(real.iterdir()) == []  # the real folder was never touched
    reads_only = await run_fidelity(world, server(real), calls[:1], simulator)
    assert reads_only.agreement() == 1.0 and reads_only.calls[0].real_code == "not_found"


def simia(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "simia.cli", *args], capture_output=True, text=True, timeout=180)


@pytest.mark.slow
async def test_import_and_fidelity_send_a_name_colon_value_header_to_a_server_over_http(tmp_path: Path) -> None:
    """One `--header` parser for `simia import mcp` and `simia fidelity`; the server answers 401 without it."""
    spec = importlib.util.spec_from_file_location("files_server", FILES)
    assert spec and spec.loader
    files = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(files)
    real = tmp_path / "real"
    real.mkdir()
    files.ROOT.append(real)
    header = ("--header", "Authorization: Bearer s3cret")
    world, calls = tmp_path / "files", tmp_path / "calls.jsonl"
    calls.write_text("".join(json.dumps(c) + "\n" for c in CALLS))
    async with (
        serving(files._bearer(files.app.streamable_http_app(), "s3cret")) as port,
        FakeProvider(files_simulator(read, write)).running() as fake,
    ):
        url = f"http://127.0.0.1:{port}/mcp"
        imported = await asyncio.to_thread(simia, "import", "mcp", url, *header, "--out", str(world))
        assert imported.returncode == 0, imported.stderr
        (world / "state.json").write_text(json.dumps({"files": {}}))
        fidelity = ("fidelity", str(world), "--real", url, "--calls", str(calls), "--backend", "openai-compatible:sim",
                    "--base-url", fake.base_url)  # fmt: skip
        refused = await asyncio.to_thread(simia, *fidelity, *header)
        untouched = sorted(p.name for p in real.iterdir())
        done = await asyncio.to_thread(simia, *fidelity, *header, "--allow-writes")
        no_colon = await asyncio.to_thread(simia, *fidelity, "--header", "Authorization Bearer s3cret")
        over_stdio = await asyncio.to_thread(simia, *fidelity[:2], *fidelity[4:], *header, "--", *server(real))
        no_colon_import = await asyncio.to_thread(
            simia, "import", "mcp", url, "--header", "Authorization Bearer s3cret", "--out", str(tmp_path / "x")
        )
    assert refused.returncode == 2 and untouched == []
    assert refused.stderr.strip() == (
        "error: the calls include writes (write_file: not annotated readOnlyHint), which would change the real"
        " server's data: pass --allow-writes to run them there, or leave them out"
    )
    assert done.returncode == 0, done.stderr
    assert (real / "notes.txt").read_text() == "hello world" and (real / "other.txt").read_text() == "elsewhere"
    assert "agreement 1.00 over 6 calls; null simulator 0.00, constant simulator 0.17 (always not_found)" in (
        done.stdout.splitlines()
    )
    assert over_stdio.returncode == 2
    assert over_stdio.stderr.strip() == "error: --header is for --real URL; a command (stdio) gets no HTTP headers"
    bad = (
        "argument --header: expected NAME:VALUE, got 'Authorization Bearer s3cret' (e.g. 'Authorization: Bearer TOKEN')"
    )
    for failed in (no_colon, no_colon_import):
        assert failed.returncode == 2 and failed.stderr.splitlines()[-1].endswith(bad), failed.stderr
        assert "Traceback" not in failed.stderr
