"""Fast tests through the SDK's in-memory `Client(server)` (no sockets), and the service's retry rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp import Client
from simia.server.episodes import EpisodeService
from simia.server.settings import ServerSettings
from simia.server.stdio import bound_server
from simia.server.step_rewards import StepRewards
from simia.sim import load_worlds
from simia.sim.backends import FunctionBackend
from simia.sim.engine import Simulator
from simia.sim.storage import open_store

ROOT = Path(__file__).resolve().parents[2]


async def service_for(tmp_path: Path, answer: Any) -> EpisodeService:
    worlds = load_worlds([ROOT / "tool_specs"]).worlds
    backend = FunctionBackend(answer)
    return EpisodeService(worlds, Simulator(backend), open_store(tmp_path / "s.db"), ServerSettings())


async def test_an_in_memory_client_lists_and_calls_an_episodes_tools(tmp_path: Path, mock_answer: Any) -> None:
    service = await service_for(tmp_path, mock_answer)
    episode = await service.create("mock", task="restock_milk")
    server = bound_server(service, episode.id, service.worlds["mock"])
    async with Client(server) as client:
        tools = await client.list_tools()
        result = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
    assert [t.name for t in tools.tools] == ["list_items", "get_item", "set_quantity"]
    assert result.structured_content == {"name": "milk", "qty": 4}
    assert result.meta is not None
    assert (result.meta["simia/episode"], result.meta["simia/seq"]) == (episode.id, 1)
    stored = await service.store.get_episode(episode.id)
    assert stored is not None and stored.seq == 1
    assert (await service.store.state_at(episode.id, stored.seq))["items"]["milk"]["qty"] == 4
    await service.store.close()


async def test_a_bound_server_given_step_rewards_carries_each_calls_reward_as_http_does(
    tmp_path: Path, mock_answer: Any
) -> None:
    """What `simia serve --transport stdio` serves: restock_milk's one check (milk at 4) made by the call."""
    service = await service_for(tmp_path, mock_answer)
    episode = await service.create("mock", task="restock_milk")
    rewards = StepRewards(service)
    rewards.opened(episode)
    async with Client(bound_server(service, episode.id, service.worlds["mock"], rewards)) as client:
        result = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
    assert result.meta is not None and (result.meta["simia/reward"], result.meta["simia/progress"]) == (1.0, 1.0)
    await service.store.close()


async def test_a_retried_request_is_not_applied_twice(tmp_path: Path, mock_answer: Any) -> None:
    calls = 0

    def counting(request: Any) -> Any:
        nonlocal calls
        calls += 1
        return mock_answer(request)

    service = await service_for(tmp_path, counting)
    episode = await service.create("mock")
    first = await service.call(episode.id, "", "set_quantity", {"name": "rice", "qty": 8}, request_key="req-7")
    retry = await service.call(episode.id, "", "set_quantity", {"name": "rice", "qty": 8}, request_key="req-7")
    other = await service.call(episode.id, "", "get_item", {"name": "rice"}, request_key="req-8")
    assert (first.seq, retry.seq, other.seq) == (1, 1, 2)
    assert retry.output == first.output and calls == 2
    assert [e.seq for e in await service.store.events(episode.id)] == [1, 2]
    await service.store.close()


async def test_concurrent_calls_in_one_episode_are_serialized(tmp_path: Path, mock_answer: Any) -> None:
    import asyncio

    service = await service_for(tmp_path, mock_answer)
    episode = await service.create("mock")
    events = await asyncio.gather(
        *(service.call(episode.id, "", "set_quantity", {"name": "apple", "qty": q}) for q in range(20))
    )
    assert sorted(e.seq for e in events) == list(range(1, 21))
    stored = await service.store.get_episode(episode.id)
    last = max(events, key=lambda e: e.seq)
    assert stored is not None
    assert (await service.store.state_at(episode.id, stored.seq))["items"]["apple"]["qty"] == last.arguments["qty"]
    assert await service.store.integrity_check() == "ok"
    await service.store.close()


async def test_restarting_the_store_continues_episodes_from_the_last_committed_state(
    tmp_path: Path, mock_answer: Any
) -> None:
    service = await service_for(tmp_path, mock_answer)
    episode = await service.create("mock")
    await service.call(episode.id, "", "set_quantity", {"name": "milk", "qty": 9})
    await service.store.close()
    reopened = await service_for(tmp_path, mock_answer)
    event = await reopened.call(episode.id, "", "get_item", {"name": "milk"})
    assert (event.seq, event.output) == (2, {"name": "milk", "qty": 9})
    await reopened.store.close()


async def test_idle_episodes_are_abandoned_with_their_events_kept(tmp_path: Path, mock_answer: Any) -> None:
    import pytest
    from simia.server.errors import Conflict

    service = await service_for(tmp_path, mock_answer)
    service.settings.idle_timeout = 0.0  # everything is idle at once
    episode = await service.create("mock")
    await service.call(episode.id, "", "list_items", {})
    assert await service.sweep_idle() == [episode.id]
    stored = await service.store.get_episode(episode.id)
    assert stored is not None and (stored.status, stored.status_reason) == ("abandoned", "idle timeout")
    assert len(await service.store.events(episode.id)) == 1  # the partial trajectory is kept
    with pytest.raises(Conflict, match="is abandoned; start a new one"):
        await service.call(episode.id, "", "list_items", {})
    ended = await service.end(episode.id, "")  # its client comes back to end it: it says so
    assert (ended.status, ended.status_reason) == ("ended", "ended by client after the idle timeout abandoned it")
    await service.store.close()


async def test_state_at_every_step_matches_the_live_states(tmp_path: Path, mock_answer: Any) -> None:
    service = await service_for(tmp_path, mock_answer)
    episode = await service.create("mock")
    live = [episode.state]
    for i in range(37):  # writes, reads and errors (which never change the state) mixed
        tool, arguments = [
            ("set_quantity", {"name": ["milk", "apple", "rice"][i % 3], "qty": i}),
            ("get_item", {"name": "milk"}),
            ("get_item", {"name": "no-such-item"}),
        ][i % 3 if i % 4 else 0]
        await service.call(episode.id, "", tool, arguments)
        live.append(service._live.get(episode.id).record.state)  # type: ignore[union-attr]  # the live copy
    for step, expected in enumerate(live):
        assert await service.store.state_at(episode.id, step) == expected, step
        fork = await service.fork(episode.id, step=step, principal="")
        assert fork.state == expected and fork.initial_state == expected
    await service.store.close()


async def test_a_repeated_key_after_a_state_change_is_a_new_call_not_a_retry(tmp_path: Path, mock_answer: Any) -> None:
    """Clients that open a connection per call send JSON-RPC id 1 every time: a read repeated after a write
    must see the write, while a real retry (nothing changed since) still gets the committed answer."""
    service = await service_for(tmp_path, mock_answer)
    episode = await service.create("mock")
    read = ("get_item", {"name": "milk"})
    first = await service.call(episode.id, "", *read, request_key="id-1-read")
    retry = await service.call(episode.id, "", *read, request_key="id-1-read")
    await service.call(episode.id, "", "list_items", {}, request_key="id-1-list")  # reads change nothing
    still_retry = await service.call(episode.id, "", *read, request_key="id-1-read")
    write = await service.call(episode.id, "", "set_quantity", {"name": "milk", "qty": 7}, request_key="id-1-write")
    again = await service.call(episode.id, "", *read, request_key="id-1-read")
    assert (first.seq, retry.seq, still_retry.seq, write.seq, again.seq) == (1, 1, 1, 3, 4)
    assert first.output == {"name": "milk", "qty": 0} and again.output == {"name": "milk", "qty": 7}
    await service.store.close()
    reopened = await service_for(tmp_path, mock_answer)  # after a restart the rule holds from the stored events
    write_retry = await reopened.call(
        episode.id, "", "set_quantity", {"name": "milk", "qty": 7}, request_key="id-1-write"
    )
    assert write_retry.seq == 3  # only a read came after it: a retry, answered from the store
    assert len(await reopened.store.events(episode.id)) == 4
    await reopened.store.close()
