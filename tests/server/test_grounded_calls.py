"""A declared call through the real server over MCP: answered from the episode's state with no model call, its
event marked `source: "state"` in `GET /v1/episodes/{id}`, beside a model-answered call of the same episode (on a
copy of the retail world whose transfer declares no grounding: the shipped world declares every tool)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx2 as httpx
import yaml
from mcp import Client
from mcp.types import TextContent
from simia.sim import load_world
from simia.sim.backends import ScriptedBackend

ROOT = Path(__file__).resolve().parents[2]
ORDER = load_world(ROOT / "tool_specs" / "retail").initial_state["orders"]["#W1002"]
NO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0, "cache_write_tokens": 0, "cost_usd": None,
            "calls": 0}  # fmt: skip


def undeclared_transfer(tmp_path: Path) -> Path:
    """A worlds folder holding a copy of the retail world whose `transfer_to_human_agent` the model answers."""
    folder = tmp_path / "worlds" / "retail"
    shutil.copytree(ROOT / "tool_specs" / "retail", folder)
    spec = yaml.safe_load((folder / "world.yaml").read_text())
    for tool in spec["tools"]:
        if tool["name"] == "transfer_to_human_agent":
            del tool["grounding"]
    (folder / "world.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return folder.parent


async def test_a_declared_call_over_mcp_is_answered_from_the_state_and_its_event_says_so(
    tmp_path: Path, serve_on: Any
) -> None:
    transfer = {
        "is_error": False,
        "error_code": None,
        "message": "",
        "output": {"transferred": True},
        "state_patch": [],
    }
    backend = ScriptedBackend([transfer])  # one model answer: for the undeclared transfer only
    async with (
        serve_on(tmp_path / "simia.db")(backend=backend, worlds_dir=undeclared_transfer(tmp_path)) as server,
        httpx.AsyncClient(base_url=server.url) as http,
    ):
        episode = (await http.post("/v1/episodes", json={"world": "retail"})).json()
        async with Client(episode["mcp_url"]) as client:
            read = await client.call_tool("get_order_details", {"order_id": "#W1002"})
            refused = await client.call_tool(
                "cancel_pending_order", {"order_id": "#W1002", "reason": "no longer needed"}
            )
            await client.call_tool("transfer_to_human_agent", {"summary": "price adjustment"})
        detail = (await http.get(f"/v1/episodes/{episode['id']}")).json()
    texts = [r.content[0].text if isinstance(r.content[0], TextContent) else None for r in (read, refused)]
    assert (read.is_error, read.structured_content, json.loads(texts[0] or "")) == (False, ORDER, ORDER)
    assert (refused.is_error, texts[1]) == (True, "Error (order_not_pending): the order's status is not pending")
    assert [(e["tool"], e["source"], e["model"], e["usage"], e["error_code"]) for e in detail["events"]] == [
        ("get_order_details", "state", "", NO_USAGE, None),
        ("cancel_pending_order", "state", "", NO_USAGE, "order_not_pending"),
        ("transfer_to_human_agent", "simulated", "scripted", detail["events"][2]["usage"], None),
    ]
    assert detail["events"][0]["output"] == ORDER and len(backend.requests) == 1
