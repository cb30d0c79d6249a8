"""A recording replays on its own: `simia serve --backend replay:DB` serves the worlds DB stored as its episodes ran
them, so the same calls replay after the world folder is deleted; a `--worlds-dir` world that differs is reported.

Real processes: a server records seeded episodes of `larder` (the mock world under a name no bundled world has)
from its own folder, simulated by a model the fake provider serves; the folder is then deleted, and replay servers
answer the same calls from the database alone.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
import yaml
from mcp import Client
from simia.cli import main
from simia.sim import load_world
from simia.sim.storage import open_store, short_hash
from simia.testing import FakeProvider, mock_world_answer
from simia.testing.processes import serve_process

ROOT = Path(__file__).resolve().parents[2]
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_item", {"name": "milk"}),
    ("set_quantity", {"name": "milk", "qty": 4}),
    ("get_item", {"name": "milk"}),
    ("get_item", {"name": "banana"}),
]


def larder(folder: Path, description: str | None = None) -> Path:
    """A folder of worlds holding `larder`: the mock world renamed (its world description replaced, if given)."""
    shutil.copytree(ROOT / "tool_specs" / "mock", folder / "larder")
    spec = yaml.safe_load((folder / "larder" / "world.yaml").read_text())
    spec = {**spec, "name": "larder", "description": description or spec["description"]}
    (folder / "larder" / "world.yaml").write_text(yaml.safe_dump(spec))
    return folder


async def play(url: str, seed: int) -> list[dict[str, Any]]:
    """A seeded episode of `larder` making `CALLS`: each MCP result, without the episode id."""
    async with httpx.AsyncClient() as http:
        episode = (await http.post(f"{url}/v1/episodes", json={"world": "larder", "seed": seed})).json()
    results = []
    async with Client(episode["mcp_url"]) as client:
        for name, arguments in CALLS:
            result = (await client.call_tool(name, arguments)).model_dump(mode="json", by_alias=True)
            result["_meta"].pop("simia/episode")
            results.append(result)
    return results


@pytest.mark.processes
@pytest.mark.slow
async def test_serve_replay_serves_the_stored_worlds_so_a_recording_replays_without_its_world_folder(
    tmp_path: Path,
) -> None:
    worlds, recording = larder(tmp_path / "worlds"), tmp_path / "recorded.db"
    recorded_hash = load_world(worlds / "larder").content_hash
    fake = FakeProvider(mock_world_answer)
    async with fake.running():
        model = ["--backend", "openai-compatible:fake-model", "--base-url", fake.base_url]
        args = ["--worlds-dir", str(worlds), "--world", "larder", "--db", str(recording), *model]
        async with serve_process(*args, log=tmp_path / "recording.log", timeout=30) as server:
            recorded = [await play(server.url, seed) for seed in (21, 22)]
    assert len(fake.requests) == 8 and recorded[0][1]["structuredContent"] == {"name": "milk", "qty": 4}
    shutil.rmtree(worlds)

    replay = ["--backend", f"replay:{recording}", "--world", "larder"]
    log = tmp_path / "replayed.log"
    async with serve_process(*replay, "--db", str(tmp_path / "replayed.db"), log=log, timeout=30) as server:
        assert [await play(server.url, seed) for seed in (21, 22)] == recorded
    assert "warning" not in log.read_text()

    edited = larder(tmp_path / "edited", "A pantry, described since the recording.")
    log = tmp_path / "edited.log"
    args = [*replay, "--worlds-dir", str(edited), "--db", str(tmp_path / "edited.db")]
    async with serve_process(*args, log=log, timeout=30) as server:
        assert [await play(server.url, seed) for seed in (21, 22)] == recorded  # the stored world is served
    folder_hash = load_world(edited / "larder").content_hash
    assert folder_hash != recorded_hash
    assert [line for line in log.read_text().splitlines() if line.startswith("warning")] == [
        f"warning: world 'larder' in --worlds-dir (hash {short_hash(folder_hash)}) differs from the one 2 episode(s) "
        f"ran against (hash {short_hash(recorded_hash)}); used the version stored in the database"
    ]


def test_serve_replay_of_a_database_with_no_worlds_exits_2_naming_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.db"
    asyncio.run(open_store(empty).close())  # a simia database that recorded nothing
    assert main(["serve", "--backend", f"replay:{empty}", "--db", str(tmp_path / "new.db")]) == 2
    assert capsys.readouterr().err == (
        f"error: replay:{empty} holds no worlds and no episodes; pass --worlds-dir DIR with the recorded ones\n"
    )
    assert not (tmp_path / "new.db").exists()
