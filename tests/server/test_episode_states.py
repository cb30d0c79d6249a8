"""Episodes reference their world's initial state by content hash: a world whose state.json changes on disk while
episodes of the old one are live keeps both versions, and episodes of one world share the unchanged state in
memory (a live episode costs what its calls changed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx2 as httpx
from mcp import Client
from simia.sim.backends import CompletionRequest, FunctionBackend


def _mock_world_copy(worlds_dir: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "worlds"
    shutil.copytree(worlds_dir / "mock", folder / "mock")
    return folder


async def _quantity(url: str, name: str) -> Any:
    async with Client(url) as client:
        result = await client.call_tool("get_item", {"name": name})
    assert result.structured_content is not None, result
    return result.structured_content["qty"]


async def test_a_state_changed_on_disk_keeps_the_old_version_for_the_episodes_that_started_on_it(
    make_server: Any, worlds_dir: Path, tmp_path: Path
) -> None:
    worlds = _mock_world_copy(worlds_dir, tmp_path)
    async with make_server(worlds_dir=worlds) as server, httpx.AsyncClient(base_url=server.url) as http:
        old = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        async with Client(old["mcp_url"]) as client:
            await client.call_tool("set_quantity", {"name": "milk", "qty": 5})
        old_initial = (await http.get(f"/v1/episodes/{old['id']}")).json()["initial_state"]
    state_file = worlds / "mock" / "state.json"
    state = json.loads(state_file.read_text())
    state["items"]["apple"]["qty"] = 99
    state_file.write_text(json.dumps(state))
    async with make_server(worlds_dir=worlds) as server, httpx.AsyncClient(base_url=server.url) as http:
        new = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        assert await _quantity(new["mcp_url"], "apple") == 99
        old_url = f"{server.url}/episodes/{old['id']}/mcp"  # the new server's port
        assert await _quantity(old_url, "apple") == 3  # the old version, from its stored copy
        assert await _quantity(old_url, "milk") == 5  # and what its own calls changed
        detail = (await http.get(f"/v1/episodes/{old['id']}")).json()
        assert detail["initial_state"] == old_initial
        assert detail["state"]["items"]["milk"]["qty"] == 5 and detail["state"]["items"]["apple"]["qty"] == 3


async def test_live_episodes_of_one_world_share_its_state_and_copy_only_what_their_calls_changed(
    make_server: Any,
) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        service = server.app.service
        base = service.world("mock").base_state
        episodes = [(await http.post("/v1/episodes", json={"world": "mock"})).json() for _ in range(5)]
        async with Client(episodes[0]["mcp_url"]) as client:
            await client.call_tool("set_quantity", {"name": "milk", "qty": 7})
        states = [service._live.get(e["id"]).record.state for e in episodes]  # type: ignore[union-attr]
        assert all(state is base for state in states[1:])  # untouched: the world's own state, not a copy
        changed = states[0]
        assert changed is not base and changed.base is base and changed.touched == {("items", "milk")}
        assert changed["items"]["apple"] is base["items"]["apple"]  # shared, record by record
        assert changed["items"]["milk"] == {"qty": 7, "unit": "litres"} and base["items"]["milk"]["qty"] == 0


async def test_a_patch_that_replaces_a_huge_subtree_is_accepted_and_its_size_reported(make_server: Any) -> None:
    huge = {f"item{i}": {"qty": i % 100, "unit": "pieces " * 8} for i in range(2_000)}  # ~100 KB of JSON

    def answer(request: CompletionRequest) -> dict[str, Any]:
        patch = [{"op": "replace", "path": "/items", "value": huge}]
        return {
            "is_error": False,
            "error_code": None,
            "message": "",
            "output": {"name": "milk", "qty": 1},
            "state_patch": patch,
        }

    async with make_server(backend=FunctionBackend(answer)) as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        async with Client(episode["mcp_url"]) as client:
            result = await client.call_tool("set_quantity", {"name": "milk", "qty": 1})
        assert not result.is_error
        detail = (await http.get(f"/v1/episodes/{episode['id']}")).json()
        metrics = (await http.get("/metrics")).text
    assert detail["state"]["items"] == huge
    assert "large state patch" in detail["events"][0]["detail"] and "bytes" in detail["events"][0]["detail"]
    assert "simia_large_state_patches_total 1.0" in metrics


def _large_mock_world(worlds_dir: Path, tmp_path: Path) -> Path:
    """The mock world with 3,000 more items (a collection worth parking)."""
    worlds = _mock_world_copy(worlds_dir, tmp_path)
    state_file = worlds / "mock" / "state.json"
    state = json.loads(state_file.read_text())
    state["items"].update({f"item{i}": {"qty": i % 100, "unit": "pieces"} for i in range(3_000)})
    state_file.write_text(json.dumps(state))
    return worlds


async def test_between_calls_a_live_episode_of_a_large_world_keeps_only_what_it_changed(
    make_server: Any, worlds_dir: Path, tmp_path: Path
) -> None:
    async with make_server(worlds_dir=_large_mock_world(worlds_dir, tmp_path)) as server:
        server.app.service._live.hot = 0  # no state kept whole between calls: each episode parked after its call
        async with httpx.AsyncClient(base_url=server.url) as http:
            episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        async with Client(episode["mcp_url"]) as client:
            await client.call_tool("set_quantity", {"name": "milk", "qty": 9})
        entry = server.app.service._live.get(episode["id"])
        assert entry is not None and entry.record is not None
        assert entry.record.state is None and entry.parked is not None  # no copy of the 3,003 items kept
        assert entry.parked.values == {("items", "milk"): {"qty": 9, "unit": "litres"}}
        assert await _quantity(episode["mcp_url"], "milk") == 9  # made whole again for the next call
        assert await _quantity(episode["mcp_url"], "item7") == 7
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get(f"/v1/episodes/{episode['id']}")).json()["state"]["items"]["milk"]["qty"] == 9


async def test_the_most_recently_called_episodes_keep_their_states_whole_and_the_one_called_longest_ago_is_parked(
    make_server: Any, worlds_dir: Path, tmp_path: Path
) -> None:
    async with make_server(worlds_dir=_large_mock_world(worlds_dir, tmp_path)) as server:
        live = server.app.service._live
        live.hot = 2
        async with httpx.AsyncClient(base_url=server.url) as http:
            episodes = [(await http.post("/v1/episodes", json={"world": "mock"})).json() for _ in range(3)]
        for n, episode in enumerate(episodes):
            async with Client(episode["mcp_url"]) as client:
                await client.call_tool("set_quantity", {"name": "milk", "qty": n + 1})
        entries = [live.get(e["id"]) for e in episodes]
        assert all(entry is not None and entry.record is not None for entry in entries)
        whole = [entry.record.state is not None for entry in entries]  # type: ignore[union-attr]
        parked = [entry.parked is not None for entry in entries]  # type: ignore[union-attr]
        assert (whole, parked) == ([False, True, True], [True, False, False])  # the first, called longest ago
        assert [await _quantity(e["mcp_url"], "milk") for e in episodes] == [1, 2, 3]
        whole = [entry.record.state is not None for entry in entries]  # type: ignore[union-attr]
        assert whole == [False, True, True]  # called in order again: the first parked again, by the third


async def test_a_fork_of_an_episode_that_wrote_to_a_large_collection_copies_nothing_until_its_first_call(
    make_server: Any, worlds_dir: Path, tmp_path: Path
) -> None:
    """A fork starts parked (its parent's changes over the shared base, `parked_patches`): creating it copies none
    of the 3,003 items; its first call makes it whole, sees the parent's writes, and earns its step reward from the
    task's checks (the tracker reads the fork's start then); the parent is left as it was."""
    from simia.sim.wire import META_PROGRESS

    async with make_server(worlds_dir=_large_mock_world(worlds_dir, tmp_path)) as server:
        live = server.app.service._live
        async with httpx.AsyncClient(base_url=server.url) as http:
            parent = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
            async with Client(parent["mcp_url"]) as client:
                await client.call_tool("set_quantity", {"name": "milk", "qty": 2})
            fork = (await http.post(f"/v1/episodes/{parent['id']}/fork", json={})).json()
            entry = live.get(fork["id"])
            assert entry is not None and entry.record is not None
            assert entry.record.state is None and entry.parked is not None
            assert entry.parked.values == {("items", "milk"): {"qty": 2, "unit": "litres"}}
            assert await _quantity(fork["mcp_url"], "milk") == 2
            async with Client(fork["mcp_url"]) as client:
                done = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
            assert done.meta is not None and done.meta[META_PROGRESS] == 1.0
            assert await _quantity(fork["mcp_url"], "item7") == 7
            forked = (await http.get(f"/v1/episodes/{fork['id']}")).json()
            original = (await http.get(f"/v1/episodes/{parent['id']}")).json()
    assert forked["initial_state"]["items"]["milk"]["qty"] == 2 and forked["state"]["items"]["milk"]["qty"] == 4
    assert len(forked["state"]["items"]) == 3_003
    assert original["state"]["items"]["milk"]["qty"] == 2 and len(original["state"]["items"]) == 3_003
