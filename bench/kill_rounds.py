"""kill -9 under load, round after round: no acknowledged call is ever lost, and the database stays sound.

    python bench/kill_rounds.py [--rounds 20] [--agents 300] [--acks 3000] [--synchronous FULL|NORMAL] [--quick]

Each round starts `simia serve` on the same SQLite file (a zero-latency scripted backend), and `--agents`
concurrent agents call tools on their episodes' MCP URLs (one keep-alive connection each, MCP 2026-07-28;
the episodes of round 1 continue through every round). Each acknowledged call is recorded with its
`simia/seq` and the quantity it set. After a random number of acknowledged calls (between half of
`--acks` and `--acks`) the server gets SIGKILL. Then, with the server dead, the file itself is checked:
`PRAGMA integrity_check` is ok, every acknowledged call is stored at its seq with the arguments it was
sent, and every episode's events run 1..seq without a gap. Exits 1 if anything was lost.

`--quick` runs 3 rounds of 60 agents (what CI runs). `--control` runs the test of the test: the same rounds
against `tests/server/unsafe_serve.py`, which acknowledges before committing, and must be caught losing calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _driver import PY, ROOT, Connection, Process, call_tool, create_episodes, free_port

SCRIPT = ROOT / "tests" / "fixtures" / "mock_script.json"


@dataclass
class Round:
    acked: dict[tuple[str, int], int] = field(default_factory=dict)  # (episode, seq) -> qty it set
    refused: int = 0  # answers that were not acknowledgements (isError), never counted as acked


def serve(db: Path, port: int, synchronous: str, control: bool = False) -> Process:
    command = [PY, str(ROOT / "tests" / "server" / "unsafe_serve.py")] if control else [PY, "-m", "simia.cli", "serve"]
    return Process(
        [
            *command,
            *("--db", str(db), "--port", str(port)),
            *("--worlds-dir", str(ROOT / "tool_specs"), "--world", "mock", "--log-level", "error"),
            *("--backend", f"scripted:{SCRIPT}", "--synchronous", synchronous, "--max-calls", "100000"),
        ],
        port,
    )


async def load_until_killed(server: Process, episodes: list[str], kill_after: int) -> Round:
    """Every agent calls `set_quantity` on its episode until the server dies; SIGKILL after `kill_after` acks."""
    out = Round()
    killed = asyncio.Event()
    counter = iter(range(1, 10**9))

    async def agent(episode: str) -> None:
        conn = Connection(server.port)
        try:
            while not killed.is_set():
                qty = next(counter) % 101  # the tool's schema allows 0-100
                try:
                    result = await call_tool(
                        conn, f"/episodes/{episode}/mcp", "set_quantity", {"name": "milk", "qty": qty}, 1
                    )
                except (RuntimeError, OSError, asyncio.IncompleteReadError):
                    return  # the server is gone (or going): this call was never acknowledged
                if result.get("isError"):  # not an acknowledgement of a call (and never expected here)
                    out.refused += 1
                    continue
                out.acked[(episode, int(result["_meta"]["simia/seq"]))] = qty
                if len(out.acked) >= kill_after and not killed.is_set():
                    os.kill(server.proc.pid, signal.SIGKILL)
                    killed.set()
        finally:
            await conn.close()

    await asyncio.wait_for(asyncio.gather(*(agent(e) for e in episodes)), timeout=300)
    if server.proc.poll() is None:  # every agent stopped before the kill (their episodes are gone: a control)
        os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=30)
    return out


def check(db: Path, acked: dict[tuple[str, int], int]) -> tuple[list[tuple[str, int]], str, int]:
    """With the server dead: (acknowledged calls missing or stored differently, integrity_check, episodes with
    a gap in their seqs)."""
    with sqlite3.connect(db) as conn:
        integrity = str(conn.execute("PRAGMA integrity_check").fetchone()[0])
        stored = {
            (episode, seq): json.loads(arguments).get("qty")
            for episode, seq, arguments in conn.execute("SELECT episode_id, seq, arguments FROM events")
        }
        gaps = 0
        for episode, last in conn.execute("SELECT id, seq FROM episodes"):
            seqs = [r[0] for r in conn.execute("SELECT seq FROM events WHERE episode_id = ? ORDER BY seq", (episode,))]
            gaps += seqs != list(range(1, last + 1))
    lost = [key for key, qty in acked.items() if stored.get(key) != qty]
    return lost, integrity, gaps


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--agents", type=int, default=300)
    parser.add_argument("--acks", type=int, default=3000, help="kill after a random number of acks up to this")
    parser.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="FULL")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--control",
        action="store_true",
        help="run the test's control instead: a server that acknowledges before committing (it must lose calls)",
    )
    parser.add_argument("--quick", action="store_true", help="3 rounds, 60 agents, 300 acks")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.agents, args.acks = 3, 60, 300
    rng = random.Random(args.seed)
    print(
        f"kill -9 x{args.rounds} under {args.agents} concurrent agents, --synchronous {args.synchronous}, "
        f"kill after {args.acks // 2}-{args.acks} acknowledged calls"
        + (" (CONTROL: a server that acknowledges before committing)" if args.control else "")
    )
    total_acked = total_lost = total_gaps = 0
    integrity_ok = True
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "kill.db"
        episodes: list[str] = []
        for number in range(1, args.rounds + 1):
            server = await serve(db, free_port(), args.synchronous, args.control).ready()
            try:
                if not episodes:
                    episodes = await create_episodes(server.port, args.agents)
                outcome = await load_until_killed(server, episodes, rng.randint(args.acks // 2, args.acks))
            finally:
                server.stop()
            assert server.proc.returncode == -signal.SIGKILL, f"the server exited with {server.proc.returncode}"
            lost, integrity, gaps = check(db, outcome.acked)
            total_acked += len(outcome.acked)
            total_lost += len(lost)
            total_gaps += gaps
            integrity_ok = integrity_ok and integrity == "ok"
            print(
                f"  round {number:>2}: {len(outcome.acked):>5} acknowledged, {len(lost)} lost, "
                f"integrity {integrity}, {gaps} episodes with a seq gap"
                + (f", {outcome.refused} isError answers" if outcome.refused else "")
            )
    verdict = "ok" if integrity_ok else "FAILED"
    print(
        f"kill rounds: {args.rounds} rounds, {total_acked} acknowledged, {total_lost} lost, integrity {verdict}, "
        f"{total_gaps} seq gaps ({time.perf_counter() - start:.0f} s)"
    )
    return 0 if total_lost == 0 and integrity_ok and total_gaps == 0 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
