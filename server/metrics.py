"""Prometheus metrics of one server (its own registry, so several apps in one process do not collide)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["Metrics"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.calls = Counter(
            "simia_tool_calls", "Tool calls answered", ["world", "tool", "outcome"], registry=self.registry
        )
        self.errors = Counter(
            "simia_tool_errors",
            "Tool calls answered with isError, by kind and code",
            ["world", "kind", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "simia_tool_call_latency_seconds",
            "Tool call latency, simulation and commit included",
            ["world"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )
        self.live = Gauge("simia_live_episodes", "Active episodes", registry=self.registry)
        self.episodes = Counter("simia_episodes_created", "Episodes created", ["world"], registry=self.registry)
        self.tokens = Counter("simia_backend_tokens", "Simulator tokens", ["kind"], registry=self.registry)
        self.cost = Counter(
            "simia_backend_cost_usd", "Simulator cost in USD (known prices only)", registry=self.registry
        )

        self._children: dict[tuple[Any, ...], Any] = {}
        for kind in ("prompt", "completion"):
            self.child(self.tokens, kind)  # shown from the start, zero until the first model call

    def child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, remembered (the lookup costs more than the increment)."""
        key = (id(metric), *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def render(self) -> bytes:
        return generate_latest(self.registry)
