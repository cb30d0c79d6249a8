"""ORS and OpenEnv sessions are fair between tokens (`simia.server.sessions`): one token's flood of bare sessions
takes room only from its own idle sessions, so another token's session with an episode in progress keeps working;
a token at its limit with nothing idle gets 429 with Retry-After naming `--max-sessions-per-principal`, and so does
a token that finds the server's cap held by others. In-process: the main app and the ORS listener on their own
ports, small caps (the server's 12 ORS sessions and 48 OpenEnv ones, 5 a token), the mock world's flawless fake."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from simia.clients.prompt import agent_system_prompt
from simia.server import ServerSettings, build_server, serving
from simia.server.ors import OrsApp
from simia.server.sessions import SessionBook, TooManySessions
from simia.sim.backends import FunctionBackend
from simia.sim.storage import open_store
from simia.sim.world import load_worlds

ROOT = Path(__file__).resolve().parents[2]
TOKENS = (("alice", "alice-secret"), ("bob", "bob-secret"), ("carol", "carol-secret"))


def read_milk(_: Any) -> dict[str, Any]:
    return {"is_error": False, "output": {"name": "milk", "qty": 2, "unit": "l"}, "state_patch": []}


def events_of(text: str) -> dict[str, str]:
    return dict(re.findall(r"^event: (\w+)\ndata: (.*)$", text, flags=re.M))


@contextlib.asynccontextmanager
async def served(tmp_path: Path) -> AsyncIterator[tuple[int, int]]:
    worlds = load_worlds([ROOT / "tool_specs"]).worlds
    store = open_store(tmp_path / "simia.db")
    settings = ServerSettings(named_tokens=TOKENS, max_sessions=12, max_sessions_per_principal=5)
    app = build_server({"mock": worlds["mock"]}, FunctionBackend(read_milk), store, settings)
    ors = OrsApp(app.service, app.settings, app.drain, system_prompt=agent_system_prompt, rewards=app.rewards)
    try:
        async with serving(app) as api_port, serving(ors) as ors_port:
            yield api_port, ors_port
    finally:
        await store.close()


def client(port: int, name: str) -> httpx.AsyncClient:
    secret = dict(TOKENS)[name]
    headers = {"Authorization": f"Bearer {secret}"}
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30)


async def session(http: httpx.AsyncClient) -> httpx.Response:
    return await http.post("/create_session", json={})


async def busy_session(http: httpx.AsyncClient) -> str:
    """A session that made a call: its episode is in progress."""
    sid = events_of((await session(http)).text)["task_id"]
    created = await http.post("/create", json={"split": "train", "index": 0}, headers={"X-Session-ID": sid})
    assert created.status_code == 200, created.text
    await call(http, sid)
    return sid


async def call(http: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    answer = await http.post(
        "/mock/call", json={"name": "get_item", "input": {"name": "milk"}}, headers={"X-Session-ID": sid}
    )
    assert answer.status_code == 200, answer.text
    return dict(json.loads(events_of(answer.text)["end"]))


async def test_a_flood_of_bare_ors_sessions_never_evicts_another_tokens_session_and_limits_answer_429(
    tmp_path: Path,
) -> None:
    async with (
        served(tmp_path) as (_, ors_port),
        client(ors_port, "alice") as alice,
        client(ors_port, "bob") as bob,
        client(ors_port, "carol") as carol,
    ):
        alices = await busy_session(alice)
        flood = [events_of((await session(bob)).text)["task_id"] for _ in range(40)]  # 8x bob's share
        assert (await call(alice, alices))["ok"] is True  # alice's session lives on
        gone = await bob.post(
            "/mock/call", json={"name": "list_items", "input": {}}, headers={"X-Session-ID": flood[0]}
        )
        assert gone.status_code == 404  # bob's own oldest idle sessions made room for his newer ones
        bobs = [await busy_session(bob) for _ in range(5)]  # his idle ones give way to busy ones
        refused = await session(bob)
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "30"
        assert "--max-sessions-per-principal 5" in refused.text, refused.text
        carols = [await busy_session(carol) for _ in range(5)]
        assert (await session(carol)).status_code == 429
        for sid in bobs:
            assert (await call(bob, sid))["ok"] is True
        assert len(carols) == 5
        # the server's cap (12) is held by alice's 1, bob's 5 and carol's 5 busy sessions: one more fits
        assert (await session(alice)).status_code == 200
        full = await session(alice)  # 12 held, alice's idle one is hers to give up
        assert full.status_code == 200


async def test_openenv_sessions_over_a_tokens_limit_come_from_its_own_idle_ones(tmp_path: Path) -> None:
    async with served(tmp_path) as (api_port, _), client(api_port, "alice") as alice, client(api_port, "bob") as bob:
        create = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
        mine = (await alice.post("/openenv/mock/mcp", json=create)).json()["result"]["session_id"]
        listed = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "get_item", "arguments": {"name": "milk"}, "session_id": mine},
        }
        assert "result" in (await alice.post("/openenv/mock/mcp", json=listed)).json()
        for _ in range(60):  # past the server's 48: bob's own idle sessions give way
            answer = (await bob.post("/openenv/mock/mcp", json=create)).json()
            assert "result" in answer, answer
        again = (await alice.post("/openenv/mock/mcp", json=listed)).json()
        assert "result" in again, again


def test_the_book_refuses_with_the_flag_and_gives_up_only_the_requesters_idle_sessions() -> None:
    book: SessionBook[dict[str, bool]] = SessionBook(
        "test sessions", total=3, per_principal=2, flag="--max-x", idle=lambda s: not s["busy"]
    )
    book.add("a1", "a", {"busy": True})
    book.add("b1", "b", {"busy": False})
    book.add("b2", "b", {"busy": True})
    book.add("b3", "b", {"busy": False})  # b's limit: its idle b1 goes
    assert "b1" not in book and {"a1", "b2", "b3"} <= set(book._all)
    with pytest.raises(TooManySessions, match="the server holds its limit of 3 test sessions"):
        book.add("a2", "a", {"busy": False})  # full, and a has nothing idle: b's idle b3 is not a's to take
    book.get("b3")["busy"] = True  # type: ignore[index]
    with pytest.raises(TooManySessions, match="--max-x 2"):
        book.add("b4", "b", {"busy": False})
