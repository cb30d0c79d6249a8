"""Viewer at scale: the runs page over 100,000 episodes, served by `simia view` (a real process, read-only).

Fills a fresh database with N episodes (3 calls each, a quarter still active, forks in groups, most judged) by
bulk insert into simia's own schema, starts `simia view --db` on it, and times with a keep-alive HTTP client
the p50 of each page over several requests: the runs page's first page (target < 300 ms), sorted by reward,
filtered by task and by text in the calls (the bounded scan), a late page, and one episode's page. Each is
printed with its ratio against `GET /healthz` on the same server in the same run (the cost of any request).

    python bench/viewer.py [--episodes N] [--requests R] [--quick]

`--quick` runs 2,000 episodes and leaves the target unchecked; BENCH_STRICT=1 makes a full run exit 1 when the
first page misses it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx2 as httpx
from simia.sim.storage import SqliteStore
from simia.sim.world import state_hash
from simia.testing.processes import serve_process

TARGET_MS = 300.0
TASKS = ["restock_milk", "count_apples", "clear_out", "buy_eggs", "swap_items", "audit", "refill_all", "check_milk"]


def fill(path: Path, episodes: int) -> str:
    """Write `episodes` episodes with 3 events each into simia's schema; returns the id of one judged episode."""
    asyncio.run(SqliteStore(path).close())  # the store creates the schema and its indexes
    rng = random.Random(7)
    initial = {"items": {"apple": {"qty": 3}, "milk": {"qty": 0}}}
    state, base_hash = json.dumps(initial), state_hash(initial)
    start = time.time() - episodes * 2.0
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA synchronous=OFF")
        episode_rows, event_rows = [], []
        for i in range(episodes):
            eid = f"ep_{i:08d}"
            created = start + i * 2.0
            active = i % 4 == 0
            reward = None if active or i % 10 == 1 else int(rng.random() < 0.6)
            verdict = None if reward is None else json.dumps({"reward": reward, "status": "ok", "reasons": ["r"]})
            group = f"ep_{i - i % 4:08d}" if i % 8 >= 4 and i % 4 else None
            episode_rows.append(
                (eid, "mock", "h", TASKS[i % len(TASKS)], i, "", "active" if active else "ended", 3, 3, 2100, 150,
                 0.0012, base_hash, group, 1 if group else None, group, verdict, reward, created, created + 1.5,
                 None if active else created + 1.5)
            )  # fmt: skip
            for seq in (1, 2, 3):
                error = seq == 3 and i % 5 == 0
                args = json.dumps({"name": rng.choice(["milk", "apple", "bread"]), "qty": rng.randint(0, 9)})
                event_rows.append(
                    (eid, seq, "set_quantity", args, None if error else args, "No item." if error else args,
                     int(error), "item_not_found" if error else None, "agent" if error else None, "[]",
                     '{"prompt_tokens": 700, "completion_tokens": 50}', 12.0, "fake", created + seq * 0.3)
                )  # fmt: skip
        conn.executemany(
            "INSERT INTO episodes (id, world, world_hash, task, seed, principal, status, seq, calls, prompt_tokens, "
            "completion_tokens, cost_usd, base_hash, parent_id, fork_step, group_id, verdict, reward, "
            "created_at, updated_at, ended_at) VALUES (" + ", ".join("?" * 21) + ")",
            episode_rows,
        )
        conn.execute("INSERT INTO states (hash, state) VALUES (?, ?)", (base_hash, state))
        conn.executemany(
            "INSERT INTO events (episode_id, seq, tool, arguments, output, text, is_error, error_code, error_kind, "
            "state_patch, usage, latency_ms, model, created_at) VALUES (" + ", ".join("?" * 14) + ")",
            event_rows,
        )
    return "ep_00000002"


def p50(client: httpx.Client, path: str, requests: int) -> float:
    """The median milliseconds of `requests` GETs of `path` (after one warm-up), each answered 200."""
    times = []
    for i in range(requests + 1):
        t0 = time.perf_counter()
        answer = client.get(path)
        elapsed = (time.perf_counter() - t0) * 1000
        if answer.status_code != 200:
            raise SystemExit(f"GET {path}: {answer.status_code} {answer.text[:300]}")
        if i:
            times.append(elapsed)
    return statistics.median(times)


def main(episodes: int, requests: int, strict: bool) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "viewer.db"
        t0 = time.perf_counter()
        judged = fill(db, episodes)
        print(f"filled {episodes:,} episodes ({3 * episodes:,} calls) in {time.perf_counter() - t0:.1f} s")
        view = (sys.executable, "-m", "simia.cli", "view")
        with (
            serve_process("--db", str(db), command=view, timeout=30, grace=10) as server,
            httpx.Client(base_url=server.url, timeout=30) as client,
        ):
            pages = {
                "healthz (baseline)": "/healthz",
                "runs, first page": "/ui",
                "runs, sorted by reward": "/ui?sort=reward&dir=desc",
                "runs, task filter": "/ui?task=audit&status=ended",
                "runs, text filter (bounded scan)": "/ui?text=bread",
                "runs, page 100": "/ui?page=100",
                "one episode": f"/ui/episodes/{judged}",
            }
            figures = {name: p50(client, path, requests) for name, path in pages.items()}
    base = figures["healthz (baseline)"]
    print(f"{episodes:,} episodes, p50 of {requests} requests each:")
    for name, ms in figures.items():
        print(f"  {name:<34} {ms:8.1f} ms  {ms / base:7.1f}x healthz")
    first = figures["runs, first page"]
    verdict = "meets" if first < TARGET_MS else "MISSES"
    print(f"runs first page p50 {first:.1f} ms = {first / base:.1f}x healthz ({verdict} the {TARGET_MS:.0f} ms target)")
    return 1 if strict and first >= TARGET_MS else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="2,000 episodes; the target is not checked")
    args = parser.parse_args()
    n = 2_000 if args.quick else args.episodes
    sys.exit(main(n, 5 if args.quick else args.requests, bool(os.environ.get("BENCH_STRICT")) and not args.quick))
