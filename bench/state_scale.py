"""What a call costs as the world grows: the tiny retail world beside retail worlds of 0.1x-16x tau2's size.

    python bench/state_scale.py [--scales 0.1,1,4,16] [--episodes N] [--calls N] [--rounds R] [--seed S] [--quick]

For the shipped tiny `retail` world (the baseline, measured in the same run; served without its groundings, as
the generated worlds have none, so every call of every world asks the model) and a generated retail world at
each scale (bench/_retail_scale.py: 1x = 500 users, 1,000 orders, 50 products of 30-60 variants), one
`simia serve` on SQLite on a real disk (`--synchronous NORMAL`, as bench/server_load.py) is answered by a
flawless fake simulator in this process. After a warm-up episode (about each tool three times), N episodes
make M calls each (all episodes at once, each call after the last), an agent's mix: two reads to a write,
arguments drawn from the records. Per world, as a figure and as a ratio to the tiny world:

- server CPU per call (the server process's CPU time over the calls / calls);
- bytes written per call (/proc/PID/io write_bytes over the calls / calls), beside the patch per write call;
- episode create and fork time, p50 and p95 (one at a time, on an idle server);
- memory per live episode (server RSS growth over `--live` more episodes, 300 by default, that each make 3 calls
  and stay live / their number: 20 episodes are too few to see past the allocator's arenas);
- database bytes per episode (growth of the live pages, and of the db + wal files, / N; and its events);
- /healthz p99 while forks of the N episodes make their calls and more episodes are created and forked
  (polled every 20 ms from another process, so this process's own work never delays a poll);
- the share of model requests whose named records (the order of order_id, the user of user_id, of the
  email, of name + zip, of payment_method_id, the products of item_ids) were in the prompt whole.

Each world is measured `--rounds` times (3 by default), the worlds taking turns (tiny, 0.1x, ..., then again), so
that a slower spell of the machine falls on all of them. The tables show the rounds pooled: samples (latencies,
create and fork times, /healthz polls, prompts) over all rounds, and the median round of each per-call and
per-episode figure; the CPU ratio is the median of the rounds' ratios (each round's world against the same round's
tiny world). Beside the targets, the CPU ratio and the /healthz p99 of every round are printed: on 2 cores one round
swings them by a third.

Where a prompt lacks a named record the fake answers from the generated records, so every world does the same
work. Then the targets at the largest scale run, met or not: a bench reports, it exits 0 either way (a figure
the server cannot give is printed as not measured, with the reason). Two limits of the instruments: CPU time
comes in clock ticks (10 ms), and write_bytes counts pages as they are dirtied (4 KB each; a page written again
before the kernel flushes it counts once). `--quick` runs 0.1x and 1x with 3 episodes x 4 calls: it checks
that the bench runs, and its figures mean little.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _driver import PY, ROOT, Connection, call_tool, free_port
from _retail_scale import (
    ALIASES,
    CACHE,
    REASONS,
    RetailIndex,
    RetailSimulator,
    address,
    load_state,
    world_dir,
    world_name,
)
from simia.testing.fake_provider import serve_lean
from simia.testing.processes import serve_process

SYNCHRONOUS = "NORMAL"
REQUEST_TIMEOUT = 300.0  # seconds one HTTP request may take before the bench calls the figure unmeasurable
WRITE_SHARE = 1 / 3
READS = {
    "find_user_id_by_email": 2.0,
    "find_user_id_by_name_zip": 1.0,
    "get_user_details": 3.0,
    "get_order_details": 4.0,
    "get_product_details": 2.0,
    "list_all_product_types": 0.3,
}
WRITES = {
    "cancel_pending_order": 2.0,
    "modify_pending_order_address": 1.0,
    "modify_pending_order_items": 2.0,
    "return_delivered_order_items": 2.0,
    "modify_user_address": 1.0,
}
MEMORY_FILESYSTEMS = {"tmpfs", "ramfs"}


@dataclass
class Subject:
    """A world under test: its label in the tables, its name, the folder to serve and its initial state."""

    label: str
    name: str
    worlds_dir: Path
    state: dict[str, Any]
    tools: list[str]

    @property
    def state_bytes(self) -> int:
        return len(json.dumps(self.state, separators=(",", ":")))


@dataclass
class Figures:
    """What one world measured; None where it could not be measured (`problems` says why)."""

    subject: Subject
    start_s: float | None = None
    calls: int = 0
    errors: list[str] = field(default_factory=list)
    call_p50_ms: float | None = None
    cpu_ms: float | None = None
    written_per_call: float | None = None
    written_per_create: float | None = None
    patch_per_write: float | None = None
    patch_per_call: float | None = None
    create_ms: list[float] = field(default_factory=list)
    fork_ms: list[float] = field(default_factory=list)
    loaded_create_ms: list[float] = field(default_factory=list)
    loaded_fork_ms: list[float] = field(default_factory=list)
    rss_warm: float | None = None
    memory_per_episode: float | None = None
    changed_per_episode: float | None = None
    db_live_per_episode: float | None = None
    db_files_per_episode: float | None = None
    events_per_episode: float | None = None
    healthz_ms: list[float] = field(default_factory=list)
    healthz_failures: int = 0
    named: int = 0
    whole: int = 0
    missing_by_tool: dict[str, int] = field(default_factory=dict)
    state_chars: list[int] = field(default_factory=list)
    unparsed: int = 0
    first_miss: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def whole_share(self) -> float | None:
        return self.whole / self.named if self.named else None


def subjects(scales: list[float], seed: int) -> list[Subject]:
    """The tiny world, then one generated world per scale (generated on first use, then cached)."""
    tiny_dir = _undeclared_retail()
    out = [Subject("tiny", "retail", tiny_dir, load_state(tiny_dir, "retail"), _tool_names(tiny_dir / "retail"))]
    for scale in scales:
        start = time.perf_counter()
        folder = world_dir(scale, seed)
        name = world_name(scale)
        out.append(Subject(f"{scale:g}x", name, folder, load_state(folder, name), _tool_names(folder / name)))
        print(f"  world {name}: {out[-1].state_bytes / 1e6:.2f} MB ({time.perf_counter() - start:.1f} s, {folder})")
    return out


def _undeclared_retail() -> Path:
    """A worlds folder holding the shipped `retail` world without its groundings: the generated worlds declare
    none, so every call of both asks the (fake) model, and the ratio compares like work (with them, the tiny world
    would answer most lookups from its state, without a model request). Kept under the digest of the shipped
    folder's files, made whole in a scratch folder and moved into place (two benches at once never see half)."""
    source = ROOT / "tool_specs" / "retail"
    digest = hashlib.sha256()
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        digest.update(path.relative_to(source).as_posix().encode() + b"\0" + path.read_bytes())
    folder = CACHE / f"retail-undeclared-{digest.hexdigest()[:12]}"
    if (folder / "retail" / "world.yaml").is_file():
        return folder
    CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tmp-", dir=CACHE))
    try:
        shutil.copytree(source, work / "retail")
        spec = yaml.safe_load((work / "retail" / "world.yaml").read_text(encoding="utf-8"))
        for tool in spec.get("tools", []):
            tool.pop("grounding", None)
        (work / "retail" / "world.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
        with contextlib.suppress(OSError):  # another bench made it first
            os.replace(work, folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


def _tool_names(folder: Path) -> list[str]:
    import yaml

    return [tool["name"] for tool in yaml.safe_load((folder / "world.yaml").read_text())["tools"]]


def plan_calls(subject: Subject, index: RetailIndex, rng: random.Random, n: int) -> list[tuple[str, dict[str, Any]]]:
    """`n` calls of one agent serving one customer: about two reads to a write, arguments from the records."""
    state = index.state
    named = {ALIASES.get(tool, tool): tool for tool in subject.tools}
    reads = {kind: w for kind, w in READS.items() if kind in named}
    writes = {kind: w for kind, w in WRITES.items() if kind in named}
    user_id = rng.choice(list(state["users"]))
    user = state["users"][user_id]
    own = [state["orders"][o] for o in user["orders"] if o in state["orders"]] or list(state["orders"].values())

    def order_in(status: str) -> dict[str, Any] | None:
        mine = [o for o in own if o["status"] == status]
        anyone = index.orders_by_status.get(status, [])
        if mine:
            return rng.choice(mine)
        return state["orders"][rng.choice(anyone)] if anyone else None

    def args_of(kind: str) -> dict[str, Any] | None:
        if kind == "find_user_id_by_email":
            return {"email": user["email"]}
        if kind == "find_user_id_by_name_zip":
            return {**user["name"], "zip": user["address"]["zip"]}
        if kind == "get_user_details":
            return {"user_id": user_id}
        if kind == "get_order_details":
            return {"order_id": rng.choice(own)["order_id"]}
        if kind == "get_product_details":
            item = rng.choice(rng.choice(own)["items"])
            return {"product_id": item["product_id"]} if item["product_id"] in state["products"] else None
        if kind == "list_all_product_types":
            return {}
        if kind == "modify_user_address":
            return {"user_id": user_id, **address(rng)}
        order = order_in("delivered" if kind == "return_delivered_order_items" else "pending")
        if order is None:
            return None
        if kind == "cancel_pending_order":
            return {"order_id": order["order_id"], "reason": rng.choice(REASONS)}
        if kind == "modify_pending_order_address":
            return {"order_id": order["order_id"], **address(rng)}
        owner = state["users"][order["user_id"]]
        if kind == "return_delivered_order_items":
            ids = list(dict.fromkeys(i["item_id"] for i in order["items"]))
            method = order["payment_history"][0]["payment_method_id"]
            return {
                "order_id": order["order_id"],
                "item_ids": rng.sample(ids, min(len(ids), rng.choice([1, 1, 2]))),
                "payment_method_id": method,
            }
        item = rng.choice(order["items"])
        variants = state["products"].get(item["product_id"], {}).get("variants", {})
        others = [v for v in variants.values() if v["item_id"] != item["item_id"] and v.get("available", True)]
        if not others:
            return None
        return {
            "order_id": order["order_id"],
            "item_ids": [item["item_id"]],
            "new_item_ids": [rng.choice(others)["item_id"]],
            "payment_method_id": rng.choice(list(owner["payment_methods"])),
        }

    plan: list[tuple[str, dict[str, Any]]] = []
    while len(plan) < n:
        pool = writes if writes and rng.random() < WRITE_SHARE else reads
        kind = rng.choices(list(pool), list(pool.values()))[0]
        arguments = args_of(kind)
        if arguments is not None:
            plan.append((named[kind], arguments))
    return plan


async def _request(conn: Connection, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    try:
        return await asyncio.wait_for(conn.request(method, path, body), REQUEST_TIMEOUT)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
    # closed before a byte of the answer: the server timed out the idle keep-alive connection; a new one
    await conn.close()
    return await asyncio.wait_for(conn.request(method, path, body), REQUEST_TIMEOUT)


async def create_episode(conn: Connection, world: str) -> str:
    status, data = await _request(conn, "POST", "/v1/episodes", {"world": world})
    if status != 201:
        raise RuntimeError(f"POST /v1/episodes: HTTP {status} {data[:300]!r}")
    return str(json.loads(data)["id"])


async def fork_episode(conn: Connection, episode: str) -> str:
    status, data = await _request(conn, "POST", f"/v1/episodes/{episode}/fork", {})
    if status != 201:
        raise RuntimeError(f"POST /v1/episodes/{{id}}/fork: HTTP {status} {data[:300]!r}")
    return str(json.loads(data)["id"])


async def timed(action: Callable[[], Any], into: list[float]) -> Any:
    start = time.perf_counter()
    result = await action()
    into.append((time.perf_counter() - start) * 1000)
    return result


async def agent(
    port: int, episode: str, plan: list[tuple[str, dict[str, Any]]], figures: Figures, latencies: list[float]
) -> None:
    """One agent: its calls one after the other on one keep-alive connection."""
    conn = Connection(port)
    try:
        for n, (tool, arguments) in enumerate(plan, start=1):
            start = time.perf_counter()
            try:
                result = await asyncio.wait_for(
                    call_tool(conn, f"/episodes/{episode}/mcp", tool, arguments, n), REQUEST_TIMEOUT
                )
                if result.get("isError"):
                    figures.errors.append(f"{tool}: {str(result.get('content'))[:300]}")
            except (RuntimeError, OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                figures.errors.append(f"{tool}: {type(exc).__name__}: {str(exc)[:300]}")
                await conn.close()
            latencies.append((time.perf_counter() - start) * 1000)
            figures.calls += 1
    finally:
        await conn.close()


class ServerProbe:
    """CPU time, bytes written and resident memory of a server process and its descendants."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def pids(self) -> list[int]:
        out, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            with contextlib.suppress(OSError):
                for task in Path(f"/proc/{pid}/task").iterdir():
                    todo += [int(c) for c in (task / "children").read_text().split()]
        return out

    def cpu(self) -> float:
        total = 0.0
        for pid in self.pids():
            with contextlib.suppress(OSError, IndexError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def written(self) -> int | None:
        total = 0
        for pid in self.pids():
            try:
                lines = Path(f"/proc/{pid}/io").read_text().splitlines()
            except OSError:
                return None
            total += next(int(line.split()[1]) for line in lines if line.startswith("write_bytes:"))
        return total

    def rss(self) -> int:
        total = 0
        for pid in self.pids():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        return total


def db_bytes(db: Path) -> tuple[int, int | None]:
    """(the db and wal files' sizes, the bytes of the database's live pages as a reader sees them)."""
    files = sum(p.stat().st_size for p in (db, db.with_name(db.name + "-wal")) if p.exists())
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as con:
            size = con.execute("PRAGMA page_size").fetchone()[0]
            pages = con.execute("PRAGMA page_count").fetchone()[0] - con.execute("PRAGMA freelist_count").fetchone()[0]
            return files, int(pages * size)
    except sqlite3.Error:
        return files, None


def events_bytes(db: Path, episodes: list[str]) -> int | None:
    """The bytes of the event rows of `episodes` (every column's value, as stored text or blob)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as con:
            columns = [row[1] for row in con.execute("PRAGMA table_info(events)")]
            if "episode_id" not in columns:
                return None
            size = " + ".join(f'coalesce(length(CAST("{c}" AS BLOB)), 0)' for c in columns)
            marks = ",".join("?" * len(episodes))
            row = con.execute(f"SELECT coalesce(sum({size}), 0) FROM events WHERE episode_id IN ({marks})", episodes)
            return int(row.fetchone()[0])
    except sqlite3.Error:
        return None


_POLLER = r"""
import http.client, json, sys, threading, time
port, interval = int(sys.argv[1]), float(sys.argv[2])
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
times, failures = [], 0
print("ready", flush=True)
while not stop.is_set():
    start = time.perf_counter()
    try:
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        response.read()
        failures += response.status != 200
    except (OSError, http.client.HTTPException):
        failures += 1
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    elapsed = time.perf_counter() - start
    times.append(elapsed * 1000)
    time.sleep(max(0.0, interval - elapsed))
print(json.dumps({"times": times, "failures": failures}), flush=True)
"""
"""Polls /healthz every `interval` s until a line (or EOF) on stdin, then prints the latencies (ms) as JSON."""


@contextlib.asynccontextmanager
async def healthz_polled(port: int, figures: Figures, interval: float = 0.02) -> AsyncIterator[None]:
    """Poll the server's /healthz from another process for the duration of the block."""
    poller = subprocess.Popen(  # noqa: ASYNC220 (starts at once; the block then waits on it in threads)
        [PY, "-c", _POLLER, str(port), str(interval)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert poller.stdin is not None and poller.stdout is not None
    try:
        await asyncio.to_thread(poller.stdout.readline)  # "ready"
        yield
    finally:
        with contextlib.suppress(OSError):
            poller.stdin.write(b"stop\n")
            poller.stdin.close()
        line = await asyncio.to_thread(poller.stdout.readline)
        await asyncio.to_thread(poller.wait)
        with contextlib.suppress(ValueError):
            polled = json.loads(line)
            figures.healthz_ms, figures.healthz_failures = polled["times"], polled["failures"]


@contextlib.asynccontextmanager
async def memory_guard(probe: ServerProbe, figures: Figures, limit: int) -> AsyncIterator[None]:
    """Kill the server if its memory passes `limit` bytes (the machine is shared), noting it in `figures`."""

    async def watch() -> None:
        while True:
            if probe.rss() > limit:
                figures.problems.append(f"server RSS passed {limit / 2**30:.1f} GiB: killed it")
                with contextlib.suppress(OSError):
                    os.kill(probe.pid, signal.SIGKILL)
                return
            await asyncio.sleep(0.5)

    task = asyncio.create_task(watch())
    try:
        yield
    finally:
        task.cancel()


def filesystem(path: Path) -> tuple[str, str]:
    """(type, mount point) of the filesystem holding `path`."""
    best = ("?", "")
    resolved = str(path.resolve()).rstrip("/") + "/"
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount, kind = line.split()[:3]
        mount = mount.replace("\\040", " ")
        if resolved.startswith(mount.rstrip("/") + "/") and len(mount) >= len(best[1]):
            best = (kind, mount)
    return best


def database_folder() -> Path:
    """A folder on a real disk (not tmpfs) for the benchmarked databases."""
    for folder in (ROOT / ".bench-cache" / "db", Path("/var/tmp/simia-bench")):
        folder.mkdir(parents=True, exist_ok=True)
        if filesystem(folder)[0] not in MEMORY_FILESYSTEMS:
            return folder
    raise SystemExit("no folder on a real disk for the database: .bench-cache/db and /var/tmp are both in memory")


async def measure(
    subject: Subject, episodes: int, calls: int, db_folder: Path, seed: int, memory_limit: int, live_episodes: int
) -> Figures:
    """Serve `subject`'s world, drive it through the phases of the module docstring, and collect its figures."""
    figures, name = Figures(subject), subject.name
    simulator = RetailSimulator(subject.state)
    index = simulator.index
    provider_port = free_port()
    provider = asyncio.create_task(serve_lean(provider_port, simulator.answer))
    db = db_folder / f"{subject.name}-{provider_port}.db"
    log = db_folder / f"{subject.name}-{provider_port}.log"
    args = [
        "--db", str(db), "--worlds-dir", str(subject.worlds_dir), "--world", subject.name, "--log-level", "warning",
        "--synchronous", SYNCHRONOUS, "--backend", "openai-compatible:fake",
        "--base-url", f"http://127.0.0.1:{provider_port}/v1", "--backend-concurrency", "1000",
    ]  # fmt: skip
    phase = "starting the server"
    try:
        await asyncio.sleep(0)  # the provider listens before the server's first request
        start = time.perf_counter()
        async with serve_process(*args, log=log, timeout=900, grace=10) as server:
            figures.start_s = time.perf_counter() - start
            port, probe = server.port, ServerProbe(server.process.pid)
            async with memory_guard(probe, figures, memory_limit):
                conn = Connection(port)

                def plan(n: int, tag: str) -> list[tuple[str, dict[str, Any]]]:
                    return plan_calls(subject, index, random.Random(f"{seed}:{subject.label}:{tag}"), n)

                phase = "warming up"  # about every tool three times, so one-time costs land before the figures
                warm = await create_episode(conn, subject.name)
                await agent(port, warm, plan(3 * len(subject.tools), "warm-up"), Figures(subject), [])
                await fork_episode(conn, warm)
                simulator.stats = type(simulator.stats)()

                phase = "creating episodes"
                rss0, written0, (files0, live0) = probe.rss(), probe.written(), db_bytes(db)
                figures.rss_warm = rss0
                ids = [await timed(lambda: create_episode(conn, name), figures.create_ms) for _ in range(episodes)]
                written1 = probe.written()

                phase = "calls"
                latencies: list[float] = []
                cpu1, patch0 = probe.cpu(), simulator.stats.patch_bytes
                await asyncio.gather(
                    *(agent(port, e, plan(calls, f"episode {i}"), figures, latencies) for i, e in enumerate(ids))
                )
                cpu2, written2, (files2, live2) = probe.cpu(), probe.written(), db_bytes(db)
                stats = simulator.stats
                n_calls = max(1, len(latencies))
                figures.call_p50_ms = statistics.median(latencies) if latencies else None
                figures.cpu_ms = (cpu2 - cpu1) * 1000 / n_calls
                if written0 is not None and written1 is not None and written2 is not None:
                    figures.written_per_create = (written1 - written0) / episodes
                    figures.written_per_call = (written2 - written1) / n_calls
                else:
                    figures.problems.append("/proc/PID/io is not readable: no bytes written")
                figures.patch_per_write = stats.patch_bytes / stats.write_calls if stats.write_calls else 0.0
                figures.patch_per_call = (stats.patch_bytes - patch0) / n_calls
                figures.db_files_per_episode = (files2 - files0) / episodes
                if live0 is not None and live2 is not None:
                    figures.db_live_per_episode = (live2 - live0) / episodes
                events = events_bytes(db, ids)
                figures.events_per_episode = None if events is None else events / episodes

                phase = "forks"
                forks = [await timed(lambda e=e: fork_episode(conn, e), figures.fork_ms) for e in ids]

                phase = "live episodes"  # many episodes that stay live, each a few calls: memory per live episode
                rss3, patch3 = probe.rss(), simulator.stats.patch_bytes
                gate = asyncio.Semaphore(20)

                async def live_one(i: int) -> None:
                    async with gate:
                        lone = Connection(port)
                        episode = await create_episode(lone, subject.name)
                        await lone.close()
                        await agent(port, episode, plan(3, f"live {i}"), Figures(subject), [])

                await asyncio.gather(*(live_one(i) for i in range(live_episodes)))
                figures.memory_per_episode = (probe.rss() - rss3) / live_episodes
                figures.changed_per_episode = (simulator.stats.patch_bytes - patch3) / live_episodes

                phase = "load with /healthz polled"

                async def operator() -> None:  # more episodes come and go while the forks make their calls
                    side = Connection(port)
                    for _ in range(max(1, episodes // 2)):
                        new = await timed(lambda: create_episode(side, subject.name), figures.loaded_create_ms)
                        await timed(lambda n=new: fork_episode(side, n), figures.loaded_fork_ms)
                    await side.close()

                async with healthz_polled(port, figures):
                    await asyncio.gather(
                        operator(),
                        *(agent(port, f, plan(calls, f"fork {i}"), figures, []) for i, f in enumerate(forks)),
                    )
                await conn.close()
    except Exception as exc:  # a figure the server cannot give is reported, not raised
        figures.problems.append(f"{phase}: {type(exc).__name__}: {str(exc)[-1500:]}")
    finally:
        provider.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await provider
        stats = simulator.stats
        figures.named, figures.whole = stats.named_calls, stats.whole_calls
        figures.missing_by_tool, figures.state_chars = dict(stats.missing_by_tool), stats.state_chars
        figures.unparsed, figures.first_miss = stats.unparsed, stats.first_miss
        if stats.first_problem:
            figures.problems.append(f"fake simulator: {stats.first_problem}")
        for path in db_folder.glob(f"{db.name}*"):
            path.unlink()
        if not figures.problems:
            log.unlink(missing_ok=True)
    return figures


SAMPLES = ("create_ms", "fork_ms", "loaded_create_ms", "loaded_fork_ms", "healthz_ms", "state_chars")
LISTS = ("errors", "problems")
COUNTS = ("calls", "healthz_failures", "named", "whole", "unparsed")
MEDIANS = (
    "start_s", "call_p50_ms", "cpu_ms", "written_per_call", "written_per_create", "patch_per_write", "patch_per_call",
    "rss_warm", "memory_per_episode", "changed_per_episode", "db_live_per_episode", "db_files_per_episode",
    "events_per_episode",
)  # fmt: skip


def pooled(rounds: list[Figures]) -> Figures:
    """One world's rounds as one `Figures`: samples and counts pooled, each other figure the median round's."""
    out = Figures(rounds[0].subject)
    for name in (*SAMPLES, *LISTS):
        setattr(out, name, [x for r in rounds for x in getattr(r, name)])
    for name in COUNTS:
        setattr(out, name, sum(getattr(r, name) for r in rounds))
    for name in MEDIANS:
        values = [v for r in rounds if (v := getattr(r, name)) is not None]
        setattr(out, name, statistics.median(values) if values else None)
    for r in rounds:
        for tool, n in r.missing_by_tool.items():
            out.missing_by_tool[tool] = out.missing_by_tool.get(tool, 0) + n
    out.first_miss = next((r.first_miss for r in rounds if r.first_miss), "")
    return out


def cpu_ratios(base: list[Figures], world: list[Figures]) -> list[float]:
    """Each round's CPU per call of `world` over the same round's tiny world (rounds where both were measured)."""
    return [x for b, w in zip(base, world, strict=True) if (x := _ratio(w.cpu_ms, b.cpu_ms)) is not None]


def pct(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def _size(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit, scale in (("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _ms(n: float | None) -> str:
    return "n/a" if n is None else f"{n:.1f} ms" if n < 1000 else f"{n / 1000:.2f} s"


def _count(n: float | None) -> str:
    return "n/a" if n is None else f"{n:,.0f}"


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _ratio(value: float | None, base: float | None) -> float | None:
    return None if value is None or base is None or base <= 0 else value / base


ROWS: list[tuple[str, Callable[[Figures], float | None], Callable[[float | None], str], bool]] = [
    # (figure, how to get it, how to print it, whether to print its ratio to the tiny world)
    ("state (compact JSON)", lambda f: f.subject.state_bytes, _size, True),
    ("server start", lambda f: None if f.start_s is None else f.start_s * 1000, _ms, True),
    ("call p50 (zero-latency model)", lambda f: f.call_p50_ms, _ms, True),
    ("server CPU per call", lambda f: f.cpu_ms, _ms, True),
    ("bytes written per call", lambda f: f.written_per_call, _size, True),
    ("patch per write call", lambda f: f.patch_per_write, _size, True),
    ("bytes written per create", lambda f: f.written_per_create, _size, True),
    ("create p50", lambda f: pct(f.create_ms, 0.5), _ms, True),
    ("create p95", lambda f: pct(f.create_ms, 0.95), _ms, True),
    ("fork p50", lambda f: pct(f.fork_ms, 0.5), _ms, True),
    ("fork p95", lambda f: pct(f.fork_ms, 0.95), _ms, True),
    ("create / fork p95 under load", lambda f: pct(f.loaded_create_ms + f.loaded_fork_ms, 0.95), _ms, True),
    ("server RSS after warm-up", lambda f: f.rss_warm, _size, True),
    ("memory per live episode", lambda f: f.memory_per_episode, _size, True),
    ("patches per episode", lambda f: f.changed_per_episode, _size, True),
    ("db live pages per episode", lambda f: f.db_live_per_episode, _size, True),
    ("db + wal files per episode", lambda f: f.db_files_per_episode, _size, True),
    ("events per episode", lambda f: f.events_per_episode, _size, True),
    ("db live pages - events", lambda f: _minus(f.db_live_per_episode, f.events_per_episode), _size, True),
    ("/healthz p50 under load", lambda f: pct(f.healthz_ms, 0.5), _ms, True),
    ("/healthz p99 under load", lambda f: pct(f.healthz_ms, 0.99), _ms, True),
    ("prompt state p50 (chars)", lambda f: pct([float(c) for c in f.state_chars], 0.5), _count, True),
    ("prompt state max (chars)", lambda f: max(f.state_chars, default=None), _count, True),
    ("named records whole", lambda f: f.whole_share, lambda v: "n/a" if v is None else f"{v:.1%}", False),
]


def report(rounds: list[list[Figures]]) -> None:
    results = [pooled(world) for world in rounds]
    base = results[0]
    width = 22
    print(f"\n{'':<32}" + "".join(f"{r.subject.label:>{width}}" for r in results))
    for label, get, show, ratio in ROWS:
        cells = []
        for r in results:
            value, times = get(r), _ratio(get(r), get(base)) if ratio and r is not base else None
            cells.append(show(value) + (f" ({times:.2f}x)" if times is not None else ""))
        print(f"{label:<32}" + "".join(f"{c:>{width}}" for c in cells))
    print(f"{'calls / errors':<32}" + "".join(f"{f'{r.calls} / {len(r.errors)}':>{width}}" for r in results))
    for r in results:
        name = r.subject.label
        if r.errors:
            print(f"  {name}: {len(r.errors)} calls answered with an error; first: {r.errors[0][:300]}")
        if r.missing_by_tool:
            misses = ", ".join(f"{t} {n}" for t, n in sorted(r.missing_by_tool.items()))
            print(f"  {name}: model requests without their named records whole, by tool: {misses}")
            print(f"    first: {r.first_miss}")
        for problem in r.problems:
            print(f"  {name}: NOT MEASURED past {problem}")
    print()
    for world, r in zip(rounds[1:], results[1:], strict=True):
        ratios = cpu_ratios(rounds[0], world)
        cpu = statistics.median(ratios) if ratios else None
        if cpu is not None:
            print(f"server CPU per call at {r.subject.label} / tiny = {cpu:.2f} ({_ms(r.cpu_ms)} / {_ms(base.cpu_ms)})")
        share = r.whole_share
        if share is not None:
            print(f"named records whole at {r.subject.label}: {share:.1%} of {r.named} model requests")


def targets(rounds: list[list[Figures]]) -> None:
    """The issue's targets at the largest scale run, each met or not (on the rounds pooled; see the docstring)."""
    top = pooled(rounds[-1])
    rows: list[tuple[str, str, bool]] = []

    def add(text: str, value: float | None, shown: str, limit: float | None) -> None:
        met = value is not None and limit is not None and value <= limit
        rows.append((text, shown if value is not None else "not measured", met))

    ratios = cpu_ratios(rounds[0], rounds[-1])
    cpu = statistics.median(ratios) if ratios else None
    add("server CPU per call <= 1.5x the tiny world's", cpu, f"{cpu or 0:.2f}x ({_ms(top.cpu_ms)})", 1.5)
    p99 = pct(top.healthz_ms, 0.99)
    add("/healthz p99 under load <= 50 ms", p99, _ms(p99), 50)
    written, patch = top.written_per_call, top.patch_per_call
    limit = None if patch is None else 4096 + 2 * patch
    add("bytes written per call <= 4 KB + 2x the patch", written, f"{_size(written)} (limit {_size(limit)})", limit)
    for name, values in (("create", top.create_ms), ("fork", top.fork_ms)):
        p95 = pct(values, 0.95)
        add(f"episode {name} p95 <= 5 ms (idle server)", p95, _ms(p95), 5)
    memory, changed = top.memory_per_episode, top.changed_per_episode
    limit = None if changed is None else 100_000 + changed
    add("memory per live episode <= 100 KB + what it changed", memory, f"{_size(memory)} (limit {_size(limit)})", limit)
    db, events = top.db_live_per_episode, top.events_per_episode
    limit = None if events is None else 10_000 + events
    add("db bytes per episode <= 10 KB + its events", db, f"{_size(db)} (limit {_size(limit)})", limit)
    share = top.whole_share
    missing = None if share is None else top.named - top.whole
    add("named records reach the prompt whole: 100%", missing, f"{share or 0:.1%} of {top.named} requests", 0)
    print(f"targets at {top.subject.label} (the largest scale run):")
    for text, shown, met in rows:
        print(f"  {text:<54} {shown:<34} {'met' if met else 'NOT met'}")
    print(f"targets met: {sum(met for *_, met in rows)} of {len(rows)} at {top.subject.label}")
    if len(rounds[-1]) > 1:
        print(f"by round at {top.subject.label} (the spread the pooled figures hide):")
        print("  server CPU per call / tiny's: " + ", ".join(f"{x:.2f}x" for x in cpu_ratios(rounds[0], rounds[-1])))
        for label, world in (("tiny", rounds[0]), (top.subject.label, rounds[-1])):
            p99s = ", ".join(_ms(pct(r.healthz_ms, 0.99)) for r in world)
            print(f"  /healthz p99 under load, {label}: {p99s}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", help="comma-separated scale factors (default 0.1,1,4,16; quick 0.1,1)")
    parser.add_argument("--episodes", type=int, help="episodes per world (default 20; quick 3)")
    parser.add_argument("--calls", type=int, help="calls per episode (default 20; quick 4)")
    parser.add_argument("--live", type=int, help="episodes kept live for the memory figure (default 300; quick 10)")
    parser.add_argument("--rounds", type=int, help="times each world is measured, in turns (default 3; quick 1)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the generated worlds and the calls")
    parser.add_argument("--synchronous", choices=["NORMAL", "FULL"], default="NORMAL", help="simia's SQLite sync mode")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check that the bench runs, not its targets")
    args = parser.parse_args()
    global SYNCHRONOUS
    SYNCHRONOUS = args.synchronous
    scales = [float(s) for s in (args.scales or ("0.1,1" if args.quick else "0.1,1,4,16")).split(",")]
    episodes = args.episodes or (3 if args.quick else 20)
    calls = args.calls or (4 if args.quick else 20)
    live = args.live or (10 if args.quick else 300)
    rounds = args.rounds or (1 if args.quick else 3)
    started = time.perf_counter()
    db_folder = database_folder()
    kind, mount = filesystem(db_folder)
    print(
        f"state scale: tiny retail world + {', '.join(f'{s:g}x' for s in scales)}; {episodes} episodes x {calls} calls"
        f" per world, {rounds} round{'s' * (rounds > 1)}; SQLite in {db_folder} ({kind} on {mount}),"
        f" --synchronous {SYNCHRONOUS}"
        f"{' (quick: tiny sizes, figures not meaningful)' * args.quick}"
    )
    available = next(
        int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemAvailable:")
    )  # fmt: skip
    worlds = subjects(sorted(scales), args.seed)
    results: list[list[Figures]] = [[] for _ in worlds]
    for n in range(rounds):
        for subject, measured in zip(worlds, results, strict=True):
            print(f"  round {n + 1}: measuring {subject.label} ({subject.name}) ...", flush=True)
            started_world = time.perf_counter()
            memory_limit = int(available * 0.6)
            measured.append(await measure(subject, episodes, calls, db_folder, args.seed, memory_limit, live))
            print(f"    done in {time.perf_counter() - started_world:.0f} s", flush=True)
    report(results)
    targets(results)
    print(f"(the run took {time.perf_counter() - started:.0f} s)")
    with contextlib.suppress(OSError):
        db_folder.rmdir()  # when empty


if __name__ == "__main__":
    asyncio.run(main())
