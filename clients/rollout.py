"""Batch rollouts: many judged episodes of a world's tasks, with concurrency, progress and retries.

For each (task, attempt): create an episode through the HTTP API, run the agent (and
the user simulator for multi-turn tasks), post the transcript to `/end`, and record
the verdict as one JSONL line. An infrastructure failure (backend down, timeout,
budget) is retried with a fresh episode and counted apart from agent failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
from simia.sim.backends import Backend
from simia.sim.errors import BackendError
from simia.sim.world import Task, World

from .agent import Agent
from .user import UserSimulator

__all__ = ["RolloutConfig", "RunResult", "Summary", "in_process_server", "rollout", "select_tasks"]


@dataclass
class RolloutConfig:
    """One `simia rollout`.

    Attributes:
        server: base URL of a running `simia serve`.
        world: the world to roll out in (loaded locally too, for task details the agent must not see).
        tasks: task ids to run.
        n: episodes per task.
        concurrency: episodes in flight at once.
        max_turns: agent model calls per episode.
        out: folder for results.jsonl and summary.json.
        retries: fresh-episode retries after an infrastructure failure.
        token: bearer token for the server, if it needs one.
        seed: base seed (episode seeds are seed + run index) for reproducible simulations.
    """

    server: str
    world: World
    tasks: list[Task]
    n: int = 1
    concurrency: int = 4
    max_turns: int = 10
    out: Path = Path("rollouts")
    retries: int = 2
    token: str | None = None
    seed: int | None = None
    agent_max_tokens: int = 512
    user_max_tokens: int = 256


@dataclass
class RunResult:
    task: str
    attempt: int
    episode_id: str
    status: str  # judged | infra_failed | agent_failed
    reward: int | None = None
    verdict_status: str | None = None
    stop: str = ""
    turns: int = 0
    tool_calls: int = 0
    tokens: int = 0
    infra_retries: int = 0
    error: str = ""
    seconds: float = 0.0
    transcript: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Summary:
    results: list[RunResult] = field(default_factory=list)
    interrupted: bool = False

    def table(self) -> str:
        rows = [("TASK", "RUNS", "JUDGED", "INFRA", "AGENT-FAIL", "MEAN REWARD")]
        for task in sorted({r.task for r in self.results}):
            mine = [r for r in self.results if r.task == task]
            rewards = [r.reward for r in mine if r.reward is not None]
            rows.append(
                (
                    task,
                    str(len(mine)),
                    str(sum(r.status == "judged" for r in mine)),
                    str(sum(r.status == "infra_failed" for r in mine)),
                    str(sum(r.status == "agent_failed" for r in mine)),
                    f"{sum(rewards) / len(rewards):.2f}" if rewards else "-",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def select_tasks(world: World, spec: str) -> list[Task]:
    """`all`, one task id, or a file of task ids (one a line, or JSONL objects with "id")."""
    if spec == "all":
        return list(world.tasks)
    task = world.task(spec)
    if task is not None:
        return [task]
    path = Path(spec)
    if path.is_file():
        ids = []
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line:
                ids.append(str(json.loads(line)["id"]) if line.startswith("{") else line)
        missing = [i for i in ids if world.task(i) is None]
        if missing:
            raise ValueError(f"unknown task id(s) in {path}: {', '.join(missing)}")
        return [t for i in ids if (t := world.task(i)) is not None]
    known = ", ".join(t.id for t in world.tasks) or "(none)"
    raise ValueError(f"--tasks {spec!r} is neither 'all', a task id of {world.name!r} ({known}), nor a file")


class _Progress:
    def __init__(self, total: int) -> None:
        self.total = total
        self.done = self.failed = self.tokens = 0
        self.rewards: list[int] = []
        self.tty = sys.stderr.isatty()
        self.start = time.monotonic()

    def update(self, result: RunResult) -> None:
        self.done += 1
        self.failed += result.status != "judged"
        self.tokens += result.tokens
        if result.reward is not None:
            self.rewards.append(result.reward)
        mean = f"{sum(self.rewards) / len(self.rewards):.2f}" if self.rewards else "-"
        line = (
            f"[{self.done}/{self.total}] failed {self.failed}  mean reward {mean}  tokens {self.tokens}  "
            f"{time.monotonic() - self.start:.0f}s"
        )
        print(("\r" + line) if self.tty else line, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


async def rollout(
    config: RolloutConfig,
    agent_backend: Backend,
    user_backend: Backend | None,
    *,
    on_result: Callable[[RunResult], None] | None = None,
) -> Summary:
    """Run every (task, attempt) and return the summary; results are appended to `out/results.jsonl` as they end."""
    config.out.mkdir(parents=True, exist_ok=True)
    results_path = config.out / "results.jsonl"
    headers = {"authorization": f"Bearer {config.token}"} if config.token else {}
    summary = Summary()
    jobs = [(task, i) for task in config.tasks for i in range(config.n)]
    progress = _Progress(len(jobs))
    semaphore = asyncio.Semaphore(config.concurrency)
    agent = Agent(agent_backend, max_turns=config.max_turns, max_tokens=config.agent_max_tokens)

    async with httpx.AsyncClient(base_url=config.server, headers=headers, timeout=600) as http:

        async def one(index: int, task: Task, attempt: int) -> None:
            async with semaphore:
                result = await _run_with_retries(http, config, agent, user_backend, task, attempt, index)
            summary.results.append(result)
            with results_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(asdict(result)) + "\n")
            progress.update(result)
            if on_result:
                on_result(result)

        try:
            await asyncio.gather(*(one(i, task, attempt) for i, (task, attempt) in enumerate(jobs)))
        except asyncio.CancelledError:
            summary.interrupted = True
        finally:
            progress.close()
            (config.out / "summary.json").write_text(
                json.dumps(
                    {
                        "world": config.world.name,
                        "runs": len(summary.results),
                        "planned": len(jobs),
                        "interrupted": summary.interrupted,
                        "judged": sum(r.status == "judged" for r in summary.results),
                        "infra_failed": sum(r.status == "infra_failed" for r in summary.results),
                        "agent_failed": sum(r.status == "agent_failed" for r in summary.results),
                        "mean_reward": _mean([r.reward for r in summary.results if r.reward is not None]),
                    },
                    indent=1,
                )
            )
    return summary


def _mean(values: list[int]) -> float | None:
    return sum(values) / len(values) if values else None


async def _run_with_retries(
    http: httpx.AsyncClient,
    config: RolloutConfig,
    agent: Agent,
    user_backend: Backend | None,
    task: Task,
    attempt: int,
    index: int,
) -> RunResult:
    start = time.monotonic()
    last = RunResult(task=task.id, attempt=attempt, episode_id="", status="infra_failed")
    for retry in range(config.retries + 1):
        body: dict[str, Any] = {"world": config.world.name, "task": task.id}
        if config.seed is not None:
            body["seed"] = config.seed + index * 1000 + retry
        try:
            created = await http.post("/v1/episodes", json=body)
        except httpx.TransportError as exc:
            last.error = f"server unreachable: {exc}"
            continue
        if created.status_code != 201:
            last.error = f"creating the episode failed: HTTP {created.status_code} {created.text[:200]}"
            if created.status_code < 500:
                break
            continue
        episode = created.json()
        user = (
            UserSimulator(
                user_backend, instruction=task.instruction, hidden=task.user_hidden, max_tokens=config.user_max_tokens
            )
            if user_backend is not None and task.user_hidden
            else None
        )
        try:
            run = await agent.run(
                episode["mcp_url"],
                instruction=task.instruction,
                policy=config.world.policy,
                user=user,
                http_client=http if config.token else None,
            )
        except BackendError as exc:
            last = RunResult(
                task.id, attempt, episode["id"], "infra_failed", error=f"model backend: {exc}", infra_retries=retry
            )
            continue
        except Exception as exc:  # MCP transport errors and the like: infrastructure
            last = RunResult(
                task.id,
                attempt,
                episode["id"],
                "infra_failed",
                error=f"{type(exc).__name__}: {exc}",
                infra_retries=retry,
            )
            continue
        status = "judged"
        if run.stop == "infra_error":
            last = RunResult(
                task.id,
                attempt,
                episode["id"],
                "infra_failed",
                error=run.infra_error,
                infra_retries=retry,
                transcript=run.transcript,
                stop=run.stop,
                turns=run.turns,
                tool_calls=run.tool_calls,
                tokens=run.usage.total_tokens,
            )
            if retry < config.retries:
                continue
            status = "infra_failed"  # out of retries: end it anyway, so the partial trajectory is kept and judged
        ended = await http.post(f"/v1/episodes/{episode['id']}/end", json={"transcript": run.transcript})
        verdict = ended.json().get("verdict") or {} if ended.status_code == 200 else {}
        error = run.infra_error if status == "infra_failed" else ""
        if ended.status_code != 200:
            error = f"/end failed: HTTP {ended.status_code}"
        return RunResult(
            task=task.id,
            attempt=attempt,
            episode_id=episode["id"],
            status=status,
            reward=verdict.get("reward") if status == "judged" else None,
            verdict_status=verdict.get("status"),
            stop=run.stop,
            turns=run.turns,
            tool_calls=run.tool_calls,
            tokens=run.usage.total_tokens,
            infra_retries=retry,
            seconds=time.monotonic() - start,
            transcript=run.transcript,
            error=error,
        )
    last.seconds = time.monotonic() - start
    return last


@contextlib.asynccontextmanager
async def in_process_server(
    worlds: dict[str, World],
    sim_backend: Backend,
    db: Path,
    judge_backend: Backend | None,
    *,
    sim_max_tokens: int = 1024,
) -> AsyncIterator[str]:
    """Serve `worlds` on a free 127.0.0.1 port in this process; yields the base URL."""
    from simia.server.app import build_app
    from simia.server.episodes import judge_callable
    from simia.server.settings import ServerSettings
    from simia.server.inprocess import free_port, serving
    from simia.sim.judge import Judge
    from simia.sim.simulator import Simulator
    from simia.sim.store import open_store

    store = open_store(db)
    port = free_port()
    simulator = Simulator(sim_backend, cache=store, max_tokens=sim_max_tokens)
    app = build_app(
        worlds,
        simulator,
        store,
        ServerSettings(port=port),
        judge=judge_callable(Judge(judge_backend, max_tokens=min(1024, sim_max_tokens))),
    )
    try:
        async with serving(app, port):
            yield f"http://127.0.0.1:{port}"
    finally:
        await store.close()
