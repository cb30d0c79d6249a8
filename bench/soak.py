"""Soak: a long run of calls over many short episodes, watched for leaks and for latency drift.

    python bench/soak.py [--calls 100000] [--agents 50] [--per-episode 20] [--windows 10] [--quick]

Against a real `simia serve` (zero-latency scripted backend, `--synchronous NORMAL`, `--idle-timeout 2`),
`--agents` concurrent agents each loop: create an episode, make `--per-episode` tool calls on its MCP URL
(MCP 2026-07-28, one keep-alive connection per agent), then end half of their episodes through
`POST /v1/episodes/{id}/end` and leave the other half idle, for the server's idle sweep to mark abandoned.
The run is cut into `--windows` windows of equal call counts; after each, the server's RSS, open files
(`/proc/PID/fd`) and asyncio tasks (`simia_asyncio_tasks` on `/metrics`) are sampled, with the window's
p50 and p99 latency. The first `--warmup` windows warm the server up; then, and again at the end, the load
stops, the idle sweep catches up and the server is sampled at rest: growth is the last rest sample minus
the first, against a stated bound per resource (`BOUNDS`). Stability is the p99 of the last window over the
p99 of the first window after warm-up. Exits 1 when a bound is broken or a call failed.

`--quick` runs 4,000 calls (what CI runs); its growth figures mean little at that size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _driver import PY, ROOT, Connection, Process, call_tool, free_port, rss_mb

SCRIPT = ROOT / "tests" / "fixtures" / "mock_script.json"
BOUNDS = {"rss_mb": 20.0, "fds": 10, "tasks": 10}
"""Growth allowed after warm-up: RSS in MB, open files, asyncio tasks."""
IDLE_TIMEOUT = 2.0


@dataclass
class Sample:
    calls: int
    seconds: float
    rss_mb: float
    fds: int
    tasks: int
    live: int
    p50_ms: float
    p99_ms: float


@dataclass
class Run:
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    episodes: int = 0
    ended: int = 0


def serve(db: Path, port: int) -> Process:
    return Process(
        [
            *(PY, "-m", "simia.cli", "serve", "--db", str(db), "--port", str(port)),
            *("--worlds-dir", str(ROOT / "tool_specs"), "--world", "mock", "--log-level", "error"),
            *("--backend", f"scripted:{SCRIPT}", "--synchronous", "NORMAL", "--idle-timeout", str(IDLE_TIMEOUT)),
        ],
        port,
    )


async def scrape(port: int) -> dict[str, float]:
    """The unlabelled gauges of `/metrics` (name -> value)."""
    conn = Connection(port)
    try:
        status, data = await conn.request("GET", "/metrics")
    finally:
        await conn.close()
    assert status == 200, data[:200]
    return {name.decode(): float(value) for name, value in re.findall(rb"^(simia_\w+) ([0-9.e+-]+)$", data, re.M)}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def soak(server: Process, calls: int, agents: int, per_episode: int, windows: int) -> tuple[Run, list[Sample]]:
    run = Run()
    samples: list[Sample] = []
    budget = iter(range(calls))
    window_size = calls // windows
    boundary = asyncio.Event()
    start = time.perf_counter()
    pid = server.proc.pid

    async def sample() -> None:
        window = run.latencies[-window_size:]
        gauges = await scrape(server.port)
        samples.append(
            Sample(
                calls=len(run.latencies),
                seconds=time.perf_counter() - start,
                rss_mb=rss_mb(pid),
                fds=len(os.listdir(f"/proc/{pid}/fd")),
                tasks=int(gauges["simia_asyncio_tasks"]),
                live=int(gauges["simia_live_episodes"]),
                p50_ms=pct(window, 0.5) * 1000,
                p99_ms=pct(window, 0.99) * 1000,
            )
        )

    async def agent(number: int) -> None:
        conn = Connection(server.port)
        try:
            while True:
                status, data = await conn.request("POST", "/v1/episodes", {"world": "mock"})
                if status != 201:
                    run.errors.append(f"create: HTTP {status} {data[:200]!r}")
                    return
                episode = json.loads(data)["id"]
                run.episodes += 1
                ends = run.episodes % 2 == 1  # every other episode ends; the rest are left for the idle sweep
                path = f"/episodes/{episode}/mcp"
                for i in range(per_episode):
                    if next(budget, None) is None:
                        return
                    tool, arguments = (
                        ("set_quantity", {"name": "milk", "qty": i}) if i % 2 else ("get_item", {"name": "milk"})
                    )
                    began = time.perf_counter()
                    try:
                        result = await call_tool(conn, path, tool, arguments, i + 1)
                    except (RuntimeError, OSError, asyncio.IncompleteReadError) as exc:
                        run.errors.append(str(exc)[:200])
                        await conn.close()
                        continue
                    run.latencies.append(time.perf_counter() - began)
                    if result.get("isError"):
                        run.errors.append(str(result.get("content"))[:200])
                    if len(run.latencies) % window_size == 0:
                        boundary.set()
                if ends:
                    status, data = await conn.request("POST", f"/v1/episodes/{episode}/end", {})
                    if status != 200:
                        run.errors.append(f"end: HTTP {status} {data[:200]!r}")
                    run.ended += 1
        finally:
            await conn.close()

    async def sampler(done: asyncio.Future[None]) -> None:
        while not done.done():
            boundary.clear()
            waiter = asyncio.ensure_future(boundary.wait())
            await asyncio.wait([waiter, done], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if len(samples) < windows and (boundary.is_set() or done.done()):
                await sample()

    load = asyncio.ensure_future(asyncio.gather(*(agent(n) for n in range(agents))))
    watch = asyncio.ensure_future(sampler(load))
    await load
    await watch
    return run, samples


async def quiesce(server: Process, db: Path) -> tuple[Sample, dict[str, int]]:
    """With no load: wait for the idle sweep to mark the episodes left idle (at most 3 idle timeouts), then
    sample the server at rest; also the episodes by status."""
    for _ in range(int(3 * IDLE_TIMEOUT / 0.1)):
        if (await scrape(server.port))["simia_live_episodes"] == 0:
            break
        await asyncio.sleep(0.1)
    gauges = await scrape(server.port)
    pid = server.proc.pid
    rest = Sample(
        calls=0,
        seconds=0.0,
        rss_mb=rss_mb(pid),
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        tasks=int(gauges["simia_asyncio_tasks"]),
        live=int(gauges["simia_live_episodes"]),
        p50_ms=float("nan"),
        p99_ms=float("nan"),
    )
    with sqlite3.connect(db) as conn:
        return rest, dict(conn.execute("SELECT status, COUNT(*) FROM episodes GROUP BY status").fetchall())


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--per-episode", type=int, default=20)
    parser.add_argument("--windows", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2, help="windows of warm-up before the baseline")
    parser.add_argument("--quick", action="store_true", help="4,000 calls, 20 agents")
    args = parser.parse_args()
    if args.quick:
        args.calls, args.agents, args.per_episode = 4_000, 20, 10
    window = args.calls // args.windows
    print(
        f"soak: {args.calls:,} calls, {args.agents} agents, {args.per_episode} calls per episode "
        f"(half ended, half swept idle after {IDLE_TIMEOUT:.0f} s), {args.windows} windows, {args.warmup} of warm-up"
    )
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "soak.db"
        server = await serve(db, free_port()).ready()
        try:
            warm, warm_samples = await soak(server, window * args.warmup, args.agents, args.per_episode, args.warmup)
            base, _ = await quiesce(server, db)
            rest = args.windows - args.warmup
            run, samples = await soak(server, window * rest, args.agents, args.per_episode, rest)
            final, statuses = await quiesce(server, db)
        finally:
            server.stop()
    print("  window   calls    time   RSS MB  fds  tasks  live   p50 ms   p99 ms   (under load)")
    for number, s in enumerate([*warm_samples, *samples], 1):
        print(
            f"  {number:>6} {s.calls:>7} {s.seconds:>6.0f}s {s.rss_mb:>8.1f} {s.fds:>4} {s.tasks:>6} {s.live:>5}"
            f" {s.p50_ms:>8.2f} {s.p99_ms:>8.2f}" + ("   warm-up" if number <= args.warmup else "")
        )
    for name, s in (("after warm-up", base), ("at the end", final)):
        print(f"  at rest {name:<14} RSS {s.rss_mb:.1f} MB, {s.fds} open files, {s.tasks} tasks, {s.live} live")
    growth = {"rss_mb": final.rss_mb - base.rss_mb, "fds": final.fds - base.fds, "tasks": final.tasks - base.tasks}
    broken = [k for k, v in growth.items() if v > BOUNDS[k]]
    stability = samples[-1].p99_ms / samples[0].p99_ms if samples[0].p99_ms else float("nan")
    errors = warm.errors + run.errors
    print(
        f"  episodes: {warm.episodes + run.episodes:,} created, {statuses.get('ended', 0):,} ended, "
        f"{statuses.get('abandoned', 0):,} swept as abandoned, {statuses.get('active', 0):,} still active"
    )
    print(
        "  growth after warm-up, at rest: "
        + ", ".join(f"{k} {v:+.1f} (bound {BOUNDS[k]})" for k, v in growth.items())
        + (f"; OVER THE BOUND: {', '.join(broken)}" if broken else "")
    )
    if errors:
        print(f"  {len(errors)} failed calls; first: {errors[0]}")
    verdict = "0 leaks" if not broken else f"{len(broken)} leaks"
    print(
        f"soak: {len(warm.latencies) + len(run.latencies):,} calls, {len(errors)} errors, {verdict}; "
        f"p99 last / first window after warm-up = {stability:.2f}"
    )
    return 0 if not broken and not errors else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
