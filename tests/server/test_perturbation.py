"""Perturbation mode: realistic faults injected at a set rate, replayed by seed, marked on the events."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import httpx2 as httpx
from mcp import Client
from simia.clients.api import SimiaClient
from simia.sim.engine import choose_fault
from simia.sim.perturbation import KINDS, Perturbation

ROOT = Path(__file__).resolve().parents[2]


def test_the_same_seed_draws_the_same_faults_and_the_rate_holds() -> None:
    perturbation = Perturbation(rate=0.2, kinds=list(KINDS))
    draws = [choose_fault(perturbation, "7", seq) for seq in range(1, 1001)]
    assert draws == [choose_fault(perturbation, "7", seq) for seq in range(1, 1001)]  # replays exactly
    assert draws != [choose_fault(perturbation, "8", seq) for seq in range(1, 1001)]
    rate = sum(d is not None for d in draws) / len(draws)
    assert abs(rate - 0.2) <= 0.02
    assert set(Counter(d for d in draws if d)) == set(KINDS)
    assert all(choose_fault(Perturbation(rate=0.0), "7", s) is None for s in range(1, 200))


async def calls(api: SimiaClient, seed: int, rate: float, kinds: list[str]) -> list[Any]:
    episode = await api.create("mock", seed=seed, perturbation={"rate": rate, "kinds": kinds})
    async with Client(episode.mcp_url) as client:
        return [await client.call_tool("get_item", {"name": "milk"}) for _ in range(30)]


async def test_injected_faults_are_marked_replayed_by_seed_and_leave_the_state_alone(make_server: Any) -> None:
    async with make_server() as server, SimiaClient(server.url) as api:
        first = await calls(api, 3, 0.5, ["rate_limit", "timeout", "documented_error"])
        again = await calls(api, 3, 0.5, ["rate_limit", "timeout", "documented_error"])
        episodes = await api.list_episodes(world="mock")
        detail = await api.get(episodes[0].id)
    kinds = [(r.meta or {}).get("simia/injected") for r in first]
    assert kinds == [(r.meta or {}).get("simia/injected") for r in again]  # same seed, same faults
    assert {"rate_limit", "timeout", "documented_error"} <= set(kinds) and None in kinds
    by_kind = {k: r for k, r in zip(kinds, first, strict=True) if k}
    assert by_kind["rate_limit"].content[0].text.startswith("Error (rate_limited): Too many requests")
    assert by_kind["timeout"].content[0].text.startswith("Error (timeout): The request timed out")
    assert by_kind["documented_error"].content[0].text.startswith("Error (item_not_found): ")
    assert all(r.is_error and (r.meta or {})["simia/error_kind"] == "agent" for r in by_kind.values())
    assert [e.injected for e in detail.events].count(None) == kinds.count(None)
    assert detail.state == detail.initial_state
    assert detail.perturbation == {"rate": 0.5, "kinds": ["rate_limit", "timeout", "documented_error"]}


async def test_a_partial_result_cuts_lists_and_forks_keep_the_perturbation(make_server: Any) -> None:
    async with make_server() as server, SimiaClient(server.url) as api:
        episode = await api.create("mock", seed=1, perturbation=Perturbation(rate=1.0, kinds=["partial"]))
        async with Client(episode.mcp_url) as client:
            listed = await client.call_tool("list_items", {})
            single = await client.call_tool("get_item", {"name": "milk"})  # no list to cut: a rate limit instead
        fork = await api.fork(episode.id)
    assert (listed.meta or {}).get("simia/injected") == "partial" and not listed.is_error
    assert len(listed.structured_content["items"]) == 1  # 3 items, cut to half
    assert (single.meta or {}).get("simia/injected") == "rate_limit"
    assert fork.perturbation == {"rate": 1.0, "kinds": ["partial"]}


async def test_a_bad_perturbation_is_a_400_naming_the_field(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        for body in ({"rate": 1.5}, {"rate": 0.1, "kinds": ["meteor"]}, {"rate": 0.1, "kinds": []}, {"kinds": []}):
            answer = await http.post("/v1/episodes", json={"world": "mock", "perturbation": body})
            assert answer.status_code == 400 and "'perturbation." in answer.json()["error"]["message"]


async def test_the_judge_is_told_what_was_injected_and_exports_can_drop_it(make_server: Any, tmp_path: Any) -> None:
    from simia.sim import load_worlds
    from simia.sim.judging import EpisodeView, Judge
    from simia.training.export import export

    worlds = load_worlds([ROOT / "tool_specs"]).worlds
    async with make_server() as server, SimiaClient(server.url) as api:
        faulty = await api.create("mock", task="restock_milk", seed=2, perturbation={"rate": 1.0, "kinds": ["timeout"]})
        clean = await api.create("mock", task="restock_milk", seed=2)
        for episode in (faulty, clean):
            async with Client(episode.mcp_url) as client:
                await client.call_tool("get_item", {"name": "milk"})
            await api.end(episode.id)
        events = await server.store.events(faulty.id)
        record = await server.store.get_episode(faulty.id)
        assert record is not None and [e.injected for e in events] == ["timeout"]
        view = await EpisodeView.read(server.store, record, None)
    prompt = Judge(None).build_messages(worlds["mock"], worlds["mock"].task("restock_milk"), view)
    assert '"injected_fault": "timeout"' in prompt[1]["content"] and "injected on purpose" in prompt[0]["content"]
    kept = await export(tmp_path / "simia.db", "rl", tmp_path / "all.jsonl", worlds)
    dropped = await export(tmp_path / "simia.db", "rl", tmp_path / "clean.jsonl", worlds, injected="drop")
    assert kept.written == 2 and dropped.written == 1
    assert dropped.skipped == [{"episode": faulty.id, "problems": ["injected faults: timeout"]}]
