"""What the trainer tests share: a live `simia serve` on the mock world, its stored episodes and their training
rewards read over HTTP, a command run in a trainer's venv, and the blocks of a docs page."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
from simia.sim.verdict import Verdict
from simia.testing import FakeProvider, mock_world_answer
from simia.testing.processes import serve_process

__all__ = [
    "PASS",
    "ROOT",
    "Served",
    "json_lines",
    "page_block",
    "page_blocks",
    "page_command",
    "rules_decide",
    "run_command",
    "serve_faked",
    "serve_scripted",
]

ROOT = Path(__file__).resolve().parents[2]
PASS = {
    "criteria": [{"criterion": "the rubric", "passed": True, "evidence": "the recorded calls"}],
    "reasoning": "The rule checks decide.",
    "reward": 1,
}
"""A judge's verdict that passes every rubric, so the task's rule checks decide the reward."""


def rules_decide(body: dict[str, Any]) -> dict[str, Any]:
    """A flawless simulator of the mock world, and a judge that passes every rubric: the rules decide."""
    name = (body.get("response_format") or {}).get("json_schema", {}).get("name")
    return PASS if name == "verdict" else mock_world_answer(body)


@dataclass
class Served:
    """A live `simia serve`, read as its owner (`token`, where it has tokens) reads it."""

    url: str
    token: str | None = field(default=None, kw_only=True)

    def http(self, token: str | None = None) -> httpx.AsyncClient:
        token = token or self.token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=60)

    async def episode(self, episode_id: str) -> dict[str, Any]:
        async with self.http() as http:
            answer = await http.get(f"/v1/episodes/{episode_id}")
        assert answer.status_code == 200, answer.text
        detail: dict[str, Any] = answer.json()
        return detail

    async def stored_reward(self, episode_id: str) -> float | None:
        """The stored verdict's training reward (what the trainer must receive)."""
        return Verdict.model_validate((await self.episode(episode_id))["verdict"]).training_reward()

    async def episodes(self) -> list[dict[str, Any]]:
        async with self.http() as http:
            listed: list[dict[str, Any]] = (await http.get("/v1/episodes")).json()["episodes"]
        return listed


@contextlib.asynccontextmanager
async def serve_faked(tmp_path: Path, answer: Callable[[dict[str, Any]], dict[str, Any]]) -> AsyncIterator[str]:
    """`simia serve` on the mock world with the fake provider playing `answer` as its simulator and judge; its URL."""
    async with FakeProvider(answer).running() as fake:
        args = ["--world", "mock", "--db", str(tmp_path / "simia.db"), "--log-level", "warning"]
        async with serve_process(*args, "--backend", "openai-compatible:fake", "--base-url", fake.base_url) as server:
            yield server.url


@contextlib.asynccontextmanager
async def serve_scripted(tmp_path: Path, judge: list[dict[str, Any]], *tokens: str) -> AsyncIterator[str]:
    """`simia serve` on the mock world with the scripted simulator, the scripted `judge`, and the token options
    `tokens`; its URL."""
    script = tmp_path / "judge.json"
    script.write_text(json.dumps(judge), encoding="utf-8")
    simulator = ROOT / "tests" / "fixtures" / "mock_script.json"
    args = [
        *("--worlds-dir", str(ROOT / "tool_specs"), "--world", "mock", "--db", str(tmp_path / "simia.db")),
        *("--backend", f"scripted:{simulator}", "--judge-backend", f"scripted:{script}", "--log-level", "warning"),
        *tokens,
    ]
    async with serve_process(*args) as server:
        yield server.url


async def run_command(command: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float) -> tuple[str, str]:
    """Run `command` to its end (killed after `timeout` seconds), which must succeed; its stdout and stderr."""
    proc = await asyncio.create_subprocess_exec(
        *command, cwd=cwd, env=dict(env), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out.decode()[-3000:]}\n{err.decode()[-5000:]}"
    return out.decode(), err.decode()


def json_lines(out: str, starts: str = "{") -> list[Any]:
    """The JSON values a command printed, one a line (the lines that start with one of `starts`)."""
    return [json.loads(line) for line in out.splitlines() if line[:1] and line[:1] in starts]


def page_blocks(page: Path, lang: str = "python") -> list[str]:
    """The ```lang blocks of a docs page, in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```", page.read_text(encoding="utf-8"), flags=re.M | re.S)


def page_block(page: Path, lang: str, first_line: str = "") -> str:
    """The page's ```lang block that starts with `first_line`."""
    return next(b for b in page_blocks(page, lang) if b.startswith(first_line))


def page_command(page: Path, start: str) -> list[str]:
    """The words of the page's bash command that starts with `start` (continuations joined)."""
    for body in page_blocks(page, "bash"):
        for line in body.replace("\\\n", " ").splitlines():
            if line.startswith(start):
                return shlex.split(line, comments=True)
    raise AssertionError(f"{page.name} shows no command starting {start!r} any more")
