"""The viewer over HTTP, without a browser: isolation between principals on every viewer route, bad query
parameters, the live feed, and assets that need no token."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from simia.server.inprocess import serving
from simia.server.settings import ServerSettings
from simia.server.viewer import viewer_app
from simia.sim.records import EpisodeRecord, EventRecord
from simia.sim.storage import open_store
from simia.sim.verdict import ProcessScores, ProgressCurve, ProgressStep, Verdict
from starlette.routing import Route

ALICE = {"authorization": "Bearer alice-secret"}
BOB = {"authorization": "Bearer bob-secret"}
SETTINGS = ServerSettings(named_tokens=(("alice", "alice-secret"), ("bob", "bob-secret")))


async def test_another_principals_episode_is_a_404_on_every_viewer_route_and_missing_from_lists(
    make_server: Any,
) -> None:
    async with make_server(SETTINGS) as server, httpx.AsyncClient(base_url=server.url) as http:
        bobs = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"}, headers=BOB)).json()
        scoped = [r.path for r in server.app.viewer.routes if isinstance(r, Route) and "{episode_id}" in r.path]
        assert len(scoped) == 3  # the episode, its state, its live feed
        for path in scoped:
            url = path.replace("{episode_id}", bobs["id"])
            assert (await http.get(url, headers=BOB)).status_code == 200, url
            answer = await http.get(url, headers=ALICE)
            assert answer.status_code == 404, url
            missing = await http.get(path.replace("{episode_id}", "ep_missing"), headers=ALICE)
            assert answer.text.replace(bobs["id"], "ID") == missing.text.replace("ep_missing", "ID")  # as if none
        alices_runs = (await http.get("/ui", headers=ALICE)).text
        bobs_runs = (await http.get("/ui", headers=BOB)).text
    assert bobs["id"][:14] in bobs_runs and bobs["id"][:14] not in alices_runs
    assert "0 of 0" in alices_runs


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/ui?status=done", 400, "status must be active, ended or abandoned, got &#x27;done&#x27;"),
        ("/ui?reward=2", 400, "reward must be 1, 0 or none"),
        ("/ui?sort=size", 400, "unknown sort &#x27;size&#x27;"),
        ("/ui?dir=up", 400, "dir must be asc or desc"),
        ("/ui?page=-1", 400, "page must be a whole number"),
        ("/ui?colour=red", 400, "unknown query parameter &#x27;colour&#x27;"),
        ("/ui/episodes/ep_missing", 404, "no episode &#x27;ep_missing&#x27;"),
        ("/ui/worlds/atlantis", 404, "no world &#x27;atlantis&#x27; is loaded or has episodes"),
        ("/ui/static/../app.py", 404, "Not Found"),
    ],
)
async def test_bad_viewer_requests_get_a_page_that_says_what_is_wrong(
    make_server: Any, path: str, status: int, says: str
) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        answer = await http.get(path)
    assert answer.status_code == status
    assert says in answer.text


async def test_a_step_outside_the_episode_is_refused(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        step = await http.get(f"/ui/episodes/{episode['id']}?step=3")
        state = await http.get(f"/ui/episodes/{episode['id']}/state?step=x")
        initial = await http.get(f"/ui/episodes/{episode['id']}/state?step=0")
    assert step.status_code == 400 and "step must be a whole number from 0 to 0, got &#x27;3&#x27;" in step.text
    assert state.status_code == 400
    assert initial.status_code == 200 and "&quot;milk&quot;" in initial.text


async def test_the_live_feed_sends_only_the_rows_after_the_last_step_seen(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        async with Client(streamable_http_client(episode["mcp_url"], http_client=http)) as client:
            await client.call_tool("set_quantity", {"name": "milk", "qty": 2})
            await client.call_tool("get_item", {"name": "milk"})
        feed = (await http.get(f"/ui/episodes/{episode['id']}/live?after=1")).json()
        nothing = (await http.get(f"/ui/episodes/{episode['id']}/live?after=2")).json()
    assert (feed["status"], feed["seq"]) == ("active", 2)
    assert 'id="step-2"' in feed["rows"] and 'id="step-1"' not in feed["rows"]
    assert nothing == {"status": "active", "seq": 2, "rows": ""}


async def test_pages_carry_a_content_security_policy_and_assets_need_no_token(make_server: Any) -> None:
    async with make_server(SETTINGS) as server, httpx.AsyncClient(base_url=server.url) as http:
        page = await http.get("/ui", headers=ALICE)
        css = await http.get("/ui/static/viewer.css")
        anonymous = await http.get("/ui/worlds")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert anonymous.status_code == 303 and anonymous.headers["location"] == "/ui/login?next=/ui/worlds"


async def test_the_read_only_viewer_shows_every_principals_episodes_and_worlds_known_only_from_the_database(
    make_server: Any, tmp_path: Path
) -> None:
    async with make_server(SETTINGS) as server, httpx.AsyncClient(base_url=server.url) as http:
        bobs = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"}, headers=BOB)).json()
        alices = (await http.post("/v1/episodes", json={"world": "mock"}, headers=ALICE)).json()
    store = open_store(tmp_path / "simia.db", read_only=True)
    async with (
        serving(viewer_app(store, {}, ServerSettings())) as port,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
    ):
        runs = (await http.get("/ui")).text
        world = (await http.get("/ui/worlds/mock")).text
        health = (await http.get("/healthz")).json()
        api = await http.get("/v1/episodes")
    await store.close()
    assert bobs["id"][:14] in runs and alices["id"][:14] in runs and "1–2 of 2" in runs
    assert "files are not loaded here" in world and "restock_milk" in world
    assert health == {"status": "ok", "worlds": 0}
    assert api.status_code == 404  # the viewer alone: no API, no MCP, nothing that writes
    assert api.json()["error"]["message"] == "no route '/v1/episodes'; the viewer serves /ui and /healthz"


async def test_the_read_only_viewer_reads_a_postgres_database_and_cannot_write_to_it(
    serve_on: Any, pg_url: str
) -> None:
    """`simia view --db postgresql://...`: episodes a server wrote to Postgres, a step's diff, and a store whose
    every transaction is read-only."""
    async with (
        serve_on(pg_url)(SETTINGS) as server,
        httpx.AsyncClient(base_url=server.url, headers=ALICE) as http,
    ):
        episode = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
        async with Client(streamable_http_client(episode["mcp_url"], http_client=http)) as client:
            assert not (await client.call_tool("set_quantity", {"name": "milk", "qty": 4})).is_error
    store = open_store(pg_url, read_only=True)
    try:
        async with (
            serving(viewer_app(store, {}, ServerSettings())) as port,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
        ):
            runs = (await http.get("/ui")).text
            step = (await http.get(f"/ui/episodes/{episode['id']}?step=1")).text
        assert episode["id"][:14] in runs and "1–1 of 1" in runs
        assert "/items/milk/qty" in step
        with pytest.raises(Exception, match="read-only transaction"):
            await store.set_status(episode["id"], "ended")
    finally:
        await store.close()


async def test_a_call_answered_by_the_real_server_says_so_in_the_timeline(tmp_path: Path) -> None:
    state = {"items": {}}
    store = open_store(tmp_path / "simia.db")
    episode = EpisodeRecord(id="ep_real", world="mock", world_hash="h", initial_state=state, state=state)
    await store.create_episode(episode)
    for source in ("real", "simulated"):
        call = EventRecord(tool="get_item", arguments={"name": "milk"}, output={"qty": 1}, text="ok", is_error=False)
        await store.commit_event("ep_real", replace(call, source=source))
    async with (
        serving(viewer_app(store, {}, ServerSettings())) as port,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
    ):
        page = (await http.get("/ui/episodes/ep_real?step=1")).text
    await store.close()
    rows = page.split('<tr id="step-')[1:]
    assert "<td>real</td>" in rows[0] and "<td>simulated</td>" in rows[1], rows
    assert "answered by the real server" in page


async def test_a_retail_lookup_answered_from_the_state_is_labelled_so_not_as_a_server(make_server: Any) -> None:
    """The retail world declares `get_order_details`: the call is answered from the state with no model."""
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "retail"})).json()
        async with Client(streamable_http_client(episode["mcp_url"], http_client=http)) as client:
            assert not (await client.call_tool("get_order_details", {"order_id": "#W1002"})).is_error
        page = (await http.get(f"/ui/episodes/{episode['id']}?step=1")).text
    facts = page.split('<section id="detail"', 1)[1].split('<p class="facts">', 1)[1].split("</p>", 1)[0]
    shown = re.sub(r"<time .*</time>", "TIME", re.sub(r"\d+ ms", "N ms", facts))
    assert shown == '<span class="ok">ok</span> · N ms · model – · TIME · answered from the state (declared)'
    assert "<td>state</td>" in page.split('<tr id="step-1"', 1)[1].split("</tr>", 1)[0]


async def test_an_infra_call_earns_nothing_on_the_curve_and_a_failed_process_judge_says_why(tmp_path: Path) -> None:
    state = {"items": {"milk": {"qty": 0}}}
    store = open_store(tmp_path / "simia.db")
    await store.create_episode(
        EpisodeRecord(id="ep_infra", world="mock", world_hash="h", initial_state=state, state=state)
    )
    call = EventRecord(tool="set_quantity", arguments={"name": "milk", "qty": 4}, output=None, text="", is_error=True)
    await store.commit_event("ep_infra", replace(call, error_kind="infra", error_code="backend_error"))
    curve = ProgressCurve(start=0.0, end=0.0, steps=[ProgressStep(seq=1, progress=0.0, reward=0.0, infra=True)])
    failed = ProcessScores(status="judge_error", reason="the process judge failed after 3 attempts: no JSON")
    await store.set_status("ep_infra", "ended", verdict=Verdict(reward=0, progress=curve, process=failed))
    async with (
        serving(viewer_app(store, {}, ServerSettings())) as port,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
    ):
        page = (await http.get("/ui/episodes/ep_infra")).text
    await store.close()
    assert '<circle class="pt infra selected" data-seq="1" data-progress="0.0" data-reward="0.0"' in page
    assert '<td class="num">0 (infra)</td>' in page
    assert (
        '<section id="process"><h2>Process scores</h2><p class="problem">No step scores: the process judge failed '
        "after 3 attempts: no JSON</p></section>"
    ) in page


async def test_a_model_with_no_known_price_shows_its_cost_as_unknown_never_as_zero(tmp_path: Path) -> None:
    state = {"items": {}}
    store = open_store(tmp_path / "simia.db")
    unpriced = {"prompt_tokens": 1_200, "completion_tokens": 40, "cached_tokens": 0, "cost_usd": None, "calls": 1}
    for episode_id, usage in (("ep_private_model", unpriced), ("ep_from_state", {})):
        await store.create_episode(
            EpisodeRecord(id=episode_id, world="mock", world_hash="h", initial_state=state, state=state)
        )
        call = EventRecord(tool="get_item", arguments={"name": "milk"}, output={"qty": 1}, text="ok", is_error=False)
        await store.commit_event(episode_id, replace(call, usage=usage))
    async with (
        serving(viewer_app(store, {}, ServerSettings())) as port,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
    ):
        private = (await http.get("/ui/episodes/ep_private_model")).text
        from_state = (await http.get("/ui/episodes/ep_from_state")).text
        runs = (await http.get("/ui")).text
    await store.close()
    unknown = "cost unknown (no price for the model; set one with --price)"
    assert f'id="cost">simulator cost {unknown} · 1,200 input tokens · 40 output tokens</p>' in private
    assert 'id="cost">simulator cost $0.0000 · 0 input tokens · 0 output tokens</p>' in from_state  # no model call
    assert f"cost of the 2 episode(s) listed: {unknown} · 1,200 input tokens · 40 output tokens</td>" in runs
