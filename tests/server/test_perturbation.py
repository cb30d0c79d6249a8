"""Perturbation mode: realistic faults injected at a set rate, replayed by seed, marked on the events."""

from __future__ import annotations

import math
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
import yaml
from mcp import Client
from simia.clients.api import SimiaClient
from simia.server.settings import ServerSettings
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
    assert set(Counter(d.kind for d in draws if d)) == set(KINDS)
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
    # no judge served them: unjudged, so masked, and asked for (what is tested is the injected filter)
    kept = await export(tmp_path / "simia.db", "rl", tmp_path / "all.jsonl", worlds, include_masked=True)
    dropped = await export(
        tmp_path / "simia.db", "rl", tmp_path / "clean.jsonl", worlds, injected="drop", include_masked=True
    )
    assert kept.written == 2 and dropped.written == 1
    assert dropped.skipped == [{"episode": faulty.id, "problems": ["injected faults: timeout"]}]


def pantry(base: Path, perturbation: dict[str, Any] | None = None) -> Path:
    """The mock world copied under `base` (its simulator, `mock_world_answer`, still answers it), `get_item`
    documenting three errors, and `simulator.perturbation` set when given; returns the worlds folder."""
    folder = base / "mock"
    shutil.copytree(ROOT / "tool_specs" / "mock", folder)
    world = yaml.safe_load((folder / "world.yaml").read_text())
    get_item = next(tool for tool in world["tools"] if tool["name"] == "get_item")
    get_item["errors"] = [{"code": c, "when": f"the item is {c}"} for c in ("item_not_found", "archived", "locked")]
    if perturbation is not None:
        world["simulator"]["perturbation"] = perturbation
    (folder / "world.yaml").write_text(yaml.safe_dump(world, sort_keys=False))
    return base


NAMES = ("apple", "kiwi", "fig", "plum")  # only apple is in the pantry: three get_item calls in four are errors


async def injected_kinds(api: SimiaClient, seed: int, calls: int, perturbation: dict[str, Any]) -> list[str | None]:
    """The `injected` of each event of an episode making `calls` calls (get_item, and list_items every fifth)."""
    episode = await api.create("mock", seed=seed, perturbation=perturbation)
    async with Client(episode.mcp_url) as client:
        for n in range(calls):
            if n % 5 == 4:
                await client.call_tool("list_items", {})
            else:
                await client.call_tool("get_item", {"name": NAMES[n % 4]})
    detail = await api.get(episode.id)
    assert len(detail.events) == calls and not any(e.error_kind == "infra" for e in detail.events)
    return [event.injected for event in detail.events]


@pytest.mark.slow  # 1,060 calls over MCP
async def test_the_injected_rate_through_the_server_is_the_setting_error_answers_included(make_server: Any) -> None:
    async with make_server(ServerSettings(max_calls_per_episode=1000)) as server, SimiaClient(server.url) as api:
        mixed = [k for seed in (1, 2) for k in await injected_kinds(api, seed, 500, {"rate": 0.3})]
        post_call = await injected_kinds(api, 3, 60, {"rate": 1.0, "kinds": ["partial", "stale_read"]})
    share = sum(kind is not None for kind in mixed) / len(mixed)
    assert abs(share - 0.3) <= 4 * math.sqrt(0.3 * 0.7 / len(mixed)), share  # within 4 sigma over 1,000 calls
    assert set(mixed) == {None, *KINDS} - {"stale_read"}  # nothing changes: a stale read becomes a rate limit
    assert None not in post_call  # every call, the 36 error answers too (they become rate limits)
    assert set(post_call) == {"partial", "rate_limit"}


async def test_a_stale_read_answers_what_the_call_answered_before_the_last_write(make_server: Any) -> None:
    stale = Perturbation(rate=0.5, kinds=["stale_read"])
    wanted = [None, None, "stale_read"]  # the read and the write as simulated, then a stale read
    seed = next(s for s in range(1000) if [getattr(choose_fault(stale, str(s), n), "kind", None)
                                           for n in (1, 2, 3)] == wanted)  # fmt: skip
    async with make_server() as server, SimiaClient(server.url) as api:
        episode = await api.create("mock", seed=seed, perturbation=stale)
        async with Client(episode.mcp_url) as client:
            before = await client.call_tool("get_item", {"name": "apple"})
            await client.call_tool("set_quantity", {"name": "apple", "qty": 9})
            after = await client.call_tool("get_item", {"name": "apple"})
        detail = await api.get(episode.id)
    assert before.structured_content == after.structured_content == {"name": "apple", "qty": 3}
    assert (after.meta or {}).get("simia/injected") == "stale_read" and not after.is_error
    assert [e.injected for e in detail.events] == wanted
    assert detail.state["items"]["apple"]["qty"] == 9  # the write stands: only the read was stale


def test_a_stale_read_stands_in_for_an_error_answer_and_otherwise_does_not_apply() -> None:
    from simia.sim import load_world
    from simia.sim.engine import perturb_output

    get_item = load_world(ROOT / "tool_specs" / "mock").tool("get_item")
    assert get_item is not None
    earlier = [("get_item", {"name": "apple"}, {"name": "apple", "qty": 3})]
    assert perturb_output("stale_read", get_item, {"name": "apple"}, None, earlier) == {"name": "apple", "qty": 3}
    assert perturb_output("stale_read", get_item, {"name": "rice"}, None, earlier) is None  # nothing to repeat
    assert perturb_output("partial", get_item, {"name": "apple"}, None, earlier) is None  # no lists in an error


async def test_a_documented_error_is_one_of_the_tools_codes_picked_by_seed(make_server: Any, tmp_path: Path) -> None:
    faults = Perturbation(rate=1.0, kinds=["documented_error"])
    async with make_server(worlds_dir=pantry(tmp_path)) as server, SimiaClient(server.url) as api:
        codes = []
        for seed in (5, 6, 5):
            episode = await api.create("mock", seed=seed, perturbation=faults)
            async with Client(episode.mcp_url) as client:
                for _ in range(6):
                    await client.call_tool("get_item", {"name": "apple"})
            codes.append([e.error_code for e in (await api.get(episode.id)).events])
    assert codes[0] == codes[2] != codes[1]  # a seed replays its codes
    assert set(codes[0] + codes[1]) == {"item_not_found", "archived", "locked"}


async def test_a_worlds_perturbation_is_the_default_and_an_episodes_own_overrides_it(
    make_server: Any, tmp_path: Path
) -> None:
    worlds = pantry(tmp_path, {"rate": 1.0, "kinds": ["timeout"]})
    async with make_server(worlds_dir=worlds) as server, SimiaClient(server.url) as api:
        default = await api.create("mock", seed=1)
        own = await api.create("mock", seed=1, perturbation={"rate": 1.0, "kinds": ["rate_limit"]})
        none = await api.create("mock", seed=1, perturbation={"rate": 0.0})
        for episode in (default, own, none):
            async with Client(episode.mcp_url) as client:
                await client.call_tool("get_item", {"name": "apple"})
        details = [await api.get(e.id) for e in (default, own, none)]
    assert [d.perturbation for d in details] == [
        {"rate": 1.0, "kinds": ["timeout"]}, {"rate": 1.0, "kinds": ["rate_limit"]}, {"rate": 0.0, "kinds": list(KINDS)}
    ]  # fmt: skip
    assert [[e.injected for e in d.events] for d in details] == [["timeout"], ["rate_limit"], [None]]
