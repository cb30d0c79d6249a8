"""Server overhead and load: simia vs a bare MCP SDK server, same machine, same run, printed as ratios.

    python bench/server_load.py [overhead|scale|realistic|all] [--episodes N] [--calls N] [--synchronous FULL]
                                [--world mock|retail-1x] [--quick]

overhead   per-call cost with a zero-latency scripted backend vs a bare SDK server echoing its
           arguments (target: simia / bare <= 1.25)
scale      1,000 concurrent episodes x 5 calls against a 200 ms backend vs a bare SDK server making
           one model call per tool call (targets: zero errors, throughput >= 0.80 of bare; p99 latency
           and server memory per episode reported); `--world retail-1x` serves a generated retail world of
           tau2's size (bench/_retail_scale.py) instead of `mock`, its agents reading orders
realistic  50 concurrent episodes against a 1 s backend (targets: throughput >= 0.90 of the ideal
           50 calls/s, p99 added latency <= 250 ms)

Load comes from a lean asyncio HTTP driver (bench/_driver.py), MCP 2026-07-28 requests. simia runs
with `--synchronous NORMAL` (commits survive a crash of the server process; FULL also survives power
loss, and fsyncs every group commit): pass `--synchronous FULL` to measure the default.

`--quick` runs every scenario at a tiny size (a few agents, calls and rounds, short backend
latencies): it checks the bench runs and prints its ratios, which mean little at that size.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _driver import PY, ROOT, Load, Process, cpu_seconds, create_episodes, drive, free_port, merged, rss_mb
from _retail_scale import load_state, world_dir, world_name

ARGS = {"name": "milk", "qty": 4}
SCRIPT = ROOT / "tests" / "fixtures" / "mock_script.json"
SYNCHRONOUS = "NORMAL"  # --synchronous: NORMAL survives a crash of the server process (kill -9), FULL a power loss


@dataclass(frozen=True)
class Served:
    """The world simia serves, the call every agent makes, and how the fake provider answers it."""

    name: str = "mock"
    worlds_dir: Path = ROOT / "tool_specs"
    tool: str = "set_quantity"
    arguments: dict[str, Any] = field(default_factory=lambda: ARGS)
    provider: tuple[str, ...] = ("-m", "simia.testing.fake_provider", "--quiet")  # the mock world's simulator


def retail_1x() -> Served:
    """A generated retail world of tau2's size (cached after the first run), its agents reading one order."""
    folder, name = world_dir(1.0), world_name(1.0)
    order = next(iter(load_state(folder, name)["orders"]))
    fake = (str(ROOT / "bench" / "_retail_scale.py"), "fake", "--world", str(folder / name))
    return Served(name, folder, "get_order_details", {"order_id": order}, fake)


def simia(port: int, db: Path, backend: list[str], cpus: set[int] | None = None, served: Served = Served()) -> Process:
    return Process(
        [
            PY,
            "-m",
            "simia.cli",
            "serve",
            "--db",
            str(db),
            "--port",
            str(port),
            "--worlds-dir",
            str(served.worlds_dir),
            "--world",
            served.name,
            "--log-level",
            "warning",
            "--synchronous",
            SYNCHRONOUS,
            *backend,
        ],
        port,
        cpus=cpus,
    )


def bare(port: int, *mode: str, cpus: set[int] | None = None) -> Process:
    return Process([PY, str(ROOT / "bench" / "_bare_server.py"), str(port), *mode], port, cpus=cpus)


@contextlib.asynccontextmanager
async def fake_provider(latency: float, served: Served = Served()) -> AsyncIterator[str]:
    """A fake OpenAI-compatible provider answering after `latency` seconds; yields its base URL."""
    port = free_port()
    fake = Process([PY, *served.provider, "--port", str(port), "--latency", str(latency)], port)
    try:
        await fake.ready("/v1/chat/completions")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        fake.stop()


def fake_backend(url: str, concurrency: int) -> list[str]:
    return ["--backend", "openai-compatible:fake", "--base-url", url, "--backend-concurrency", str(concurrency)]


def report(name: str, load: Load) -> None:
    print(
        f"  {name:<28} {load.calls:>6} calls  {load.throughput:8.1f} calls/s  p50 {load.pct(0.5) * 1000:7.1f} ms"
        f"  p99 {load.pct(0.99) * 1000:7.1f} ms  errors {len(load.errors)}"
    )
    if load.errors:
        print(f"    first error: {load.errors[0]}")


async def run_simia(
    db_dir: Path, backend: list[str], episodes: int, calls: int, served: Served = Served()
) -> tuple[Load, float, float]:
    port = free_port()
    server = await simia(port, db_dir / f"bench-{port}.db", backend, served=served).ready()
    try:
        before = rss_mb(server.proc.pid)
        ids = await create_episodes(server.port, episodes, served.name)
        load = await drive(server.port, [f"/episodes/{i}/mcp" for i in ids], calls, served.tool, served.arguments)
        after = rss_mb(server.proc.pid)
    finally:
        server.stop()
    return load, before, after


async def overhead(tmp: Path, agents: int, calls: int, rounds: int = 9, warmup: int = 10) -> None:
    print(f"overhead: {agents} concurrent agents x {calls} calls, zero-latency backends, {rounds} alternating rounds")
    cpus = sorted(os.sched_getaffinity(0))
    server_cpus = {cpus[-1]} if len(cpus) >= 2 else None  # the servers on one CPU, the driver on the others
    if server_cpus:
        os.sched_setaffinity(0, set(cpus[:-1]))
        print(f"  servers pinned to CPU {cpus[-1]}, the load driver to CPU(s) {cpus[:-1]}")
    base = await bare(free_port(), "echo", cpus=server_cpus).ready("/mcp")
    port = free_port()
    ours = await simia(port, tmp / f"bench-{port}.db", ["--backend", f"scripted:{SCRIPT}"], cpus=server_cpus).ready()
    try:
        await drive(base.port, ["/mcp"] * agents, warmup, "set_quantity", ARGS)  # warm up
        ids = await create_episodes(ours.port, agents)
        await drive(ours.port, [f"/episodes/{i}/mcp" for i in ids], warmup, "set_quantity", ARGS)
        wall: list[float] = []
        cpu: list[float] = []
        loads: list[Load] = []
        simia_loads: list[Load] = []
        for round_ in range(rounds):  # alternating (ABBA), so noise and drift hit both sides alike
            ids = await create_episodes(ours.port, agents)  # fresh episodes: within the per-episode call budget
            sides = [(base, ["/mcp"] * agents), (ours, [f"/episodes/{i}/mcp" for i in ids])]
            per_call: dict[Process, tuple[float, float]] = {}
            for server, paths in sides if round_ % 2 == 0 else sides[::-1]:
                before = cpu_seconds(server.proc.pid)
                load = await drive(server.port, paths, calls, "set_quantity", ARGS)
                per_call[server] = (1 / load.throughput, (cpu_seconds(server.proc.pid) - before) / load.calls)
                (loads if server is base else simia_loads).append(load)
            wall.append(per_call[ours][0] / per_call[base][0])
            cpu.append(per_call[ours][1] / per_call[base][1])
    finally:
        base.stop()
        ours.stop()
        os.sched_setaffinity(0, set(cpus))
    report("bare SDK echo server", merged(loads))
    report("simia (scripted backend)", merged(simia_loads))
    print(f"  per-call wall time simia / bare, per round: {' '.join(f'{r:.2f}' for r in wall)}")
    print(f"  per-call server CPU simia / bare, per round: {' '.join(f'{r:.2f}' for r in cpu)}")
    print(
        f"  per-call cost simia / bare = {statistics.median(wall):.2f} (median of {rounds} rounds)   (target <= 1.25)"
    )


async def scale(tmp: Path, episodes: int, calls: int, latency: float, served: Served = Served()) -> None:
    print(
        f"scale: {episodes} concurrent episodes x {calls} calls, backend latency {latency * 1000:.0f} ms, "
        f"world {served.name}"
    )
    async with fake_provider(latency, served) as url:
        base = await bare(free_port(), "model", url).ready("/mcp")
        try:
            bare_load = await drive(base.port, ["/mcp"] * episodes, calls, "set_quantity", ARGS)
            bare_rss = rss_mb(base.proc.pid)
        finally:
            base.stop()
        ours, before, after = await run_simia(tmp, fake_backend(url, 100_000), episodes, calls, served)
    report("bare SDK server + 1 model call", bare_load)
    report("simia", ours)
    print(f"  throughput simia / bare = {ours.throughput / bare_load.throughput:.2f}   (target >= 0.80)")
    print(f"  errors: {len(ours.errors)}   (target 0)")
    print(
        f"  simia p99 latency {ours.pct(0.99) * 1000:.0f} ms; server RSS {before:.0f} -> {after:.0f} MB, "
        f"{(after - before) * 1024 / episodes:.1f} KB per episode (bare server RSS {bare_rss:.0f} MB)"
    )


async def realistic(tmp: Path, episodes: int, calls: int, latency: float) -> None:
    print(f"realistic: {episodes} concurrent episodes x {calls} calls, backend latency {latency:.1f} s")
    async with fake_provider(latency) as url:
        ours, _, _ = await run_simia(tmp, fake_backend(url, 1000), episodes, calls)
    report("simia", ours)
    ideal = episodes / latency
    print(
        f"  throughput {ours.throughput:.1f} calls/s = {ours.throughput / ideal:.2f} of the ideal {ideal:.0f}"
        f"   (target >= 0.90)"
    )
    print(f"  p99 added latency {(ours.pct(0.99) - latency) * 1000:.0f} ms   (target <= 250 ms)")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", nargs="?", default="all", choices=["overhead", "scale", "realistic", "all"])
    parser.add_argument("--episodes", type=int, help="concurrent episodes for scale (default 1000; quick 20)")
    parser.add_argument("--calls", type=int, help="calls per episode for scale and realistic (default 5; quick 2)")
    parser.add_argument("--synchronous", choices=["NORMAL", "FULL"], default="NORMAL", help="simia's SQLite sync mode")
    parser.add_argument(
        "--world", choices=["mock", "retail-1x"], default="mock", help="the world of scale (retail-1x: tau2's size)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check that the bench runs, not its targets")
    args = parser.parse_args()
    global SYNCHRONOUS
    SYNCHRONOUS = args.synchronous
    quick = args.quick
    episodes = args.episodes or (20 if quick else 1000)
    calls = args.calls or (2 if quick else 5)
    print(f"simia runs with --synchronous {SYNCHRONOUS}{' (quick: tiny sizes, figures not meaningful)' * quick}")
    with tempfile.TemporaryDirectory() as tmp:
        if args.scenario in ("overhead", "all"):
            await (overhead(Path(tmp), 4, 20, rounds=2, warmup=2) if quick else overhead(Path(tmp), 16, 200))
        if args.scenario in ("scale", "all"):
            served = retail_1x() if args.world == "retail-1x" else Served()
            await scale(Path(tmp), episodes, calls, 0.05 if quick else 0.2, served)
        if args.scenario in ("realistic", "all"):
            await realistic(Path(tmp), 10 if quick else 50, calls, 0.2 if quick else 1.0)


if __name__ == "__main__":
    asyncio.run(main())
