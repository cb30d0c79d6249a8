"""Failed authentication is slowed per client address: past 5 wrong tokens in 60 s, each further wrong one is a 429
with Retry-After, while a correct token from the same address is answered as ever; an address's tries come back as
its old failures leave the window."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx
from simia.server import ServerSettings
from simia.server.middleware import FailedLogins

TOKENS = (("alice", "alice-secret"),)


async def test_past_five_wrong_tokens_a_wrong_one_is_a_429_and_a_correct_one_still_passes(make_server: Any) -> None:
    settings = ServerSettings(named_tokens=TOKENS)
    async with make_server(settings) as server, httpx.AsyncClient(base_url=server.url) as http:
        wrong = [await http.get("/v1/episodes", headers={"Authorization": f"Bearer guess-{i}"}) for i in range(7)]
        right = await http.get("/v1/episodes", headers={"Authorization": "Bearer alice-secret"})
        missing = await http.get("/v1/episodes")
    assert [w.status_code for w in wrong] == [401] * 5 + [429, 429]
    assert wrong[5].json()["error"]["code"] == "too_many_failed_logins"
    assert 1 <= int(wrong[5].headers["retry-after"]) <= 60
    assert right.status_code == 200  # a correct token is never slowed
    assert missing.status_code == 401  # no token guesses nothing: a plain 401


def test_an_addresss_tries_come_back_as_its_failures_leave_the_window() -> None:
    now = [0.0]
    logins = FailedLogins(limit=2, window=10.0, clock=lambda: now[0])
    waits = []
    for t in (0.0, 1.0, 2.0):
        now[0] = t
        waits.append(logins.failed("10.0.0.1"))
    assert waits == [0, 0, 9]  # the third failure waits until the one at 1.0 leaves the window (11.0)
    assert logins.failed("10.0.0.2") == 0  # another address has its own count
    now[0] = 11.0
    assert logins.failed("10.0.0.1") == 0
