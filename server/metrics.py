"""Prometheus metrics of one server: plain counters updated on the event loop, rendered on scrape.

prometheus_client's metric objects take a lock on every update, and a tool call makes
five. Here a call adds to dictionaries (the event loop is their only writer) and
`/metrics` renders them through a collector in the server's own registry (so several
apps in one process do not collide).
"""

from __future__ import annotations

import asyncio
import bisect
from collections import Counter
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["LATENCY_BUCKETS", "Metrics"]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    """What `/metrics` reports: tool calls, errors, latency, live and created episodes, backend tokens, cost,
    failed model requests (`backend_failures`: the backend's own counter, shared), and the event loop's tasks."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str, str]] = Counter()  # (world, tool, outcome)
        self.errors: Counter[tuple[str, str, str]] = Counter()  # (world, kind, code)
        self.latency: dict[str, list[float]] = {}  # world -> per-bucket counts (+Inf last), then the sum
        self.episodes: Counter[str] = Counter()  # world -> created
        self.tokens: Counter[str] = Counter({"prompt": 0, "completion": 0, "cached": 0, "cache_write": 0})
        self.cost_usd = 0.0
        self.live = 0
        self.conflicts = 0  # calls run again because another process committed a call of their episode first
        self.caught_up = 0  # calls whose cached episode first took the events another process committed
        self.patch_bytes = 0  # the state patches' bytes (a call's own write cost: nothing else state-sized is written)
        self.large_patches = 0  # state patches over `LARGE_PATCH_BYTES`
        self.backend_failures: Counter[str] = Counter()  # the simulator backend's failed attempts, by kind
        self.judge_tokens: Counter[str] = Counter({"prompt": 0, "completion": 0})
        self.judge_cost_usd = 0.0
        self.judged = 0  # verdicts the judge gave (a repeated end gives none)
        self.registry = CollectorRegistry()
        self.registry.register(_Collector(self))

    def call(
        self,
        world: str,
        tool: str,
        outcome: str,
        seconds: float,
        *,
        error: tuple[str, str] | None = None,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cost_usd: float = 0.0,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> None:
        """Count one answered tool call (`error`: its kind and code when it was an error; `cached_tokens` and
        `cache_write_tokens`: of its prompt tokens, those read from and written to the provider's prompt cache)."""
        self.calls[(world, tool, outcome)] += 1
        if error is not None:
            self.errors[(world, *error)] += 1
        histogram = self.latency.get(world)
        if histogram is None:
            histogram = self.latency[world] = [0.0] * (len(LATENCY_BUCKETS) + 2)
        histogram[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        histogram[-1] += seconds
        if prompt_tokens:
            self.tokens["prompt"] += prompt_tokens
        if completion_tokens:
            self.tokens["completion"] += completion_tokens
        if cached_tokens:
            self.tokens["cached"] += cached_tokens
        if cache_write_tokens:
            self.tokens["cache_write"] += cache_write_tokens
        self.cost_usd += cost_usd

    def judgement(self, usage: dict[str, Any]) -> None:
        """Count one verdict the judge gave, with its tokens and cost (`Verdict.usage`)."""
        self.judged += 1
        for kind in ("prompt", "completion", "cached", "cache_write"):
            if usage.get(f"{kind}_tokens"):
                self.judge_tokens[kind] += int(usage[f"{kind}_tokens"])
        self.judge_cost_usd += float(usage.get("cost_usd") or 0.0)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _tasks() -> int:
    """The tasks of the running event loop (0 when scraped outside one): a leak of tasks shows here first."""
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:
        return 0


class _Collector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        calls = CounterMetricFamily("simia_tool_calls", "Tool calls answered", labels=["world", "tool", "outcome"])
        for labels, count in sorted(m.calls.items()):
            calls.add_metric(list(labels), count)
        yield calls
        errors = CounterMetricFamily(
            "simia_tool_errors", "Tool calls answered with isError, by kind and code", labels=["world", "kind", "code"]
        )
        for labels, count in sorted(m.errors.items()):
            errors.add_metric(list(labels), count)
        yield errors
        latency = HistogramMetricFamily(
            "simia_tool_call_latency_seconds", "Tool call latency, simulation and commit included", labels=["world"]
        )
        for world, histogram in sorted(m.latency.items()):
            cumulative, buckets = 0.0, list[tuple[str, float]]()
            for bound, in_bucket in zip([*map(floatToGoString, LATENCY_BUCKETS), "+Inf"], histogram[:-1], strict=True):
                cumulative += in_bucket
                buckets.append((bound, cumulative))
            latency.add_metric([world], buckets, histogram[-1])
        yield latency
        yield GaugeMetricFamily("simia_live_episodes", "Active episodes", value=m.live)
        yield GaugeMetricFamily("simia_asyncio_tasks", "asyncio tasks alive in the server's event loop", value=_tasks())
        yield CounterMetricFamily(
            "simia_episode_conflicts",
            "Calls run again because another replica committed a call of their episode first",
            value=m.conflicts,
        )
        yield CounterMetricFamily(
            "simia_episode_catch_ups",
            "Calls whose cached episode first took the events another replica committed since",
            value=m.caught_up,
        )
        yield CounterMetricFamily(
            "simia_state_patch_bytes",
            "Bytes of the state patches committed (what calls wrote to the state)",
            value=m.patch_bytes,
        )
        yield CounterMetricFamily(
            "simia_large_state_patches",
            "State patches over 64 KB (each says its size in its event's detail)",
            value=m.large_patches,
        )
        created = CounterMetricFamily("simia_episodes_created", "Episodes created", labels=["world"])
        for world, count in sorted(m.episodes.items()):
            created.add_metric([world], count)
        yield created
        tokens = CounterMetricFamily(
            "simia_backend_tokens",
            "Simulator tokens: prompt (all input, cached included), completion, and of the prompt tokens those read "
            "from (cached) and written to (cache_write) the provider's prompt cache",
            labels=["kind"],
        )
        for kind, count in sorted(m.tokens.items()):
            tokens.add_metric([kind], count)
        yield tokens
        yield CounterMetricFamily(
            "simia_backend_cost_usd",
            "Simulator cost in USD (known prices only; cached tokens at the cache rates)",
            value=m.cost_usd,
        )
        yield CounterMetricFamily("simia_judged_episodes", "Verdicts the judge gave", value=m.judged)
        judge_tokens = CounterMetricFamily(
            "simia_judge_tokens", "Judge tokens: prompt, completion (and cached, cache_write when any)", labels=["kind"]
        )
        for kind, count in sorted(m.judge_tokens.items()):
            judge_tokens.add_metric([kind], count)
        yield judge_tokens
        yield CounterMetricFamily(
            "simia_judge_cost_usd", "Judge cost in USD (known prices only)", value=m.judge_cost_usd
        )
        failures = CounterMetricFamily(
            "simia_backend_failures",
            "Failed simulator model requests by kind (rate_limited, server_error, timeout, connection, malformed, ...)",
            labels=["reason"],
        )
        for reason, count in sorted(m.backend_failures.items()):
            failures.add_metric([reason], count)
        yield failures
