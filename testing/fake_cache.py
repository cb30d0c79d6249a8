"""Provider prompt caches, emulated for the fake provider: hit rates are measured, never assumed.

`PromptCache` counts a request's prompt tokens (one token per 4 characters of its serialized prefix parts, in
the order the provider reads them) and reports what the provider's cache would have served, in the provider's
own usage fields:

- **OpenAI** (automatic): a prompt of at least 1,024 tokens (`openai_min`) is cached in 128-token steps; a
  later request with the same `prompt_cache_key` (or, without one, the same model) reads the longest cached
  prefix it shares, as
  `usage.prompt_tokens_details.cached_tokens` (included in `prompt_tokens`). The prefix is the response
  format's schema, then the messages in order. Entries live `openai_ttl` seconds (5-10 minutes of inactivity
  on the real API) and each hit refreshes its prefix.
- **Anthropic** (explicit): only prefixes ending at a `cache_control` breakpoint are cached (tools, then the
  system blocks, then the messages), each at least `anthropic_min` tokens (1,024 on Sonnet and Opus); a request
  reads the longest cached prefix ending at one of its breakpoints or at a block boundary up to `LOOKBACK`
  blocks before one, as the API looks back for an earlier request's breakpoint (`cache_read_input_tokens`),
  writes the rest up to its last
  breakpoint (`cache_creation_input_tokens`, billed above plain input), and `input_tokens` counts only what
  follows it. Entries live 5 minutes, refreshed by each hit.

`clock` is injectable so a test can age the cache without sleeping.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

__all__ = ["PromptCache"]

CHARS_PER_TOKEN = 4
OPENAI_MIN, OPENAI_STEP = 1_024, 128
LOOKBACK = 20
"""Anthropic looks for a cached prefix at a breakpoint and at the block ends before it: this many blocks in all."""


class PromptCache:
    """The caches of one fake provider (see the module docstring)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        openai_ttl: float = 300.0,
        anthropic_ttl: float = 300.0,
        anthropic_min: int = 1_024,
        openai_min: int = OPENAI_MIN,
    ) -> None:
        self.clock = clock
        self.openai_ttl, self.anthropic_ttl, self.anthropic_min = openai_ttl, anthropic_ttl, anthropic_min
        self.openai_min = openai_min  # the real API's 1,024; smaller only for tests of short prompts
        self._entries: dict[str, float] = {}  # prefix digest -> when it expires
        self._pruned_at = 0  # entries held after the last sweep of the expired ones

    def _prune(self, now: float) -> None:
        """Forget expired prefixes once the cache has doubled since the last sweep (a long benchmark stays small)."""
        if len(self._entries) > max(2 * self._pruned_at, 10_000):
            self._entries = {digest: until for digest, until in self._entries.items() if until > now}
            self._pruned_at = len(self._entries)

    def openai_usage(self, body: dict[str, Any], completion_tokens: int) -> dict[str, Any]:
        """`usage` of a chat-completions answer to `body`."""
        text = _json(body.get("response_format")) + "".join(_json(m) for m in body.get("messages") or [])
        tokens = _tokens(text)
        scope = "openai:" + str(body.get("prompt_cache_key") or body.get("model"))
        cached = 0
        if tokens >= self.openai_min:
            boundaries = range(self.openai_min, tokens + 1, OPENAI_STEP)
            digests = [_digest(scope, text[: b * CHARS_PER_TOKEN]) for b in boundaries]
            now = self.clock()
            for boundary, digest in zip(boundaries, digests, strict=True):
                if self._entries.get(digest, -1.0) > now:
                    cached = boundary
            for digest in digests:  # this prompt's prefixes are cached (or refreshed) for the next request
                self._entries[digest] = now + self.openai_ttl
            self._prune(now)
        return {
            "prompt_tokens": tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached},
        }

    def anthropic_usage(self, body: dict[str, Any], output_tokens: int) -> dict[str, Any]:
        """`usage` of a Messages API answer to `body`."""
        parts = _anthropic_parts(body)
        text, bounds, ends = "", [], []  # the prefix text, where each block ends it, where each breakpoint does
        for part, breakpoint in parts:
            text += part
            bounds.append(len(text))
            if breakpoint:
                ends.append(len(bounds) - 1)
        tokens = _tokens(text)
        now = self.clock()
        scope = "anthropic:" + str(body.get("model"))
        read = 0
        for block in ends:  # a breakpoint reads the longest cached prefix ending at it or at one of the
            for end in reversed(bounds[max(0, block - LOOKBACK + 1) : block + 1]):  # blocks before it
                if self._entries.get(_digest(scope, text[:end]), -1.0) > now:
                    read = max(read, _tokens(text[:end]))
                    break
        ends = [bounds[block] for block in ends]
        written = 0
        for end in ends:
            size = _tokens(text[:end])
            if size < self.anthropic_min:
                continue
            digest = _digest(scope, text[:end])
            if self._entries.get(digest, -1.0) <= now and size > read:
                written = max(written, size - read)
            self._entries[digest] = now + self.anthropic_ttl
        self._prune(now)
        return {
            "input_tokens": tokens - read - written,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
            "output_tokens": output_tokens,
        }


def _anthropic_parts(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """The request as Anthropic reads it for caching: tools, system blocks, then message blocks, each with whether
    it carries a `cache_control` breakpoint."""
    parts: list[tuple[str, bool]] = [
        (_json(_content(tool)), "cache_control" in tool) for tool in body.get("tools") or []
    ]
    system = body.get("system")
    blocks = [{"type": "text", "text": system}] if isinstance(system, str) else list(system or [])
    parts += [(_json(block.get("text")), "cache_control" in block) for block in blocks]
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            parts.append((_json(message.get("role")) + _json(content), False))
        else:
            parts += [
                (_json(_content(block)), isinstance(block, dict) and "cache_control" in block)
                for block in content or []
            ]
    return parts


def _content(block: Any) -> Any:
    """A block as the cache compares it: its content, not its breakpoint marker."""
    return {k: v for k, v in block.items() if k != "cache_control"} if isinstance(block, dict) else block


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _digest(scope: str, prefix: str) -> str:
    return hashlib.sha256(f"{scope}\0{prefix}".encode()).hexdigest()
