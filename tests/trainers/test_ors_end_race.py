"""The end of an ORS episode sees every call the server acknowledged: with 30 calls in flight and the terminal tool
sent while they run, the transcript the judge reads (which the server builds from the committed calls) holds
exactly the committed calls, so the verdict lists no mismatch of simia's own making. In-process: the main app and
the ORS listener on their own ports, the mock world, a simulator that takes a few milliseconds per call."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx2 as httpx
from simia.clients.prompt import agent_system_prompt
from simia.server import ServerSettings, build_server, serving
from simia.server.ors import OrsApp
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.judging import Judge
from simia.sim.storage import open_store
from simia.sim.world import load_worlds

ROOT = Path(__file__).resolve().parents[2]


def slow_reads(request: CompletionRequest) -> dict[str, Any]:
    """Every simulated call answers a read of milk (the mock world's answer shape), after a short wait."""
    return {"is_error": False, "output": {"name": "milk", "qty": 2, "unit": "l"}, "state_patch": []}


def events_of(text: str) -> dict[str, str]:
    return dict(re.findall(r"^event: (\w+)\ndata: (.*)$", text, flags=re.M))


async def test_the_terminal_tool_sent_while_calls_run_judges_a_transcript_of_every_committed_call(
    tmp_path: Path,
) -> None:
    worlds = load_worlds([ROOT / "tool_specs"]).worlds
    store = open_store(tmp_path / "simia.db")
    app = build_server(
        {"mock": worlds["mock"]}, FunctionBackend(slow_reads, latency=0.01), store, ServerSettings(), judge=Judge(None)
    )
    ors = OrsApp(app.service, app.settings, app.drain, system_prompt=agent_system_prompt, rewards=app.rewards)
    try:
        async with serving(app) as api_port, serving(ors) as ors_port:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ors_port}", timeout=60) as http:
                sid = events_of((await http.post("/create_session", json={})).text)["task_id"]
                created = await http.post("/create", json={"split": "train", "index": 0}, headers={"X-Session-ID": sid})
                assert created.status_code == 200, created.text
                headers = {"X-Session-ID": sid}
                first = await http.post("/mock/call", json={"name": "list_items", "input": {}}, headers=headers)
                episode = json.loads(events_of(first.text)["end"])["output"]["metadata"]["simia/episode"]
                read = {"name": "get_item", "input": {"name": "milk"}}
                calls = [asyncio.create_task(http.post("/mock/call", json=read, headers=headers)) for _ in range(30)]
                await asyncio.sleep(0.05)
                end = {"name": "end_episode", "input": {"message": "Done."}}
                ended = json.loads(events_of((await http.post("/mock/call", json=end, headers=headers)).text)["end"])
                answers = [json.loads(events_of(r.text)["end"]) for r in await asyncio.gather(*calls)]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}") as api:
                detail = (await api.get(f"/v1/episodes/{episode}")).json()
    finally:
        await store.close()
    assert ended["output"]["finished"] is True
    acknowledged = [a for a in answers if a["ok"] and "simia/seq" in a["output"]["metadata"]]
    refused = [a for a in answers if a not in acknowledged]
    assert len(acknowledged) + 1 == len(detail["events"])  # list_items, then every acknowledged read
    assert acknowledged and all("episode has ended" in json.dumps(a) for a in refused)
    claimed = [m for m in detail["transcript"] if m.get("tool_calls")]
    assert len(claimed) == len(detail["events"])
    assert detail["verdict"]["transcript_mismatches"] == []
