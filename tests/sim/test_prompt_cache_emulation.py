"""The fake provider's prompt caches answer as the providers document theirs: OpenAI caches prompts of 1,024+
tokens in 128-token steps per `prompt_cache_key`; Anthropic caches only up to `cache_control` breakpoints,
above a minimum length, for 5 minutes, and bills the writes apart."""

from __future__ import annotations

from typing import Any

from simia.testing.fake_cache import PromptCache


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def chat(prefix: str, tail: str, key: str | None = "k") -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt",
        "messages": [{"role": "system", "content": prefix}, {"role": "user", "content": tail}],
    }
    if key:
        body["prompt_cache_key"] = key
    return body


def test_openai_caches_long_prefixes_in_128_token_steps_per_cache_key() -> None:
    cache = PromptCache()
    stable = "x" * 4 * 2_000  # 2,000 tokens shared
    first = cache.openai_usage(chat(stable, "call one"), 10)
    second = cache.openai_usage(chat(stable, "call two"), 10)
    other_key = cache.openai_usage(chat(stable, "call two", key="other"), 10)
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["prompt_tokens_details"]["cached_tokens"]
    assert cached % 128 == 0 and 1_024 <= cached <= 2_000 < second["prompt_tokens"]
    assert other_key["prompt_tokens_details"]["cached_tokens"] == 0
    short = "y" * 4 * 900  # under the 1,024-token minimum: never cached
    cache.openai_usage(chat(short, "a"), 1)
    assert cache.openai_usage(chat(short, "a"), 1)["prompt_tokens_details"]["cached_tokens"] == 0


def message(system: str, breakpoint: bool, user: str = "call") -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": system}
    if breakpoint:
        block["cache_control"] = {"type": "ephemeral"}
    return {"model": "claude", "system": [block], "messages": [{"role": "user", "content": user}]}


def test_anthropic_caches_to_breakpoints_above_the_minimum_for_five_minutes() -> None:
    clock = Clock()
    cache = PromptCache(clock=clock)
    system = "z" * 4 * 1_500
    write = cache.anthropic_usage(message(system, True, "one"), 5)
    read = cache.anthropic_usage(message(system, True, "two"), 5)
    assert write["cache_creation_input_tokens"] > 1_500 and write["cache_read_input_tokens"] == 0
    assert (
        read["cache_read_input_tokens"] == write["cache_creation_input_tokens"]
        and read["cache_creation_input_tokens"] == 0
    )
    assert read["input_tokens"] < 10  # only what follows the breakpoint is plain input
    no_breakpoint = PromptCache(clock=clock)
    no_breakpoint.anthropic_usage(message(system, False), 5)
    assert no_breakpoint.anthropic_usage(message(system, False), 5)["cache_read_input_tokens"] == 0
    clock.now += 299  # a hit refreshes the entry ...
    assert cache.anthropic_usage(message(system, True), 5)["cache_read_input_tokens"] > 0
    clock.now += 301  # ... and five minutes without one expire it
    expired = cache.anthropic_usage(message(system, True), 5)
    assert expired["cache_read_input_tokens"] == 0 and expired["cache_creation_input_tokens"] > 0
    small = PromptCache(clock=clock)
    small.anthropic_usage(message("s" * 400, True), 5)  # 100 tokens: under the minimum, never written
    assert small.anthropic_usage(message("s" * 400, True), 5)["cache_read_input_tokens"] == 0


def blocks(texts: list[str]) -> dict[str, Any]:
    """A request whose user message is `texts` as blocks, one breakpoint on the last (as a conversation caches)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text} for text in texts]
    content[-1]["cache_control"] = {"type": "ephemeral"}
    return {"model": "claude", "messages": [{"role": "user", "content": content}]}


def test_anthropic_reads_an_earlier_breakpoint_up_to_20_blocks_back_and_writes_only_what_follows() -> None:
    cache = PromptCache()
    turns = ["t" * 4 * 1_200, *(f"turn {i} " + "u" * 400 for i in range(30))]
    first = cache.anthropic_usage(blocks(turns[:2]), 5)
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 1_200
    # The next request moves its one breakpoint 3 blocks on: the previous one's end (no marker there now) is
    # found by looking back, and only the 3 new blocks are written.
    grown = cache.anthropic_usage(blocks(turns[:5]), 5)
    assert grown["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert 0 < grown["cache_creation_input_tokens"] < 3 * 110 and grown["input_tokens"] == 0
    # 21 blocks on, the last cached end is past the lookback: nothing is read.
    far = cache.anthropic_usage(blocks(turns[:26]), 5)
    assert far["cache_read_input_tokens"] == 0
