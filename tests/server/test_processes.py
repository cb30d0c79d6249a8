"""Real `simia serve` processes: stdio for desktop clients, kill -9 under load, a filesystem that fills up, and the
ports they listen on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
import simia.testing.processes as processes
from mcp import Client, StdioServerParameters
from simia.server.inprocess import free_port
from simia.testing.processes import SIMIA_SERVE, ServeProcess, serve_process

pytestmark = [pytest.mark.processes, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "fixtures" / "mock_script.json"


async def test_stdio_serves_one_episode_to_the_sdk_client_and_judges_it(tmp_path: Path) -> None:
    judge = tmp_path / "judge.json"
    judge.write_text(json.dumps([{"data": {"criteria": [], "reasoning": "milk set to 4", "reward": 1}}]))
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "simia.cli",
            "serve",
            "--transport",
            "stdio",
            "--world",
            "mock",
            "--task",
            "restock_milk",
            "--worlds-dir",
            str(ROOT / "tool_specs"),
            "--backend",
            f"scripted:{SCRIPT}",
            "--judge-backend",
            f"scripted:{judge}",
            "--db",
            str(tmp_path / "stdio.db"),
        ],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    async with Client(params) as client:
        tools = await client.list_tools()
        changed = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
        missing = await client.call_tool("get_item", {"name": "banana"})
    assert [t.name for t in tools.tools] == ["list_items", "get_item", "set_quantity"]
    assert changed.structured_content == {"name": "milk", "qty": 4}
    assert missing.is_error and missing.content[0].text == "Error (item_not_found): There is no banana in the pantry."
    with sqlite3.connect(tmp_path / "stdio.db") as db:
        rows = db.execute(
            "SELECT e.status, e.seq, json_extract(v.state_patch, '$[0].value'), e.verdict FROM episodes e "
            "JOIN events v ON v.episode_id = e.id AND v.seq = 1"
        ).fetchall()
    [(status, seq, milk, verdict)] = rows  # the milk: the patch of the write (states are the events' patches)
    assert (status, seq, milk) == ("ended", 2, 4)  # committed, and ended when the client disconnected
    judged = json.loads(verdict)  # ... and judged with --judge-backend
    assert (judged["reward"], judged["status"], judged["checks"]) == (1, "ok", ["rules", "llm"])
    assert judged["rule_checks"][0]["passed"] is True


def serve(db: Path, port: int, *, unsafe: bool = False, synchronous: str = "FULL") -> ServeProcess:
    """`simia serve` on `db` (`unsafe`: tests/server/unsafe_serve.py, which acknowledges before it commits)."""
    command = [sys.executable, str(ROOT / "tests" / "server" / "unsafe_serve.py")] if unsafe else SIMIA_SERVE
    return serve_process(
        *("--db", str(db), "--worlds-dir", str(ROOT / "tool_specs"), "--world", "mock"),
        *("--backend", f"scripted:{SCRIPT}", "--log-level", "warning", "--synchronous", synchronous),
        port=port,
        command=command,
    )


async def load_then_kill(url: str, proc: subprocess.Popen[bytes], *, acks_before_kill: int) -> list[tuple[str, int]]:
    """8 clients call tools concurrently; after `acks_before_kill` acknowledged calls the server gets SIGKILL."""
    async with httpx.AsyncClient() as http:
        episodes = [(await http.post(f"{url}/v1/episodes", json={"world": "mock"})).json() for _ in range(8)]
    acked: list[tuple[str, int]] = []
    killed = asyncio.Event()

    async def worker(episode: dict[str, Any]) -> None:
        try:
            async with Client(episode["mcp_url"]) as client:
                while not killed.is_set():
                    result = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
                    assert not result.is_error and result.meta
                    acked.append((episode["id"], int(result.meta["simia/seq"])))
                    if len(acked) >= acks_before_kill and not killed.is_set():
                        proc.send_signal(signal.SIGKILL)
                        killed.set()
        except Exception:  # the server died under us: expected
            killed.set()

    await asyncio.wait_for(asyncio.gather(*(worker(e) for e in episodes)), timeout=120)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    return acked


async def lost_after_restart(db: Path, acked: list[tuple[str, int]]) -> list[tuple[str, int]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with serve(db, port):
        stored: set[tuple[str, int]] = set()
        async with httpx.AsyncClient() as http:
            for episode_id in {e for e, _ in acked}:
                response = await http.get(f"{url}/v1/episodes/{episode_id}")
                if response.status_code == 200:
                    stored |= {(episode_id, ev["seq"]) for ev in response.json()["events"]}
        return [a for a in acked if a not in stored]


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])  # group commits on the writer thread / inline
async def test_kill_9_under_load_loses_no_acknowledged_call_and_episodes_continue(
    tmp_path: Path, synchronous: str
) -> None:
    db, port = tmp_path / "simia.db", free_port()
    url = f"http://127.0.0.1:{port}"
    async with serve(db, port, synchronous=synchronous) as server:
        proc = server.process
        acked = await load_then_kill(url, proc, acks_before_kill=80)
    assert len(acked) >= 80
    assert await lost_after_restart(db, acked) == []
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with serve(db, port):  # the same episode URL continues from the last committed state
        episode_id = acked[0][0]
        last = max(seq for e, seq in acked if e == episode_id)
        async with Client(f"{url}/episodes/{episode_id}/mcp") as client:
            result = await client.call_tool("get_item", {"name": "milk"})
        assert result.meta and result.meta["simia/seq"] >= last + 1
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


async def test_the_kill_test_catches_a_server_that_acknowledges_before_committing(tmp_path: Path) -> None:
    """Test of the test: the control acknowledges before it commits, and must be caught losing calls."""
    db, port = tmp_path / "control.db", free_port()
    url = f"http://127.0.0.1:{port}"
    async with serve(db, port, unsafe=True) as server:
        proc = server.process
        acked = await load_then_kill(url, proc, acks_before_kill=80)
    lost = await lost_after_restart(db, acked)
    print(f"control: {len(lost)} of {len(acked)} acknowledged calls lost")
    assert len(lost) > 0, "the control lost nothing: the kill test would not catch an unsafe server"


@contextlib.contextmanager
def small_disk(where: Path, size: str = "4m") -> Iterator[Path]:
    """A real filesystem of `size` (tmpfs) mounted at `where`; needs root (CI's container has it)."""
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}); the in-process tests cover this")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the filesystem has no byte left; returns it (delete it and the space returns)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (65536, 4096, 512, 1):  # the last bytes too: SQLite may fit a small write in them
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


@pytest.mark.slow
@pytest.mark.allowed_skip
async def test_simia_serve_on_a_filesystem_that_fills_up_fails_calls_cleanly_and_recovers(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        db, port = disk / "simia.db", free_port()
        url = f"http://127.0.0.1:{port}"
        async with serve(db, port, synchronous="NORMAL") as server:
            proc = server.process
            async with httpx.AsyncClient(base_url=url) as http:
                episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
                async with Client(episode["mcp_url"]) as client:
                    ok = await client.call_tool("set_quantity", {"name": "milk", "qty": 1})
                    filler = fill(disk)
                    refused = None
                    big = "milk" + "x" * 4000  # each call's arguments take room in the log
                    for qty in range(2000):
                        result = await client.call_tool("set_quantity", {"name": big, "qty": qty % 100})
                        if result.is_error:
                            refused = result
                            break
                    assert refused is not None, "the full filesystem kept taking calls"
                    assert refused.meta is not None
                    assert (refused.meta["simia/error_kind"], refused.meta["simia/error_code"]) == (
                        "infra",
                        "database_unavailable",
                    )
                    assert proc.poll() is None  # no crash
                    filler.unlink()  # space returns
                    again = await client.call_tool("set_quantity", {"name": "milk", "qty": 7})
                assert not ok.is_error and not again.is_error and again.meta
                detail = (await http.get(f"/v1/episodes/{episode['id']}")).json()
                assert detail["events"][-1]["arguments"] == {"name": "milk", "qty": 7}
                assert [e["seq"] for e in detail["events"]] == list(range(1, again.meta["simia/seq"] + 1))
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


async def test_a_server_whose_chosen_port_was_taken_before_it_bound_starts_again_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    taken = socket.socket()
    taken.bind(("127.0.0.1", free_port()))
    taken.listen()
    chosen = iter([taken.getsockname()[1], free_port()])
    monkeypatch.setattr(processes, "free_port", lambda: next(chosen))
    try:
        async with serve_process("--world", "mock", "--db", str(tmp_path / "s.db")) as server:
            assert server.port != taken.getsockname()[1]
            async with httpx.AsyncClient() as http:
                assert (await http.get(f"{server.url}/healthz")).status_code == 200
        given = ServeProcess(["--world", "mock", "--db", str(tmp_path / "g.db")], port=taken.getsockname()[1])
        with pytest.raises(RuntimeError, match="Address already in use"):  # a port the test asked for: no other
            async with given:
                pass
    finally:
        taken.close()
