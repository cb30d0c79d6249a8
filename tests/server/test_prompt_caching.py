"""Provider prompt caches through the whole server: the requests the fake provider receives carry the cache hints
(OpenAI `prompt_cache_key`, Anthropic `cache_control` breakpoints), the fake's emulated caches answer as the
providers do, and each call's cached tokens and cache-priced cost are recorded in its event, on both engines."""

from __future__ import annotations

import json
from typing import Any

import httpx2 as httpx
import pytest
from mcp import Client
from simia.sim.backends import RetryPolicy, resolve_backend
from simia.testing.fake_cache import PromptCache
from simia.testing.fake_provider import FakeProvider
from simia.testing.mock_world import mock_world_answer


def simulator(provider: str, fake: FakeProvider) -> Any:
    if provider == "openai":
        return resolve_backend(
            "openai:gpt-4.1-mini", base_url=fake.base_url, env={"OPENAI_API_KEY": "k"}, retry=RetryPolicy()
        )
    return resolve_backend(
        "anthropic:claude-sonnet-4-6", base_url=fake.anthropic_url, env={"ANTHROPIC_API_KEY": "k"}, retry=RetryPolicy()
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_repeated_calls_hit_the_providers_prompt_cache_and_events_record_it(
    provider: str, db_target: str, serve_on: Any
) -> None:
    cache = PromptCache(anthropic_min=256, openai_min=512)  # the mock world's prompt is under both 1,024 minimums
    async with FakeProvider(mock_world_answer, prompt_cache=cache).running() as fake:
        backend = simulator(provider, fake)
        async with serve_on(db_target)(backend=backend) as server, httpx.AsyncClient(base_url=server.url) as http:
            episodes = [(await http.post("/v1/episodes", json={"world": "mock"})).json() for _ in range(2)]
            for episode in episodes:
                async with Client(episode["mcp_url"]) as client:
                    for name in ("apple", "rice"):
                        await client.call_tool("get_item", {"name": name})
            events = [
                event
                for episode in episodes
                for event in (await http.get(f"/v1/episodes/{episode['id']}")).json()["events"]
            ]
        await backend.aclose()
    bodies = fake.requests
    if provider == "openai":
        keys = {body["prompt_cache_key"] for body in bodies}
        assert len(keys) == 1 and keys.pop().startswith("simia-")  # one key for the world: episodes share it
    else:
        assert all(body["system"][0]["cache_control"] == {"type": "ephemeral"} for body in bodies)
        # The user message: the state section, a breakpoint, then the call and the window.
        for body in bodies:
            state, rest = body["messages"][0]["content"]
            assert state["text"].startswith("Current state:\n") and state["cache_control"] == {"type": "ephemeral"}
            assert rest["text"].startswith("Call: get_item\n") and "cache_control" not in rest
    usage = [event["usage"] for event in events]
    assert usage[0]["cached_tokens"] == 0  # the first call of the world fills the cache
    # The second episode's calls are the first's again: they read what the first episode cached.
    assert usage[2]["cached_tokens"] > 0 and usage[3]["cached_tokens"] > 0
    assert all(u["cached_tokens"] < u["prompt_tokens"] for u in usage)
    if provider == "anthropic":  # the breakpoints after the system block and the state section: every call after
        # the first reads both (the mock world's state is shown whole, the same for every call), and only the call
        # and the window are plain input
        assert all(u["cached_tokens"] > 0 for u in usage[1:])
        assert usage[0]["cache_write_tokens"] > 0 and all(u["cache_write_tokens"] == 0 for u in usage[1:])
        for body, u in zip(bodies, usage, strict=True):
            plain = u["prompt_tokens"] - u["cached_tokens"] - u["cache_write_tokens"]
            rest = body["messages"][0]["content"][1]  # plain input: what follows the state section, no more
            assert plain <= len(json.dumps(rest, sort_keys=True, separators=(",", ":"))) // 4 + 1
    assert usage[2]["cost_usd"] < usage[0]["cost_usd"]  # the same call, its cached tokens at the cache rate
