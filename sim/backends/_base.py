"""The backend interface: one async method that turns messages and a JSON schema into parsed JSON.

`Backend.generate` is the single provider-specific method (one attempt, no retries).
`Backend.complete` wraps it with the one retry layer simia has, a per-call
deadline, a per-backend concurrency cap, and timing; callers use `complete`.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

from ..errors import BackendOutputError, BackendRejected, BackendTimeout, BackendUnavailable

__all__ = [
    "Backend",
    "Completion",
    "CompletionRequest",
    "RetryPolicy",
    "Retryable",
    "ToolRequest",
    "Usage",
    "parse_json_object",
    "priced_usage",
    "retry_after_seconds",
    "status_failure",
]


@dataclass(frozen=True)
class Usage:
    """Tokens and money one or more model calls cost.

    `prompt_tokens` counts every input token, those a provider served from its prompt cache included:
    `cached_tokens` of them were read from the cache (billed at the provider's cache-read rate) and
    `cache_write_tokens` were written to it (Anthropic bills a write above the plain input rate). OpenAI's
    `prompt_tokens` already include its `cached_tokens`; Anthropic's `input_tokens` do not, and its backend adds
    `cache_read_input_tokens` and `cache_creation_input_tokens` to them.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    calls: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        cost = (
            None if self.cost_usd is None and other.cost_usd is None else (self.cost_usd or 0) + (other.cost_usd or 0)
        )
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            cost,
            self.calls + other.calls,
            self.cached_tokens + other.cached_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Usage:
        """A usage as `as_dict` wrote it (an event's or a verdict's); missing counts are 0, a missing cost null."""
        counts = {k: int(data.get(k) or 0) for k in ("prompt_tokens", "completion_tokens", "calls")}
        cache = {k: int(data.get(k) or 0) for k in ("cached_tokens", "cache_write_tokens")}
        cost = data.get("cost_usd")
        return cls(cost_usd=float(cost) if isinstance(cost, int | float) else None, **counts, **cache)

    def describe(self) -> str:
        """One summary line: model calls, input tokens (the cached ones among them), output tokens, and USD in all
        and per 1,000 model calls (`cost unknown` when a model had no price)."""
        if self.cost_usd is None:
            cost = "cost unknown (a model without a known price: set one with --price)"
        else:
            per = f" (${self.cost_usd / self.calls * 1000:.2f} per 1,000 model calls)" if self.calls else ""
            cost = f"${self.cost_usd:.4f}{per}"
        return (
            f"{self.calls:,} model calls: input {self.prompt_tokens:,} tokens ({self.cached_tokens:,} cached), "
            f"output {self.completion_tokens:,}; {cost}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost_usd": self.cost_usd,
            "calls": self.calls,
        }


@dataclass(frozen=True)
class CompletionRequest:
    """One structured model request.

    Attributes:
        messages: OpenAI-style chat messages (`system`, `user`, `assistant`).
        schema: the JSON Schema the answer must satisfy (an object schema).
        schema_name: a short name for the schema (some providers require one).
        max_tokens: cap on generated tokens; always sent (local servers default to unbounded).
        temperature: sampling temperature.
        seed: sampling seed, where the provider supports one.
        key: the response-cache key of this request, when it has one (used by `replay:`).
        cache_key: the provider prompt-cache key: requests that share it share a stable prefix (the simulator's:
            one per world and prompt version, so all episodes of a world share one cache). OpenAI routes on it
            (`prompt_cache_key`); a backend that has no such parameter ignores it.
        cache_breaks: where parts of the first user message that later requests may repeat end (character
            offsets, ascending; the simulator's: after the state section). A backend whose cache breakpoints
            are explicit (Anthropic) sends that message as text blocks split there, each part but the last
            marked as a breakpoint; the others send it whole (their caches find shared prefixes themselves).
    """

    messages: list[dict[str, Any]]
    schema: dict[str, Any]
    schema_name: str = "response"
    max_tokens: int = 1024
    temperature: float = 0.7
    seed: int | None = None
    key: str | None = None
    cache_key: str | None = None
    cache_breaks: tuple[int, ...] = ()


@dataclass(frozen=True)
class ToolRequest:
    """A native tool-calling turn: OpenAI-format messages (tool calls and tool results included) and tools.

    Attributes:
        messages: the conversation, in OpenAI chat format.
        tools: OpenAI function tools, `{"type": "function", "function": {"name", "description", "parameters"}}`.
        seed: sampling seed, where the provider supports one.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_tokens: int = 1024
    temperature: float = 0.7
    seed: int | None = None


@dataclass(frozen=True)
class Completion:
    """A backend's answer: the parsed JSON object, the raw text, usage and the answering attempt's latency."""

    data: dict[str, Any]
    text: str
    model: str
    usage: Usage = field(default_factory=Usage)
    latency_ms: float = 0.0


class Retryable(Exception):
    """Raised by `Backend.generate` for failures worth retrying (connection, 429, 5xx, timeout).

    `reason` names the kind for `Backend.failures` (and `/metrics`): `rate_limited`, `server_error`,
    `timeout`, `connection` or `unavailable`.
    """

    def __init__(self, message: str, retry_after: float | None = None, *, reason: str = "unavailable") -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.reason = reason


@dataclass(frozen=True)
class RetryPolicy:
    """simia's single retry layer (provider SDK retries are always off).

    Attributes:
        max_attempts: total attempts per call, the first included.
        base_delay: first backoff in seconds; doubles each retry, with full jitter.
        max_delay: cap on one backoff.
        max_retry_after: cap on an honoured Retry-After; a longer one fails the call at once.
        deadline: seconds one call may take in all, retries and waits included.
        sleep: the sleep function (tests inject one that records delays instead of waiting).
    """

    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 30.0
    deadline: float = 120.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return max(0.0, retry_after)
        return random.uniform(0, min(self.max_delay, self.base_delay * 2**attempt))


def parse_json_object(text: str) -> dict[str, Any]:
    """Parse a model's text as one JSON object (tolerating a ```json fence, and raw control characters such as a
    line break inside a string: grammar-constrained decoding lets a small model write them, and what it meant is
    plain).

    Raises:
        BackendOutputError: the text is not a JSON object.
    """
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    try:
        data = json.loads(body, strict=False)  # strict=False: control characters are allowed inside strings
    except json.JSONDecodeError as exc:
        problem = exc.msg.removesuffix(" at")  # "Invalid control character at": the position follows
        raise BackendOutputError(
            f"model output is not valid JSON ({problem} at char {exc.pos}): {text[:120]!r}"
        ) from None
    if not isinstance(data, dict):
        raise BackendOutputError(f"model output is JSON but not an object: {text[:120]!r}")
    return data


class Backend(ABC):
    """A model that answers structured requests.

    Subclasses implement `generate` (one attempt); they raise `Retryable` for
    transient failures and `BackendRejected` / `BackendOutputError` otherwise.
    """

    spec: str = "backend"
    model: str = ""

    @property
    def answers_synchronously(self) -> bool:
        """Whether `generate` answers without ever suspending (a scripted answer, a function). The
        deadline timer is then not armed: an asyncio timeout cannot interrupt code that never awaits."""
        return False

    def __init__(self, *, max_concurrency: int = 16, retry: RetryPolicy | None = None) -> None:
        self.max_concurrency = max_concurrency
        self.retry = retry or RetryPolicy()
        self._semaphore: asyncio.Semaphore | None = None
        self.failures: Counter[str] = Counter()
        """Failed attempts by kind: a `Retryable`'s reason, `deadline`, `malformed` (output) or `rejected`."""

    @abstractmethod
    async def generate(self, request: CompletionRequest, timeout: float) -> Completion:
        """Make one attempt at `request`, giving up after `timeout` seconds."""

    async def complete(self, request: CompletionRequest) -> Completion:
        """Answer `request` with retries, the deadline and the concurrency cap applied.

        Raises:
            BackendTimeout: the deadline passed.
            BackendUnavailable: retryable failures outlasted `max_attempts`.
            BackendRejected, BackendOutputError: failures retrying cannot fix.
        """
        return await self._resilient(lambda timeout: self.generate(request, timeout))

    supports_tools: bool = False
    """Whether `complete_tools` (the provider's native tool calling) is available."""

    async def generate_tools(self, request: ToolRequest, timeout: float) -> Completion:
        """One attempt at a native tool-calling turn; providers that have one override it."""
        raise NotImplementedError(f"{self.spec} has no native tool calling; use a structured action instead")

    async def complete_tools(self, request: ToolRequest) -> Completion:
        """A native tool-calling turn (`data` = {"message", "tool_calls": [{"id", "name", "arguments"}]}), with
        the same retries, deadline and concurrency cap as `complete`."""
        return await self._resilient(lambda timeout: self.generate_tools(request, timeout))

    async def _resilient(self, attempt: Callable[[float], Awaitable[Completion]]) -> Completion:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
        policy = self.retry
        start = time.monotonic()
        deadline = start + policy.deadline
        last, attempts, timed_out = "", 0, False
        async with self._semaphore:
            while attempts < policy.max_attempts:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                attempts += 1
                try:
                    if self.answers_synchronously:  # nothing to interrupt: no deadline timer to arm
                        completion = await attempt(remaining)
                    else:
                        async with asyncio.timeout(remaining):
                            completion = await attempt(remaining)
                except TimeoutError:
                    self.failures["deadline"] += 1
                    timed_out = True
                    break
                except BackendOutputError:
                    self.failures["malformed"] += 1
                    raise
                except BackendRejected:
                    self.failures["rejected"] += 1
                    raise
                except Retryable as exc:
                    self.failures[exc.reason] += 1
                    last = str(exc)
                    if exc.retry_after is not None and exc.retry_after > policy.max_retry_after:
                        raise BackendUnavailable(
                            f"{self.spec}: {last}; Retry-After {exc.retry_after:.0f}s exceeds the "
                            f"{policy.max_retry_after:.0f}s cap"
                        ) from None
                    if attempts >= policy.max_attempts:
                        break
                    delay = policy.backoff(attempts - 1, exc.retry_after)
                    if time.monotonic() + delay >= deadline:
                        timed_out = True
                        break
                    await policy.sleep(delay)
                    continue
                return completion
        detail = f" (last error: {last})" if last else ""
        if timed_out:
            raise BackendTimeout(f"{self.spec}: no answer within the {policy.deadline:g}s deadline{detail}")
        raise BackendUnavailable(f"{self.spec}: gave up after {attempts} attempts{detail}")

    async def aclose(self) -> None:
        """Release connections; the default has nothing to release."""


def retry_after_seconds(headers: Any) -> float | None:
    """Read `retry-after-ms` or `retry-after` (seconds or an HTTP date) from response headers."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return float(millis) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def priced_usage(
    prompt: int, completion: int, price: tuple[float, ...] | None, *, cached: int = 0, cache_write: int = 0
) -> Usage:
    """Usage of one call, with its cost when the model's price is known: USD per million (input, output) tokens,
    optionally followed by the cache-read and cache-write rates. A rate not given is the input rate (an upper
    bound: a cached token is never billed above a plain one except by a cache write, and a guess below it could
    flatter a run). `cached` and `cache_write` are among the `prompt` tokens."""
    cost = None
    if price:
        read_rate = price[2] if len(price) > 2 else price[0]
        write_rate = price[3] if len(price) > 3 else price[0]
        plain = max(prompt - cached - cache_write, 0)
        cost = (plain * price[0] + cached * read_rate + cache_write * write_rate + completion * price[1]) / 1e6
    return Usage(prompt, completion, cost, 1, cached, cache_write)


def status_failure(spec: str, status: int, body: Any, fallback: str, headers: Any) -> Exception:
    """A provider's HTTP error as simia's retry layer sees it: `Retryable` for 408/409/429/5xx, else rejected."""
    message = fallback
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            message = str(error["message"])
    message = message[:300]
    if status in (408, 409, 429) or status >= 500:
        reason = "rate_limited" if status == 429 else "server_error" if status >= 500 else "unavailable"
        return Retryable(f"HTTP {status}: {message}", retry_after_seconds(headers), reason=reason)
    return BackendRejected(f"{spec}: HTTP {status}: {message}")
