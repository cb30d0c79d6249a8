"""One token's live episodes cannot take the server from another's: past `--max-live-episodes-per-principal` a
token's next episode (created or forked) is a 429 with Retry-After naming the flag, while another token still
creates; past the server's own `--max-live-episodes`, everyone gets the 503 as before."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx
from simia.server import ServerSettings

TOKENS = (("alice", "alice-secret"), ("bob", "bob-secret"))
ALICE, BOB = ({"Authorization": f"Bearer {secret}"} for _, secret in TOKENS)


async def test_a_tokens_own_limit_of_live_episodes_is_a_429_and_leaves_room_for_others(make_server: Any) -> None:
    settings = ServerSettings(named_tokens=TOKENS, max_live_episodes=5, max_live_episodes_per_principal=3)
    async with make_server(settings) as server, httpx.AsyncClient(base_url=server.url) as http:
        made = [await http.post("/v1/episodes", json={"world": "mock"}, headers=ALICE) for _ in range(3)]
        assert [m.status_code for m in made] == [201, 201, 201]
        over = await http.post("/v1/episodes", json={"world": "mock"}, headers=ALICE)
        fork = await http.post(f"/v1/episodes/{made[0].json()['id']}/fork", json={}, headers=ALICE)
        bobs = [await http.post("/v1/episodes", json={"world": "mock"}, headers=BOB) for _ in range(2)]
        full = await http.post("/v1/episodes", json={"world": "mock"}, headers=BOB)
        await http.post(f"/v1/episodes/{made[0].json()['id']}/end", json={}, headers=ALICE)
        again = await http.post("/v1/episodes", json={"world": "mock"}, headers=ALICE)
    assert (over.status_code, over.headers.get("retry-after"), over.json()["error"]["code"]) == (
        429,
        "30",
        "too_many_episodes",
    )
    assert "--max-live-episodes-per-principal 3" in over.json()["error"]["message"]
    assert fork.status_code == 429
    assert [b.status_code for b in bobs] == [201, 201]  # bob is not locked out by alice's episodes
    assert full.status_code == 503  # the server's own cap (5) holds for everyone
    assert again.status_code == 201  # an ended episode is not live: room again
