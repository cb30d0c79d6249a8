"""`simia serve --db` records seeded episodes; `simia serve --backend replay:DB` replays them with no model.

Real processes: a recording server simulates with a model (a fake provider answering with a tag that no
other answer has), then a second server, given only the recorded database, answers the same calls on
episodes with the same seeds. Every tool result, event and final state must come back identical.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from mcp import Client
from simia.testing import FakeProvider, mock_world_answer
from simia.testing.processes import serve_process

pytestmark = [pytest.mark.processes, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]

# (task, seed) of each episode and the calls made on it, in order: reads before and after writes (answers depend
# on the state), an item that is not there (an error answer) and invalid arguments (refused before any model)
EPISODES: list[tuple[str | None, int, list[tuple[str, dict[str, Any]]]]] = [
    (
        "restock_milk",
        11,
        [
            ("get_item", {"name": "milk"}),
            ("set_quantity", {"name": "milk", "qty": 4}),
            ("get_item", {"name": "milk"}),
            ("get_item", {"name": "banana"}),
            ("set_quantity", {"name": "milk", "qty": "lots"}),
            ("list_items", {}),
        ],
    ),
    (
        None,
        12,
        [
            ("set_quantity", {"name": "apple", "qty": 9}),
            ("get_item", {"name": "apple"}),
            ("set_quantity", {"name": "rice", "qty": 0}),
            ("list_items", {}),
        ],
    ),
]
EVENT_FIELDS = ("seq", "tool", "arguments", "output", "text", "is_error", "error_code", "error_kind", "state_patch")


def tagged_answer(body: dict[str, Any]) -> dict[str, Any]:
    """A correct simulator answer carrying a random tag: a replayed answer can only have come from the recording."""
    data = mock_world_answer(body)
    tag = secrets.token_hex(6)
    if data["output"] is not None:
        data["output"] = {**data["output"], "tag": tag}
    else:
        data["message"] += f" (tag {tag})"
    return data


@contextlib.asynccontextmanager
async def simia_serve(db: Path | str, *backend: str, log: Path | None = None) -> AsyncIterator[str]:
    """`python -m simia.cli serve` on a free port until the block ends; yields its URL once it is healthy."""
    log = log or Path(db).with_suffix(".log")
    args = ["--db", str(db), "--world", "mock", "--log-level", "warning", *backend]
    async with serve_process(*args, log=log, timeout=30) as server:
        yield server.url


async def play(url: str, task: str | None, seed: int, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One episode with `calls`: each MCP result (without the episode id), the events and the final state."""
    async with httpx.AsyncClient() as http:
        body = {"world": "mock", "seed": seed, **({"task": task} if task else {})}
        episode = (await http.post(f"{url}/v1/episodes", json=body)).json()
    results = []
    async with Client(episode["mcp_url"]) as client:
        for name, arguments in calls:
            result = (await client.call_tool(name, arguments)).model_dump(mode="json", by_alias=True)
            result["_meta"].pop("simia/episode")
            results.append(result)
    async with httpx.AsyncClient() as http:
        stored = (await http.get(f"{url}/v1/episodes/{episode['id']}")).json()
    events = [{k: e[k] for k in EVENT_FIELDS} for e in stored["events"]]
    return {"results": results, "events": events, "state": stored["state"]}


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
async def test_a_seeded_recording_replays_identically_without_a_model(
    tmp_path: Path, engine: str, request: pytest.FixtureRequest
) -> None:
    """Recorded on a SQLite file or a Postgres database (`replay:postgresql://...`), replayed onto a SQLite file."""
    recording = tmp_path / "recorded.db" if engine == "sqlite" else request.getfixturevalue("pg_url")
    replaying = tmp_path / "replayed.db"
    fake = FakeProvider(tagged_answer)
    async with fake.running():
        model = ["--backend", "openai-compatible:fake-model", "--base-url", fake.base_url]
        async with simia_serve(recording, *model, log=tmp_path / "recording.log") as url:
            recorded = [await play(url, task, seed, calls) for task, seed, calls in EPISODES]
    assert len(fake.requests) == 9  # every call but the invalid one asked the model
    assert recorded[0]["results"][1]["structuredContent"]["qty"] == 4
    assert recorded[0]["results"][3]["isError"] and "tag" in recorded[0]["results"][3]["content"][0]["text"]
    assert recorded[0]["results"][4]["_meta"]["simia/error_code"] == "invalid_arguments"

    async with simia_serve(replaying, "--backend", f"replay:{recording}") as url:
        replayed = [await play(url, task, seed, calls) for task, seed, calls in EPISODES]
        unseen = await play(url, None, 13, EPISODES[1][2][:1])  # a seed nobody recorded

    assert replayed == recorded
    assert unseen["results"][0]["isError"] and unseen["results"][0]["_meta"]["simia/error_kind"] == "infra"
    assert unseen["events"][0]["error_code"] == "backend_error"  # the replay server has no model to fall back on
