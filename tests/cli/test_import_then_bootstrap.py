"""From a real MCP server to a judged rollout: `simia import mcp`, `simia bootstrap` (drafts from the fake
provider), `simia validate`, `simia rollout` on a drafted task."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from simia.testing import FakeProvider

pytestmark = [pytest.mark.processes, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, str(ROOT / "tests" / "fixtures" / "servers" / "counters.py")]
STATE = {"counters": {"apples": 3, "pears": 7}}
SCHEMA = {"type": "object", "properties": {"counters": {"type": "object", "additionalProperties": {"type": "integer"}}}}
TASK = {
    "id": "more_pears",
    "instruction": "Add 3 to the pears counter.",
    "user_hidden": "You are counting a delivery.",
    "rubric": "The agent increments pears by 3.",
    "expected_state": {"/counters/pears": 10},
}


def drafter(body: dict[str, Any]) -> dict[str, Any]:
    name = body.get("response_format", {}).get("json_schema", {}).get("name", "")
    if name == "world_state":
        return {"state_schema": SCHEMA, "state": STATE}
    return {"tasks": [TASK]}


async def simia(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "simia.cli", *args]
    return await asyncio.to_thread(
        subprocess.run, command, cwd=cwd, capture_output=True, text=True, timeout=180, check=False
    )


async def test_a_real_servers_tools_become_a_world_an_agent_is_judged_in(tmp_path: Path) -> None:
    imported = await simia("import", "mcp", "--name", "counters", "--", *SERVER, cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    folder = tmp_path / "tool_specs" / "counters"
    assert not (folder / "state.json").exists()
    async with FakeProvider(drafter).running() as fake:
        model = ("--backend", "openai-compatible:drafter", "--base-url", fake.base_url)
        drafted = await simia("bootstrap", str(folder), "--tasks", "1", *model, cwd=tmp_path)
    assert drafted.returncode == 0, drafted.stdout
    assert drafted.stdout.startswith("world counters: state drafted; tasks written 1")
    assert (await simia("validate", str(folder), cwd=tmp_path)).returncode == 0
    call = {"name": "increment", "arguments": {"name": "pears", "by": 3}}
    (tmp_path / "agent.json").write_text(json.dumps([
        {"match": "Result of", "data": {"message": "Done: pears is at 10.", "tool_calls": []}},
        {"data": {"message": "", "tool_calls": [call]}},
    ]))  # fmt: skip
    (tmp_path / "user.json").write_text(json.dumps([{"data": {"message": TASK["instruction"], "done": True}}]))
    patch = [{"op": "replace", "path": "/counters/pears", "value": 10}]
    answer = {"is_error": False, "error_code": None, "message": "ok", "output": {"name": "pears", "value": 10},
              "state_patch": patch}  # fmt: skip
    verdict = {"criteria": [], "reasoning": "pears incremented by 3", "reward": 1}
    (tmp_path / "sim.json").write_text(json.dumps([
        {"match": "Call: increment", "data": answer}, {"match": "# Rubric", "data": verdict},
    ]))  # fmt: skip
    rolled = await simia(
        "rollout", "--world", "counters", "--worlds-dir", "tool_specs", "--tasks", "more_pears",
        "--agent", "scripted:agent.json", "--user", "scripted:user.json", "--sim-backend", "scripted:sim.json",
        "--out", "runs", cwd=tmp_path,
    )  # fmt: skip
    assert rolled.returncode == 0, rolled.stderr
    [result] = [json.loads(line) for line in (tmp_path / "runs" / "results.jsonl").read_text().splitlines()]
    assert (result["status"], result["verdict_status"], result["reward"], result["tool_calls"]) == (
        "judged",
        "ok",
        1,
        1,
    )
