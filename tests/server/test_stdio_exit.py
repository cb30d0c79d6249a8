"""`simia serve --transport stdio` under the MCP SDK's own stdio client, which terminates the server 2 s after
closing its stdin: the episode is ended when the client leaves, before the judge is asked, so a judge slower than
that leaves it ended and unjudged (for `simia judge ID`), never active."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from simia.testing.fake_provider import FakeProvider, FakeReply

pytestmark = pytest.mark.processes  # the server is a subprocess the client starts and stops

ROOT = Path(__file__).resolve().parents[2]
VERDICT = {"criteria": [], "reasoning": "too late", "reward": 1}


async def test_a_client_that_terminates_the_server_while_the_judge_thinks_finds_its_episode_ended(
    tmp_path: Path,
) -> None:
    db = tmp_path / "simia.db"
    async with FakeProvider(VERDICT).running() as fake:
        fake.script(FakeReply(VERDICT, delay=60))  # the judge's answer comes long after the client's 2 s
        params = StdioServerParameters(
            command=sys.executable,
            args=[
                *("-m", "simia.cli", "serve", "--transport", "stdio", "--world", "mock", "--task", "restock_milk"),
                *("--backend", f"scripted:{ROOT / 'tests' / 'fixtures' / 'mock_script.json'}"),
                *("--judge-backend", "openai-compatible:judge", "--base-url", fake.base_url, "--db", str(db)),
            ],
            cwd=str(tmp_path),
        )
        async with Client(params) as client:
            answer = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
        assert not answer.is_error
        asked = len(fake.requests)
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT status, status_reason, verdict, calls FROM episodes").fetchall()
    assert asked == 1  # the judge was asked, and the server was gone before it answered
    assert rows == [("ended", "ended by client", None, 1)]
