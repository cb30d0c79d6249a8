"""Dual control over real MCP and HTTP (tau2-bench's telecom, in small: `tests/fixtures/worlds/phone`): the agent's
URL lists the agent's tools only, the episode's `user_mcp_url` the user's own; a user call is an event with
`side: user`; the world's trigger keeps the phone in step with the line after the agent's calls; the task's
assertion, computed on the final state, is in the verdict, failing for an episode that did nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2 as httpx
from mcp import Client
from mcp.types import TextContent
from simia.sim.judging import Judge

PHONE = Path(__file__).resolve().parents[1] / "fixtures" / "worlds"


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def test_the_user_calls_their_own_tools_at_the_user_url_and_the_trigger_keeps_the_phone_in_step(
    tmp_path: Path, serve_on: Any
) -> None:
    async with (
        serve_on(tmp_path / "simia.db")(worlds_dir=PHONE, judge=Judge(None)) as server,
        httpx.AsyncClient(base_url=server.url) as http,
    ):
        episode = (await http.post("/v1/episodes", json={"world": "phone", "task": "no_service"})).json()
        assert episode["user_mcp_url"] == f"{server.url}/episodes/{episode['id']}/user/mcp"
        async with Client(episode["mcp_url"]) as agent, Client(episode["user_mcp_url"]) as user:
            assert [t.name for t in (await agent.list_tools()).tools] == ["suspend_line", "resume_line"]
            assert [t.name for t in (await user.list_tools()).tools] == ["check_status_bar", "toggle_airplane_mode"]
            wrong_side = await agent.call_tool("toggle_airplane_mode", {})
            before = text(await user.call_tool("check_status_bar", {}))
            toggled = text(await user.call_tool("toggle_airplane_mode", {}))
            resumed = text(await agent.call_tool("resume_line", {"line_id": "L1"}))
            after = text(await user.call_tool("check_status_bar", {}))
        ended = (await http.post(f"/v1/episodes/{episode['id']}/end", json={})).json()
        detail = (await http.get(f"/v1/episodes/{episode['id']}")).json()
    assert wrong_side.is_error and "Unknown tool 'toggle_airplane_mode'" in text(wrong_side)
    assert (before, toggled, resumed, after) == (
        "Status Bar: No Service",
        "Airplane Mode is now OFF.\nStatus Bar: No Service",  # the line is still suspended
        "Line L1 resumed",
        "Status Bar: Service",  # the trigger brought the line's status to the phone
    )
    assert [(e["tool"], e["side"], e["source"]) for e in detail["events"]] == [
        ("toggle_airplane_mode", "agent", "simulated"),  # refused before any model: not the agent's tool
        ("check_status_bar", "user", "state"),
        ("toggle_airplane_mode", "user", "state"),
        ("resume_line", "agent", "state"),
        ("check_status_bar", "user", "state"),
    ]
    assert detail["events"][3]["state_patch"] == [
        {"op": "replace", "path": "/lines/L1/status", "value": "active"},
        {"op": "replace", "path": "/phone/line_active", "value": True},  # the trigger's, in the same event
    ]
    (check,) = ended["verdict"]["rule_checks"]
    assert (check["pointer"], check["expected"], check["passed"]) == ("assertions[0]", "the phone has service", True)


async def test_an_episode_that_does_nothing_fails_the_assertion_and_a_world_without_user_tools_has_no_user_url(
    tmp_path: Path, serve_on: Any
) -> None:
    async with (
        serve_on(tmp_path / "simia.db")(worlds_dir=PHONE, judge=Judge(None)) as server,
        httpx.AsyncClient(base_url=server.url) as http,
    ):
        episode = (await http.post("/v1/episodes", json={"world": "phone", "task": "no_service"})).json()
        ended = (await http.post(f"/v1/episodes/{episode['id']}/end", json={})).json()
        other = (await http.post("/v1/episodes", json={"world": "conformance"})).json()
    (check,) = ended["verdict"]["rule_checks"]
    assert (check["passed"], ended["verdict"]["reward"]) == (False, 0)
    assert other["user_mcp_url"] is None
