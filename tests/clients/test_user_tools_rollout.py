"""A rollout in a dual-control world (`tests/fixtures/worlds/phone`) against a real server over HTTP and MCP: the user
simulator is given the user's own tools from the episode's `user_mcp_url`, calls one when the agent asks, answers
from its result, and the task's assertion passes only because both sides acted: the agent resumed the line, the
user turned airplane mode off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2 as httpx
from simia.clients.rollout import RolloutConfig, rollout
from simia.sim import load_world
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.judging import Judge
from simia.sim.wire import TaskInfo

WORLDS = Path(__file__).resolve().parents[1] / "fixtures" / "worlds"
PHONE = load_world(WORLDS / "phone")
TASK = PHONE.task("no_service")
assert TASK is not None
INFO = TaskInfo(id=TASK.id, instruction=TASK.instruction, user_hidden=TASK.user_hidden)


def agent(request: CompletionRequest) -> dict[str, Any]:
    """Resumes the line, then asks the user to turn airplane mode off, then says goodbye."""
    last = str(request.messages[-1]["content"])
    if last.startswith("Result of") and "resume_line" in last:
        return {"message": "Your line is active again. Please turn airplane mode off.", "tool_calls": []}
    if "Status Bar: Service" in last:
        return {"message": "Great, all fixed.", "tool_calls": []}
    return {"message": "", "tool_calls": [{"name": "resume_line", "arguments": {"line_id": "L1"}}]}


def user(request: CompletionRequest) -> dict[str, Any]:
    """Calls its own toggle when the agent asks for it, and tells the agent what the phone said."""
    last = str(request.messages[-1]["content"])
    if "greets you" in last:
        return {"message": "My phone has no service.", "done": False}
    if "airplane mode off" in last:
        assert "toggle_airplane_mode" in str(request.schema), "the user's turn may call its own tools"
        return {"message": "", "done": False, "tool_calls": [{"name": "toggle_airplane_mode", "arguments": {}}]}
    if last.startswith("Result of toggle_airplane_mode"):
        return {"message": last.split("\n", 1)[1], "done": False}
    return {"message": "Thanks!", "done": True}


async def test_the_user_simulator_calls_the_users_own_tool_and_both_sides_meet_the_assertion(
    tmp_path: Path, serve_on: Any
) -> None:
    async with serve_on(tmp_path / "simia.db")(worlds_dir=WORLDS, judge=Judge(None)) as server:
        config = RolloutConfig(server=server.url, world=PHONE, tasks=[INFO], out=tmp_path / "out")
        [result] = (await rollout(config, FunctionBackend(agent), FunctionBackend(user))).results
        async with httpx.AsyncClient(base_url=server.url) as http:
            detail = (await http.get(f"/v1/episodes/{result.episode_id}")).json()
    assert [(e["tool"], e["side"]) for e in detail["events"]] == [
        ("resume_line", "agent"),
        ("toggle_airplane_mode", "user"),
    ]
    assert result.reward == 1
    said = [m["content"] for m in result.transcript if m["role"] == "user"]
    assert said[:2] == ["My phone has no service.", "Status Bar: Service"]
    assert not any("toggle_airplane_mode" in json.dumps(m) for m in result.transcript)  # the user's calls are theirs
