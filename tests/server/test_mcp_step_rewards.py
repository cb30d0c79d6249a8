"""Step rewards over MCP: the real MCP SDK client over real HTTP reads each call's shaped reward and the progress
after it in the result's `_meta`, the same numbers the episode's verdict lists for that call's `seq`."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx
import pytest
from mcp import Client
from simia.sim.judging import Judge
from simia.sim.wire import META_PROGRESS, META_REWARD, META_SEQ


async def create(http: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await http.post("/v1/episodes", json={"world": "mock", **body})
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def rewards_of(meta: dict[str, Any] | None) -> tuple[Any, Any, Any]:
    meta = meta or {}
    return meta.get(META_SEQ), meta.get(META_REWARD), meta.get(META_PROGRESS)


async def test_each_call_result_carries_the_shaped_reward_and_progress_its_verdict_lists_for_that_seq(
    make_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """weekly_restock weighs apples 2, milk and rice 1 (rice holds at the start: Phi 0.25) and forbids emptying
    the rice; with the judge's gamma 0.9 a read earns 0.9 * 0.25 - 0.25. Setting the apples (Phi 0.75), emptying
    the rice (a kept check broken and a forbidden state reached: Phi 0), a call with bad arguments (the agent's
    error, still a step) and setting the milk (Phi 0.25) each carry their reward and progress in `_meta`,
    computed as the call was answered from the tracker the episode's creation opened (its state is never read
    again), and equal to the verdict's progress steps, seq by seq."""
    async with make_server(judge=Judge(None, gamma=0.9)) as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = await create(http, task="weekly_restock")
        reads: list[tuple[str, int]] = []
        state_at = server.store.state_at

        async def counted(episode_id: str, seq: int) -> Any:
            reads.append((episode_id, seq))
            return await state_at(episode_id, seq)

        monkeypatch.setattr(server.store, "state_at", counted)
        calls = [
            ("get_item", {"name": "apple"}),
            ("set_quantity", {"name": "apple", "qty": 6}),
            ("set_quantity", {"name": "rice", "qty": 0}),
            ("set_quantity", {"name": "milk", "qty": "two"}),
            ("set_quantity", {"name": "milk", "qty": 2}),
        ]
        async with Client(episode["mcp_url"]) as client:
            results = [await client.call_tool(name, arguments) for name, arguments in calls]
        assert reads == []  # no state read on the calls' path
        monkeypatch.undo()
        ended = await http.post(f"/v1/episodes/{episode['id']}/end", json={})
    assert [r.is_error for r in results] == [False, False, False, True, False]
    carried = [rewards_of(r.meta) for r in results]
    verdict = ended.json()["verdict"]
    listed = [(s["seq"], s["reward"], s["progress"]) for s in verdict["progress"]["steps"]]
    assert carried == listed
    assert [(seq, round(reward, 6), progress) for seq, reward, progress in carried] == [
        (1, -0.025, 0.25),
        (2, 0.425, 0.75),
        (3, -0.75, 0.0),
        (4, 0.0, 0.0),
        (5, 0.225, 0.25),
    ]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_episode_without_checks_has_no_reward_keys_in_its_results(make_server: Any, mode: str) -> None:
    """An episode without a task (through the HTTP API, or opened by a world URL's session) has no checks, so its
    results carry no `simia/reward` and no `simia/progress`."""
    async with make_server(judge=Judge(None)) as server, httpx.AsyncClient(base_url=server.url) as http:
        untasked = await create(http)
        async with Client(untasked["mcp_url"], mode=mode) as client:
            by_api = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
        async with Client(f"{server.url}/worlds/mock/mcp", mode=mode) as client:
            by_world = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
    assert [rewards_of(r.meta) for r in (by_api, by_world)] == [(1, None, None), (1, None, None)]
    simia_keys = [sorted(k for k in r.meta or {} if k.startswith("simia/")) for r in (by_api, by_world)]
    assert simia_keys == [["simia/episode", "simia/seq"]] * 2


async def test_a_forked_episode_and_one_this_server_did_not_open_carry_rewards_from_their_own_start(
    make_server: Any,
) -> None:
    """A fork of restock_milk after its milk was set starts at progress 1: setting the milk again earns 0.0. An
    episode of a server that restarted on the same database (no tracker for it) is read once, on its first call,
    and its reward is still the one its verdict lists."""
    async with make_server(judge=Judge(None)) as server, httpx.AsyncClient(base_url=server.url) as http:
        parent = await create(http, task="restock_milk")
        other = await create(http, task="restock_milk")
        async with Client(parent["mcp_url"]) as client:
            done = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
        forked = (await http.post(f"/v1/episodes/{parent['id']}/fork", json={})).json()
        async with Client(f"{server.url}/episodes/{forked['id']}/mcp") as client:
            again = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
        server.app.rewards.forget(other["id"])  # as after a restart: the tracker is gone, the episode is not
        async with Client(other["mcp_url"]) as client:
            caught_up = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
        ended = (await http.post(f"/v1/episodes/{other['id']}/end", json={})).json()
    assert [rewards_of(r.meta) for r in (done, again, caught_up)] == [(1, 1.0, 1.0), (1, 0.0, 1.0), (1, 1.0, 1.0)]
    [step] = ended["verdict"]["progress"]["steps"]
    assert (step["seq"], step["reward"], step["progress"]) == (1, 1.0, 1.0)
