"""Provider chaos: many concurrent agents while the model provider fails in every way it can, mixed at random.

    python bench/chaos_provider.py [--agents N] [--calls N] [--seed S] [--quick]

simia serves the mock world on an `openai-compatible` backend pointed at `FakeProvider(chaos=Chaos(...))`:
half of the provider's answers are faults (429 with and without Retry-After, 500/502/503, a hang past
the deadline, a slow trickle, a truncated body, garbage, a connection closed mid-answer, valid JSON of
the wrong schema). Each agent (a lean raw-HTTP MCP client, `_driver.py`) opens an episode and makes its
calls one after another: reads with a name unique to the call (so the provider's requests for each call
can be counted) and writes. Checks:

- every call gets an answer, within the tool-call deadline (simulator attempts x backend deadline), that
  is a result or a clean error: the world's own (`agent`) or `infra` with `backend_error` or
  `invalid_simulation` and a short message;
- retries stay within the budget: no call costs more provider requests than attempts allow;
- no event lost or duplicated: each episode's events are exactly the acknowledged calls (unique seqs);
- `/metrics` counts each outcome as the events do, and each kind of failed model request
  (`simia_backend_failures_total{reason}`); nothing is logged at ERROR by simia.

Prints `N calls, F failures` with the faults injected; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _driver import Connection, call_tool
from simia.server import ServerSettings, build_server, free_port, serving
from simia.sim import load_worlds
from simia.sim.backends import RetryPolicy, resolve_backend
from simia.sim.storage import open_store
from simia.testing import Chaos, FakeProvider, mock_world_answer, parse_simulator_prompt
from simia.testing.fake_provider import ChaosReset

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 2.0  # seconds one model call may take, retries included
SIM_ATTEMPTS = 3  # the simulator's answers per call (a malformed answer is asked again)
BACKEND_ATTEMPTS = 4
# Scheduling and commit time: the agents, simia and the fake provider share one event loop, and in CI three
# other test workers share its 2 cores (a call took 8.24 s there against 7 s with 1 s of slack). A call that
# waited out a hang instead of its deadline takes HANG s or more, far past the limit either way.
SLACK = 3.0
HANG = DEADLINE * 10  # a hung answer: only the deadline ends the wait before it
CLEAN_INFRA = {"backend_error", "invalid_simulation"}


@dataclass
class Report:
    calls: int = 0
    latencies: list[float] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    provider_requests: int = 0
    max_requests_per_call: int = 0
    backend_failures: Counter[str] = field(default_factory=Counter)  # as /metrics counts them
    failures: dict[str, str] = field(default_factory=dict)

    def fail(self, key: str, example: str) -> None:
        self.failures.setdefault(key, example)


class _QuietChaos(logging.Filter):
    """Drops the fake provider's own log lines about the connections chaos closed or left hanging."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, ChaosReset | asyncio.CancelledError) and "graceful shutdown" not in record.msg


class _SimiaErrors(logging.Handler):
    """ERROR records of simia's server (the fake provider's own closed connections are the chaos, not bugs)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, ChaosReset):
            self.records.append(self.format(record)[-2500:])


async def _agent(
    port: int, index: int, calls: int, acks: dict[str, list[int]], report: Report, timeline: list[tuple[str, float]]
) -> None:
    conn = Connection(port)
    status, data = await conn.request("POST", "/v1/episodes", {"world": "mock"})
    if status != 201:
        report.fail("creating an episode failed", f"HTTP {status} {data[:200]!r}")
        return
    episode = json.loads(data)["id"]
    acks[episode] = []
    for i in range(calls):
        if i % 2 == 0:
            tool, arguments = "get_item", {"name": f"agent{index}-call{i}"}
        else:
            tool, arguments = "set_quantity", {"name": "milk", "qty": (index + i) % 101}
        start = time.perf_counter()
        try:
            result = await call_tool(conn, f"/episodes/{episode}/mcp", tool, arguments, i + 1)
        except (RuntimeError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            report.fail(f"a call got no result ({type(exc).__name__})", str(exc)[:300])
            await conn.close()
            continue
        seconds = time.perf_counter() - start
        report.calls += 1
        report.latencies.append(seconds)
        timeline.append((tool, seconds))
        meta = result.get("_meta") or {}
        acks[episode].append(meta.get("simia/seq", -1))
        text = result["content"][0]["text"] if result.get("content") else ""
        if not result.get("isError"):
            report.outcomes["ok"] += 1
        elif meta.get("simia/error_kind") == "agent":
            report.outcomes[f"agent:{meta.get('simia/error_code')}"] += 1
        else:
            code = meta.get("simia/error_code")
            report.outcomes[f"infra:{code}"] += 1
            if code not in CLEAN_INFRA or len(text) > 120 or "Traceback" in text or "chaos" in text:
                report.fail(f"an unclean infra error ({code})", text[:300])
        limit = SIM_ATTEMPTS * DEADLINE + SLACK
        if seconds > limit:
            report.fail(f"a call took longer than {limit:g} s", f"{tool} {arguments}: {seconds:.2f} s -> {text[:200]}")
    await conn.close()


async def run_async(agents: int, calls: int, seed: int, tmp: Path) -> Report:
    report = Report()
    chaos = Chaos(seed=seed, rate=0.5, hang=HANG, trickle=DEADLINE * 0.6, retry_after=0.2)
    provider = FakeProvider(mock_world_answer, chaos=chaos)
    errors = _SimiaErrors()
    for name in ("", "uvicorn", "uvicorn.error"):
        logging.getLogger(name).addHandler(errors)
    try:
        async with provider.running():
            policy = RetryPolicy(
                max_attempts=BACKEND_ATTEMPTS, base_delay=0.05, max_delay=0.25, max_retry_after=1.0, deadline=DEADLINE
            )
            backend = resolve_backend(
                "openai-compatible:fake", base_url=provider.base_url, retry=policy, max_concurrency=4 * agents
            )
            worlds = load_worlds([ROOT / "tool_specs"]).worlds
            store = open_store(tmp / "chaos.db")
            port = free_port()
            app = build_server(worlds, backend, store, ServerSettings(port=port, max_live_episodes=10 * agents))
            try:
                async with serving(app, port):
                    for handler in logging.getLogger("uvicorn").handlers:  # set up by uvicorn's config
                        handler.addFilter(_QuietChaos())
                    acks: dict[str, list[int]] = {}
                    timeline: list[tuple[str, float]] = []
                    await asyncio.gather(*(_agent(port, i, calls, acks, report, timeline) for i in range(agents)))
                    await _check_store(port, acks, report)
                    await _check_metrics(port, report)
            finally:
                await backend.aclose()
                await store.close()
    finally:
        for name in ("", "uvicorn", "uvicorn.error"):
            logging.getLogger(name).removeHandler(errors)
    report.faults = Counter(provider.faults)
    report.provider_requests = len(provider.requests)
    per_call = Counter(
        name
        for body in provider.requests
        for name in [_call_name(body)]
        if name is not None  # the reads: each has a name of its own
    )
    report.max_requests_per_call = max(per_call.values(), default=0)
    budget = SIM_ATTEMPTS * BACKEND_ATTEMPTS
    if report.max_requests_per_call > budget:
        report.fail("a call cost more provider requests than its retry budget", f"{per_call.most_common(3)}")
    missing = set(chaos.faults) - set(report.faults)
    if missing and agents * calls >= 200:
        report.fail("some faults were never injected", str(sorted(missing)))
    for record in errors.records:
        report.fail("an ERROR logged by simia", record)
    return report


def _call_name(body: dict[str, Any]) -> str | None:
    """The unique name of the read a simulator request is for (None for writes and retries' feedback turns)."""
    messages = body.get("messages") or []
    if len(messages) < 2:
        return None
    _, arguments, _ = parse_simulator_prompt(str(messages[1].get("content", "")))
    name = arguments.get("name")
    return name if isinstance(name, str) and name.startswith("agent") else None


async def _check_store(port: int, acks: dict[str, list[int]], report: Report) -> None:
    """Every episode's events are exactly its acknowledged calls: none lost, none twice."""
    conn = Connection(port)
    for episode, seqs in acks.items():
        status, data = await conn.request("GET", f"/v1/episodes/{episode}")
        stored = [e["seq"] for e in json.loads(data)["events"]] if status == 200 else []
        if sorted(seqs) != stored or len(set(stored)) != len(stored):
            report.fail("events differ from the acknowledged calls", f"{episode}: acked {seqs}, stored {stored}")
    await conn.close()


async def _check_metrics(port: int, report: Report) -> None:
    """`/metrics` counts every outcome the calls got."""
    conn = Connection(port)
    _, data = await conn.request("GET", "/metrics")
    await conn.close()
    counted: Counter[str] = Counter()
    for family in text_string_to_metric_families(data.decode()):
        for sample in family.samples:
            if sample.name == "simia_tool_calls_total" and sample.labels["outcome"] == "ok":
                counted["ok"] += int(sample.value)
            elif sample.name == "simia_tool_errors_total":
                counted[f"{sample.labels['kind']}:{sample.labels['code']}"] += int(sample.value)
            elif sample.name == "simia_backend_failures_total":
                report.backend_failures[sample.labels["reason"]] += int(sample.value)
    if counted != report.outcomes:
        report.fail("/metrics disagrees with the answers", f"metrics {dict(counted)}, answers {dict(report.outcomes)}")
    # Each kind of provider fault shows in /metrics as the failures it causes (wrong_schema is a good answer
    # the simulator refuses: it shows as invalid_simulation when it happens on every attempt).
    expected = {"rate_limited", "server_error", "connection", "malformed"}
    if report.calls >= 200 and not expected <= set(report.backend_failures):
        report.fail("/metrics lacks a kind of backend failure", f"{dict(report.backend_failures)}")
    if report.calls >= 200 and not {"timeout", "deadline"} & set(report.backend_failures):
        report.fail("/metrics counts no timeout", f"{dict(report.backend_failures)}")


def run(agents: int, calls: int, seed: int = 0) -> Report:
    with tempfile.TemporaryDirectory(prefix="simia-chaos-") as tmp:
        return asyncio.run(run_async(agents, calls, seed, Path(tmp)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--calls", type=int, default=10, help="calls per agent")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a tiny run: does the bench still run?")
    args = parser.parse_args()
    agents, calls = (20, 2) if args.quick else (args.agents, args.calls)
    start = time.perf_counter()
    report = run(agents, calls, args.seed)
    ordered = sorted(report.latencies) or [0.0]
    faults = sum(n for k, n in report.faults.items() if k != "ok")
    print(
        f"provider chaos: {agents} agents, {report.calls} calls, {len(report.failures)} failures in "
        f"{time.perf_counter() - start:.0f} s; {faults} faults injected of {report.provider_requests} provider "
        f"requests; max {report.max_requests_per_call} requests per call (budget {SIM_ATTEMPTS * BACKEND_ATTEMPTS}); "
        f"p99 {ordered[int(0.99 * (len(ordered) - 1))]:.2f} s, max {ordered[-1]:.2f} s"
    )
    print(f"  faults: {dict(sorted(report.faults.items()))}")
    print(f"  answers: {dict(sorted(report.outcomes.items()))}")
    print(f"  /metrics backend failures: {dict(sorted(report.backend_failures.items()))}")
    for key, example in report.failures.items():
        print(f"\nFAIL {key}\n{example}")
    sys.stdout.flush()
    os._exit(1 if report.failures else 0)


if __name__ == "__main__":
    main()
