"""The store engines: Postgres vs SQLite per call, fork deep into an episode, and replay, measured in one run.

    python bench/store_engines.py [percall|fork|replay|all] [--quick]

percall  per-call cost of `simia serve --db postgresql://...` vs `--db FILE --synchronous FULL`, zero-latency
         scripted backend, alternating rounds (target: postgres / sqlite <= 1.5). Postgres runs with
         fsync on, so both engines make every commit durable before answering.
fork     POST /v1/episodes/{id}/fork at step 500 of an episode (the state after step 500 is the world's stored
         state plus the episode's 500 patches): p50 over HTTP on each engine (target <= 10 ms)
replay   a recorded set of seeded episodes replayed through `--backend replay:DB` (no model): calls/s
         through the whole server, against the same calls answered by the scripted backend in the same
         run, and answers/s of the replay backend alone (target >= 2,000 calls/s)

Postgres is a throwaway cluster from the machine's binaries (`simia.testing.postgres`). `--quick` runs
tiny sizes: it checks that the bench runs and prints its lines; the figures then mean little.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _driver import PY, ROOT, Connection, Load, Process, create_episodes, drive, free_port, merged
from simia.sim.backends import CompletionRequest
from simia.sim.backends.replay import ReplayBackend
from simia.testing.postgres import PostgresCluster

ARGS = {"name": "milk", "qty": 4}
SCRIPT = ROOT / "tests" / "fixtures" / "mock_script.json"


def simia(db: str, *backend: str, synchronous: str = "FULL") -> Process:
    port = free_port()
    argv = [PY, "-m", "simia.cli", "serve", "--db", db, "--port", str(port), "--worlds-dir", str(ROOT / "tool_specs"),
            "--world", "mock", "--log-level", "warning", "--synchronous", synchronous]  # fmt: skip
    return Process([*argv, *(backend or ("--backend", f"scripted:{SCRIPT}"))], port)


@contextlib.contextmanager
def servers(*processes: Process) -> Iterator[None]:
    try:
        yield
    finally:
        for process in processes:
            process.stop()


def line(name: str, load: Load) -> str:
    return (
        f"  {name:<22} {load.calls:>6} calls  {load.throughput:8.1f} calls/s  p50 {load.pct(0.5) * 1000:6.1f} ms"
        f"  p99 {load.pct(0.99) * 1000:6.1f} ms  errors {len(load.errors)}"
    )


async def percall(engines: dict[str, str], agents: int, calls: int, rounds: int) -> None:
    print(f"percall: {agents} concurrent agents x {calls} calls, zero-latency backend, {rounds} alternating rounds")
    procs = {name: await simia(db).ready() for name, db in engines.items()}
    loads: dict[str, list[Load]] = {name: [] for name in engines}
    ratios: list[float] = []
    with servers(*procs.values()):
        for proc in procs.values():  # warm up
            await drive(proc.port, [f"/episodes/{i}/mcp" for i in await create_episodes(proc.port, agents)], 5,
                        "set_quantity", ARGS)  # fmt: skip
        for round_ in range(rounds):
            order = list(procs) if round_ % 2 == 0 else list(procs)[::-1]
            per_call: dict[str, float] = {}
            for name in order:
                port = procs[name].port
                ids = await create_episodes(port, agents)
                load = await drive(port, [f"/episodes/{i}/mcp" for i in ids], calls, "set_quantity", ARGS)
                loads[name].append(load)
                per_call[name] = 1 / load.throughput
            ratios.append(per_call["postgres"] / per_call["sqlite"])
    for name in engines:
        print(line(name, merged(loads[name])))
    print(f"  per-call postgres / sqlite, per round: {' '.join(f'{r:.2f}' for r in ratios)}")
    print(f"  per-call cost postgres / sqlite = {statistics.median(ratios):.2f} (median)   (target <= 1.5)")


async def fork(engines: dict[str, str], step: int, forks: int) -> None:
    print(f"fork: an episode of {step} calls, then {forks} forks at step {step}, one at a time over HTTP")
    p50s: dict[str, float] = {}
    for name, db in engines.items():
        proc = await simia(db).ready()
        with servers(proc):
            [episode] = await create_episodes(proc.port, 1)
            load = await drive(proc.port, [f"/episodes/{episode}/mcp"], step, "set_quantity", ARGS)
            assert not load.errors, load.errors[:1]
            conn = Connection(proc.port)
            times: list[float] = []
            try:
                for _ in range(forks):
                    start = time.perf_counter()
                    status, data = await conn.request("POST", f"/v1/episodes/{episode}/fork", {"step": step})
                    times.append(time.perf_counter() - start)
                    if status != 201:
                        raise RuntimeError(f"fork failed: HTTP {status} {data[:200]!r}")
                    state = json.loads(data).get("state")
                    if state is not None and state["items"]["milk"]["qty"] != 4:
                        raise RuntimeError(f"fork at step {step} has the wrong state: {state}")
            finally:
                await conn.close()
        p50s[name] = statistics.median(times) * 1000
        p90 = sorted(times)[int(0.9 * len(times))] * 1000
        print(f"  {name:<10} fork at step {step}: p50 {p50s[name]:.2f} ms  p90 {p90:.2f} ms")
    print(f"  fork p50 sqlite {p50s['sqlite']:.2f} ms, postgres {p50s['postgres']:.2f} ms   (target <= 10 ms)")


async def seeded(port: int, seeds: range) -> list[str]:
    conn = Connection(port)
    ids = []
    try:
        for seed in seeds:
            status, data = await conn.request("POST", "/v1/episodes", {"world": "mock", "seed": seed})
            if status != 201:
                raise RuntimeError(f"creating an episode failed: HTTP {status} {data[:200]!r}")
            ids.append(json.loads(data)["id"])
    finally:
        await conn.close()
    return ids


async def replay_backend(recorded: str, rounds: int) -> float:
    """Answers per second of the `replay:DB` backend alone (in this process, every recorded key `rounds` times,
    64 at a time): what replaces the model in a replayed call."""
    with sqlite3.connect(recorded) as conn:
        keys = [row[0] for row in conn.execute("SELECT replay_key FROM llm_cache")]
    backend = ReplayBackend(recorded)
    requests = [CompletionRequest(messages=[], schema={}, key=key) for key in keys] * rounds
    start = time.perf_counter()
    for i in range(0, len(requests), 64):
        await asyncio.gather(*(backend.generate(r, 10.0) for r in requests[i : i + 64]))
    elapsed = time.perf_counter() - start
    await backend.aclose()
    return len(requests) / elapsed


async def replay(tmp: Path, agents: int, calls: int) -> None:
    print(f"replay: {agents} seeded episodes x {calls} calls recorded, then replayed concurrently without a model")
    print("  (servers with --synchronous NORMAL: replays are evaluation runs, not training data of record)")
    recorded = str(tmp / "recorded.db")
    loads: dict[str, Load] = {}
    proc = await simia(recorded, synchronous="NORMAL").ready()
    with servers(proc):
        ids = await seeded(proc.port, range(agents))
        loads["scripted (recording)"] = await drive(proc.port, [f"/episodes/{i}/mcp" for i in ids], calls,
                                                    "set_quantity", ARGS)  # fmt: skip
    proc = await simia(str(tmp / "replayed.db"), "--backend", f"replay:{recorded}", synchronous="NORMAL").ready()
    with servers(proc):
        ids = await seeded(proc.port, range(agents))
        loads["replay"] = await drive(proc.port, [f"/episodes/{i}/mcp" for i in ids], calls, "set_quantity", ARGS)
    for name, load in loads.items():
        print(line(name, load))
    ours, base = loads["replay"], loads["scripted (recording)"]
    print(f"  replay errors: {len(ours.errors)}   (target 0: every call found its recorded answer)")
    print(f"  replay {ours.throughput:.0f} calls/s = {ours.throughput / base.throughput:.2f} of the scripted backend"
          " through the whole server (HTTP, MCP, state, commit)")  # fmt: skip
    answers = await replay_backend(recorded, rounds=2 if agents < 10 else 20)
    print(f"  replay backend alone: {answers:.0f} answers/s   (target >= 2000 calls/s)")


async def main() -> None:
    parser = argparse.ArgumentParser(description="store engines: Postgres vs SQLite, fork, replay")
    parser.add_argument("scenario", nargs="?", default="all", choices=["percall", "fork", "replay", "all"])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check that the bench runs, not its targets")
    args = parser.parse_args()
    quick = args.quick
    print(f"store engines{' (quick: tiny sizes, figures not meaningful)' * quick}")
    with tempfile.TemporaryDirectory() as tmp, PostgresCluster(durable=True) as cluster:
        folder = Path(tmp)
        if args.scenario in ("percall", "all"):
            engines = {"sqlite": str(folder / "percall.db"), "postgres": cluster.create_database()}
            await percall(engines, agents=4 if quick else 16, calls=5 if quick else 50, rounds=2 if quick else 6)
        if args.scenario in ("fork", "all"):
            engines = {"sqlite": str(folder / "fork.db"), "postgres": cluster.create_database()}
            await fork(engines, step=40 if quick else 500, forks=5 if quick else 100)
        if args.scenario in ("replay", "all"):
            await replay(folder, agents=4 if quick else 32, calls=5 if quick else 50)


if __name__ == "__main__":
    asyncio.run(main())
