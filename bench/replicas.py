"""Several simia replicas on Postgres behind HAProxy (`simia.testing.replicas`): kill -9 rounds and throughput.

    python bench/replicas.py [kill|throughput|all] [--rounds N] [--agents N] [--calls N] [--throughput-rounds N]
                             [--quick]

kill        `--rounds` rounds (default 20) of `--agents` concurrent agents (default 300) on episode URLs
            through the balancer, `--calls` sequential calls each (default 10), a 20 ms backend. A
            failed call (502 from the balancer, a cut connection, an `infra` error) is retried with
            the same JSON-RPC id until it is acknowledged. A quarter of the way in, one replica
            (alternating) gets SIGKILL and is restarted at once; when it is healthy again every
            episode makes 2 more calls. Each round checks, in Postgres: every episode's events are
            exactly its acknowledged calls, seq 1..n (none lost, none doubled by a retry); the
            store's integrity check; calls were acknowledged while the replica was down (by the
            survivor); the restarted replica answered calls.
throughput  1,000 concurrent episodes x 5 calls at a 200 ms backend: 2 replicas on Postgres behind
            HAProxy vs 1 replica direct on SQLite (targets: ratio >= 0.80, 0 errors), with HAProxy
            doing round robin, then hashing the URI (each episode to one replica), in `--throughput-rounds`
            rounds (default 3; the median round's ratio is the figure); also prints how many calls were
            simulated again because the other replica committed first.

Load comes from the lean driver (`_driver.py`, MCP 2026-07-28 requests), model answers from the lean fake
provider (`fake_provider --lean`). Postgres runs with fsync off, reached by its Unix socket (it runs on the
replicas' machine), and SQLite with `--synchronous NORMAL`: both keep every acknowledged commit through a
killed server process, neither through a power loss. `--quick`: tiny sizes, figures not meaningful.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _driver import Connection, Load, call_tool, create_episodes, drive
from simia.sim.storage import open_store
from simia.testing.replicas import Replicas

ARGS = {"name": "milk", "qty": 4}


@dataclass
class Tally:
    """The calls agents got acknowledged (seqs per episode) and the failed attempts they retried, by kind."""

    acked: dict[str, list[int]] = field(default_factory=dict)
    failures: Counter[str] = field(default_factory=Counter)
    count: int = 0
    _waiters: list[tuple[int, asyncio.Event]] = field(default_factory=list)

    def ack(self, episode: str, seq: int) -> None:
        self.acked[episode].append(seq)
        self.count += 1
        for target, event in self._waiters:
            if self.count >= target:
                event.set()

    async def reached(self, target: int) -> None:
        """Wait until `target` calls are acknowledged."""
        event = asyncio.Event()
        self._waiters.append((target, event))
        if self.count < target:
            await event.wait()


@dataclass
class Round:
    """What one kill round saw, and what it found in the store."""

    victim: int
    tally: Tally = field(default_factory=Tally)
    acked_while_down: int = 0
    restarted_served: int = 0
    problems: list[str] = field(default_factory=list)
    wall: float = 0.0


async def agent_calls(port: int, episode: str, first: int, count: int, tally: Tally, deadline: float) -> None:
    """`count` sequential calls on `episode` (JSON-RPC ids `first`...), each retried with its id until acknowledged.

    A failed attempt (the balancer's 502, a cut connection, an `infra` error) is counted in `tally.failures`
    by kind; an `agent` error for these valid calls is a bug and raises.
    """
    conn = Connection(port)
    tally.acked.setdefault(episode, [])
    try:
        for request_id in range(first, first + count):
            while True:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"call {request_id} of {episode} not acknowledged before the deadline")
                try:
                    result = await call_tool(conn, f"/episodes/{episode}/mcp", "set_quantity", ARGS, request_id)
                except RuntimeError as exc:  # an HTTP error status (the balancer's 502) or a JSON-RPC error
                    tally.failures[str(exc).split(":")[0]] += 1
                    await conn.close()
                except (OSError, asyncio.IncompleteReadError):  # the connection was cut (by the kill)
                    tally.failures["connection cut"] += 1
                    await conn.close()
                else:
                    meta = result["_meta"]
                    if not result.get("isError"):
                        tally.ack(episode, int(meta["simia/seq"]))
                        break
                    if meta.get("simia/error_kind") != "infra":
                        raise AssertionError(f"an agent error for a valid call: {result}")
                    tally.failures[f"infra {meta.get('simia/error_code')}"] += 1
                await asyncio.sleep(0.05)
    finally:
        await conn.close()


async def create_episodes_retrying(port: int, n: int, tally: Tally, concurrency: int = 32) -> list[str]:
    """Create `n` episodes through the balancer; a create whose connection is cut is sent again (counted in
    `tally.failures`): creating is not idempotent, but a second create costs only an unused episode."""
    gate = asyncio.Semaphore(concurrency)

    async def create() -> str:
        async with gate:
            while True:
                conn = Connection(port)
                try:
                    status, data = await conn.request("POST", "/v1/episodes", {"world": "mock"})
                except (OSError, asyncio.IncompleteReadError):
                    tally.failures["create: connection cut"] += 1
                    await asyncio.sleep(0.05)
                    continue
                finally:
                    await conn.close()
                if status != 201:
                    raise RuntimeError(f"creating an episode failed: HTTP {status} {data[:200]!r}")
                episode: str = json.loads(data)["id"]
                return episode

    return list(await asyncio.gather(*(create() for _ in range(n))))


async def run_agents(port: int, episodes: list[str], first: int, count: int, tally: Tally, deadline: float) -> None:
    """`agent_calls` on every episode at once."""
    await asyncio.gather(*(agent_calls(port, e, first, count, tally, deadline) for e in episodes))


async def kill_round(deployment: Replicas, victim: int, agents: int, calls: int, timeout: float = 120) -> Round:
    """One round: load, SIGKILL replica `victim` a quarter of the way in and restart it, then check the store."""
    round_ = Round(victim)
    tally = round_.tally
    start = time.monotonic()
    deadline = start + timeout
    episodes = await create_episodes_retrying(deployment.port, agents, tally)

    async def killer() -> None:
        await tally.reached(agents * calls // 4)
        deployment.kill(victim)
        before = tally.count
        await deployment.restart(victim)
        round_.acked_while_down = tally.count - before

    kill = asyncio.create_task(killer())
    await run_agents(deployment.port, episodes, 1, calls, tally, deadline)
    await asyncio.wait_for(kill, timeout=max(1.0, deadline - time.monotonic()))
    await asyncio.sleep(0.6)  # the balancer's health check (every 250 ms) takes the restarted replica back
    await run_agents(deployment.port, episodes, calls + 1, 2, tally, deadline)
    round_.restarted_served = await deployment.replicas[victim].calls_served()
    round_.wall = time.monotonic() - start
    round_.problems = await store_problems(deployment.db, tally.acked)
    if round_.acked_while_down == 0:
        round_.problems.append("no call was acknowledged while the replica was down")
    if round_.restarted_served == 0:
        round_.problems.append("the restarted replica answered no call")
    return round_


async def store_problems(db: str, acked: dict[str, list[int]]) -> list[str]:
    """What the store holds that differs from the acknowledged calls (each episode: exactly seq 1..n, acked)."""
    problems: list[str] = []
    store = open_store(db)
    try:
        for episode, seqs in acked.items():
            stored = [event.seq for event in await store.events(episode)]
            if sorted(seqs) != list(range(1, len(seqs) + 1)) or stored != sorted(seqs):
                problems.append(f"{episode}: acknowledged seqs {sorted(seqs)}, stored {stored}")
        check = await store.integrity_check()
        if check != "ok":
            problems.append(f"integrity check: {check}")
    finally:
        await store.close()
    return problems


async def kill(rounds: int, agents: int, calls: int) -> list[Round]:
    print(f"kill: {rounds} rounds, {agents} agents x {calls}+2 calls through HAProxy over 2 replicas on Postgres")
    results: list[Round] = []
    async with Replicas(2, provider_latency=0.02) as deployment:
        for n in range(rounds):
            round_ = await kill_round(deployment, n % 2, agents, calls)
            results.append(round_)
            failures = ", ".join(f"{kind} {n}" for kind, n in round_.tally.failures.most_common())
            print(
                f"  round {n + 1:>2}: killed r{round_.victim}; {round_.tally.count} calls acknowledged "
                f"({round_.acked_while_down} while it was down); retried attempts: {failures or 'none'}; "
                f"restarted replica answered {round_.restarted_served}; {len(round_.problems)} problems; "
                f"{round_.wall:.1f} s"
            )
            for problem in round_.problems[:5]:
                print(f"    {problem}")
    acked = sum(r.tally.count for r in results)
    retried = sum(r.tally.failures.total() for r in results)
    failed = sum(1 for r in results if r.problems)
    print(f"  {acked} acknowledged calls in {rounds} rounds, {retried} retried attempts")
    print(f"  rounds with a lost, doubled or missing call or a failed check: {failed}   (target 0)")
    return results


def report(name: str, load: Load) -> None:
    print(
        f"  {name:<34} {load.calls:>6} calls  {load.throughput:8.1f} calls/s  p50 {load.pct(0.5) * 1000:7.1f} ms"
        f"  p99 {load.pct(0.99) * 1000:7.1f} ms  errors {len(load.errors)}"
    )
    if load.errors:
        print(f"    first error: {load.errors[0]}")


async def run_load(deployment: Replicas, episodes: int, calls: int) -> Load:
    ids = await create_episodes(deployment.port, episodes)
    return await drive(deployment.port, [f"/episodes/{i}/mcp" for i in ids], calls, "set_quantity", ARGS)


async def baseline_load(tmp: Path, episodes: int, calls: int, latency: float) -> Load:
    """One replica on SQLite (`--synchronous NORMAL`), no balancer."""
    sqlite = ["--synchronous", "NORMAL"]
    db = tmp / f"baseline-{time.monotonic_ns()}.db"
    async with Replicas(1, db=str(db), provider_latency=latency, serve_args=sqlite, balancer=False) as one:
        return await run_load(one, episodes, calls)


async def throughput(tmp: Path, episodes: int, calls: int, latency: float, rounds: int) -> None:
    """`rounds` rounds, each: the baseline, both balanced setups, the baseline again; a round's ratios are
    against the mean of its two baselines (a machine that got busier or quieter weighs on both sides), and
    the figure is the median round's (one round on a shared 2-core machine swings by 0.1 or more)."""
    print(
        f"throughput: {episodes} concurrent episodes x {calls} calls, backend latency {latency * 1000:.0f} ms, "
        f"{rounds} round(s)"
    )
    ratios: dict[str, list[float]] = {"roundrobin": [], "uri": []}
    errors = conflicts = 0
    for n in range(1, rounds + 1):
        before = await baseline_load(tmp, episodes, calls, latency)
        balanced: list[tuple[str, Load]] = []
        for balance in ("roundrobin", "uri"):
            async with Replicas(2, provider_latency=latency, balance=balance) as two:
                balanced.append((balance, await run_load(two, episodes, calls)))
                conflicts += int(sum([await r.metric("simia_episode_conflicts_total") for r in two.replicas]))
        after = await baseline_load(tmp, episodes, calls, latency)
        print(f" round {n}")
        report("1 replica direct, SQLite (before)", before)
        report("1 replica direct, SQLite (after)", after)
        base = (before.throughput + after.throughput) / 2
        for balance, load in balanced:
            report(f"2 replicas, Postgres, {balance}", load)
            ratios[balance].append(load.throughput / base)
            errors += len(load.errors)
    for balance, values in ratios.items():
        print(
            f"  throughput 2 replicas behind HAProxy ({balance}) / 1 replica direct = "
            f"{statistics.median(values):.2f} median of {', '.join(f'{v:.2f}' for v in values)}   (target >= 0.80)"
        )
    print(f"  errors: {errors} (target 0); calls simulated again after another replica committed first: {conflicts}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", nargs="?", default="all", choices=["kill", "throughput", "all"])
    parser.add_argument("--rounds", type=int, help="kill rounds (default 20; quick 1)")
    parser.add_argument("--agents", type=int, help="concurrent agents in each kill round (default 300; quick 20)")
    parser.add_argument("--calls", type=int, help="calls per agent before the follow-up (default 10; quick 4)")
    parser.add_argument("--episodes", type=int, help="concurrent episodes for throughput (default 1000; quick 20)")
    parser.add_argument("--throughput-rounds", type=int, help="throughput rounds, median reported (default 3; quick 1)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check that the bench runs, not its targets")
    args = parser.parse_args()
    quick = args.quick
    if quick:
        print("(quick: tiny sizes, figures not meaningful)")
    if args.scenario in ("kill", "all"):
        await kill(
            args.rounds or (1 if quick else 20),
            args.agents or (20 if quick else 300),
            args.calls or (4 if quick else 10),
        )
    if args.scenario in ("throughput", "all"):
        with tempfile.TemporaryDirectory() as tmp:
            await throughput(
                Path(tmp),
                args.episodes or (20 if quick else 1000),
                2 if quick else 5,
                0.05 if quick else 0.2,
                args.throughput_rounds or (1 if quick else 3),
            )


if __name__ == "__main__":
    asyncio.run(main())
