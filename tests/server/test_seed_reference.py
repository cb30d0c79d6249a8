"""Simia-RL on imported seeds: an episode of an imported task sends the task's own seed conversation to the
simulator (in the request the fake provider receives), an episode without a task the world's shared examples;
the world listing a harness reads never carries the reference's calls and results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2 as httpx
from mcp import Client
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.importers import import_seeds

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"
RESULT = '"name": "Ines Varga"'  # a tool result of apigen.json's first seed (task apigen-1)


async def test_an_imported_tasks_episode_sends_its_seed_to_the_simulator(make_server: Any, tmp_path: Path) -> None:
    import_seeds([SEEDS / "apigen.json"], tmp_path / "worlds")
    systems: list[str] = []

    def answer(request: CompletionRequest) -> dict[str, Any]:
        systems.append(request.messages[0]["content"])
        return {"is_error": False, "output": {"member_id": "M-204", "name": "Ines Varga"}, "state_patch": []}

    backend = FunctionBackend(answer)
    async with (
        make_server(worlds_dir=tmp_path / "worlds", backend=backend) as server,
        httpx.AsyncClient(base_url=server.url) as http,
    ):
        listing = (await http.get("/v1/worlds")).text
        for task in ("apigen-1", None):
            body = {"world": "member-renew-2-tools", **({"task": task} if task else {})}
            episode = (await http.post("/v1/episodes", json=body)).json()
            async with Client(episode["mcp_url"]) as client:
                result = await client.call_tool("find_member", {"member_id": "M-204"})
            assert not result.is_error

    own, shared = systems
    assert "# Reference conversation" in own and "USER Hi, I'd like to renew the loan" in own
    assert RESULT in own and "style guide" not in own
    assert "# Reference calls and results (style guide)" in shared and "USER " not in shared
    assert RESULT not in listing  # the harness runs the agent: the reference's results stay on the server
