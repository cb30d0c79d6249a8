"""`simia fidelity` against a real server that is not ours: the npm reference server
(`@modelcontextprotocol/server-everything` on the pinned Node 22, stdio), imported with `simia import mcp`
and compared, all through the CLI as subprocesses, with a fake simulator model that answers as the server
does (full agreement) and one that gets echo wrong (echo's values disagree, the other tools still agree)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from simia.testing import FakeProvider, parse_simulator_prompt

pytestmark = [pytest.mark.processes, pytest.mark.slow]
CALLS = [
    {"tool": "echo", "arguments": {"message": "hi"}},
    {"tool": "get-sum", "arguments": {"a": 2, "b": 3}},
    {"tool": "echo", "arguments": {"message": "hi"}},
    {"tool": "get-sum", "arguments": {"a": 1.5, "b": 2.25}},
    {"tool": "get-structured-content", "arguments": {"location": "Chicago"}},
]
WEATHER = {"Chicago": {"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82}}


def simulator(echo_prefix: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A simulator model (OpenAI request bodies) that answers as the reference server does: its text
    answers as `{"text": ...}` (what fidelity makes of a text-only real answer), its structured ones as
    they are; echo's text starts with `echo_prefix` (the server's is "Echo: ")."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        tool, args, _ = parse_simulator_prompt(str(body["messages"][-1]["content"]))
        if tool == "echo":
            output: dict[str, Any] = {"text": f"{echo_prefix}{args['message']}"}
        elif tool == "get-sum":
            output = {"text": f"The sum of {args['a']} and {args['b']} is {args['a'] + args['b']}."}
        else:
            output = WEATHER[args["location"]]
        return {"is_error": False, "error_code": None, "message": "ok", "output": output, "state_patch": []}

    return answer


def simia(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "simia.cli", *args], capture_output=True, text=True, timeout=180)


async def fidelity(world: Path, calls: Path, report: Path, everything: list[str], echo_prefix: str) -> Any:
    """`simia fidelity` of `calls` on the real server and on the fake simulator: its exit code, output and
    JSON report."""
    async with FakeProvider(simulator(echo_prefix)).running() as fake:
        model = ("--backend", "openai-compatible:fake", "--base-url", fake.base_url)
        done = await asyncio.to_thread(
            simia, "fidelity", str(world), "--calls", str(calls), *model, "--report", str(report),
            "--", *everything, "stdio",
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines(), json.loads(report.read_text())


async def test_the_npm_reference_server_and_its_simulation_agree_and_a_wrong_echo_shows(
    everything: list[str], tmp_path: Path
) -> None:
    world = tmp_path / "everything"
    imported = await asyncio.to_thread(simia, "import", "mcp", "--out", str(world), "--", *everything, "stdio")
    assert imported.returncode == 0, imported.stderr
    tools = {t["name"]: t for t in json.loads((world / "tools.json").read_text())}
    assert tools["echo"]["inputSchema"]["required"] == ["message"]
    assert tools["get-sum"]["inputSchema"]["required"] == ["a", "b"]
    calls = tmp_path / "calls.jsonl"
    calls.write_text("".join(json.dumps(c) + "\n" for c in CALLS))

    lines, good = await fidelity(world, calls, tmp_path / "good.json", everything, "Echo: ")
    assert good["stopped"] is None and good["agreement"] == 1.0
    assert [c["real"] for c in good["calls"]] == [
        {"text": "Echo: hi"}, {"text": "The sum of 2 and 3 is 5."}, {"text": "Echo: hi"},
        {"text": "The sum of 1.5 and 2.25 is 3.75."}, WEATHER["Chicago"],
    ]  # fmt: skip  # the real server's own answers
    assert all(c["simulated"] == c["real"] and not c["real_error"] for c in good["calls"])
    assert good["tools"]["echo"] == {
        "calls": 2, "outcome": 1.0, "schema_valid": None, "structure": 1.0, "values": 1.0, "agreement": 1.0,
        "null": 0.0, "constant": 0.0,
    }  # fmt: skip
    assert good["tools"]["get-sum"]["values"] == 1.0
    assert good["tools"]["get-structured-content"]["schema_valid"] == 1.0  # checked against its outputSchema
    assert good["repeated_read"] == {"consistent": 1, "checked": 1, "found": 1}
    # every tool is read-only (no --allow-writes needed) and the server never errs: no constant error scores
    assert "agreement 1.00 over 5 calls; null simulator 0.00, constant simulator 0.00 (always not_found)" in lines

    lines, bad = await fidelity(world, calls, tmp_path / "bad.json", everything, "You said: ")
    assert [c["simulated"] for c in bad["calls"] if c["tool"] == "echo"] == [{"text": "You said: hi"}] * 2
    assert bad["tools"]["echo"] == {
        "calls": 2, "outcome": 1.0, "schema_valid": None, "structure": 1.0, "values": 0.0, "agreement": 0.0,
        "null": 0.0, "constant": 0.0,
    }  # fmt: skip  # same shape and outcome, wrong value
    assert bad["tools"]["get-sum"]["agreement"] == bad["tools"]["get-structured-content"]["agreement"] == 1.0
    assert bad["agreement"] == 0.6
    assert "agreement 0.60 over 5 calls; null simulator 0.00, constant simulator 0.00 (always not_found)" in lines
