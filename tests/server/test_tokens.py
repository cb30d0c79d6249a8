"""Bearer tokens: plain tokens are taken byte for byte, named tokens name their principal, lookups are constant time."""

from __future__ import annotations

import hmac
from typing import Any

import httpx2 as httpx
import pytest
from simia.server.settings import ServerSettings, parse_named_token, principal_for_token

BASE64_TOKEN = "c2VjcmV0LXRva2Vu=="  # base64 of "secret-token": padding is part of the secret


def bearer(token: str | bytes) -> dict[str, Any]:
    return {"authorization": b"Bearer " + token if isinstance(token, bytes) else "Bearer " + token}


async def test_a_base64_token_with_padding_is_accepted_verbatim_over_http(make_server: Any) -> None:
    settings = ServerSettings(tokens=(BASE64_TOKEN,))
    async with make_server(settings) as server, httpx.AsyncClient(base_url=server.url) as http:
        created = await http.post("/v1/episodes", json={"world": "mock"}, headers=bearer(BASE64_TOKEN))
        assert created.status_code == 201
        episode = created.json()["id"]
        assert (await http.get(f"/v1/episodes/{episode}", headers=bearer(BASE64_TOKEN))).status_code == 200
        for near_miss in ("=", "==", "c2VjcmV0LXRva2Vu", "c2VjcmV0LXRva2Vu="):
            assert (await http.get("/v1/worlds", headers=bearer(near_miss))).status_code == 401


async def test_a_wrong_token_gets_401_naming_the_fix(make_server: Any) -> None:
    settings = ServerSettings(tokens=(BASE64_TOKEN,), named_tokens=(("alice", "a-secret"),))
    async with make_server(settings) as server, httpx.AsyncClient(base_url=server.url) as http:
        wrong = await http.get("/v1/worlds", headers=bearer("alice=a-secret"))
        missing = await http.get("/v1/worlds")
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == 'Bearer realm="simia"'
    assert wrong.json()["error"] == {
        "code": "unauthorized",
        "message": "unknown bearer token; "
        "send 'Authorization: Bearer <token>' with a token given to simia serve --token",
    }
    assert missing.status_code == 401 and "missing bearer token" in missing.json()["error"]["message"]


async def test_a_named_token_maps_to_its_principal_and_a_principal_may_hold_several(make_server: Any) -> None:
    settings = ServerSettings(named_tokens=(("alice", "YWxpY2Ux=="), ("alice", "rotated:key"), ("bob", "Ym9i")))
    async with make_server(settings) as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"}, headers=bearer("YWxpY2Ux=="))).json()
        as_alice_again = await http.get(f"/v1/episodes/{episode['id']}", headers=bearer("rotated:key"))
        as_bob = await http.get(f"/v1/episodes/{episode['id']}", headers=bearer("Ym9i"))
        by_name = await http.get("/v1/worlds", headers=bearer("alice"))
    assert as_alice_again.status_code == 200 and as_bob.status_code == 404
    assert by_name.status_code == 401  # a principal's name is not a secret


async def test_a_non_ascii_token_matches_the_utf8_bytes_a_client_sends(make_server: Any) -> None:
    settings = ServerSettings(tokens=("pässwört",))
    async with make_server(settings) as server, httpx.AsyncClient(base_url=server.url) as http:
        ok = await http.get("/v1/worlds", headers=bearer("pässwört".encode()))
        latin1 = await http.get("/v1/worlds", headers=bearer("pässwört".encode("latin-1")))
    assert (ok.status_code, latin1.status_code) == (200, 401)


def test_principals_of_plain_and_named_tokens() -> None:
    settings = ServerSettings(tokens=(BASE64_TOKEN, "a:b@c"), named_tokens=(("ci-bot.1", "x=y=="),))
    assert settings.principal_for(BASE64_TOKEN) == principal_for_token(BASE64_TOKEN)
    assert principal_for_token(BASE64_TOKEN).startswith("token-") and len(principal_for_token(BASE64_TOKEN)) == 18
    assert settings.principal_for("a:b@c") == principal_for_token("a:b@c")
    assert settings.principal_for(b"x=y==") == "ci-bot.1"
    assert settings.principal_for("x") is None and settings.principal_for("") is None
    assert settings.requires_token and not ServerSettings().requires_token


def test_a_lookup_compares_against_every_token_even_after_a_match(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = ServerSettings(tokens=("first", "second"), named_tokens=(("alice", "third"),))
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    assert settings.principal_for("third") == "alice"
    assert settings.principal_for("first") == principal_for_token("first")
    assert settings.principal_for("nope") is None
    assert len(compared) == 9 and {len(a) for pair in compared for a in pair} == {32}


def test_parse_named_token_splits_at_the_first_equals_sign_only() -> None:
    assert parse_named_token("alice=c2VjcmV0LXRva2Vu==") == ("alice", "c2VjcmV0LXRva2Vu==")
    assert parse_named_token("ci_bot-2.x==a=b") == ("ci_bot-2.x", "=a=b")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("c2VjcmV0LXRva2Vu", "expected NAME=SECRET"),
        ("alice=", "expected NAME=SECRET"),
        ("=secret", "bad principal name ''"),
        ("al ice=secret", "bad principal name 'al ice'"),
        ("alice:x=secret", "bad principal name 'alice:x'"),
    ],
)
def test_parse_named_token_rejects_malformed_input_and_says_the_form(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_named_token(text)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tokens": ("",)}, "cannot be empty"),
        ({"tokens": ("secret\n",)}, "surrounding spaces or control characters"),
        ({"tokens": (" secret",)}, "surrounding spaces or control characters"),
        ({"named_tokens": (("alice", "same"), ("bob", "same"))}, "two principals, 'alice' and 'bob'"),
        ({"named_tokens": (("alice", "same"),), "tokens": ("same",)}, "also the secret of principal 'alice'"),
        ({"named_tokens": (("a=b", "secret"),)}, "bad principal name 'a=b'"),
    ],
)
def test_settings_refuse_tokens_no_request_could_match_or_that_are_ambiguous(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ServerSettings(**kwargs)


def test_settings_never_print_their_secrets() -> None:
    assert "hunter2" not in repr(ServerSettings(tokens=("hunter2",), named_tokens=(("alice", "hunter2x"),)))
