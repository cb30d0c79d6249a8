"""Batch rollouts: many judged episodes of a world's tasks, with concurrency, progress and retries.

For each (task, attempt): create an episode through the HTTP API, run the agent (and
the user simulator for multi-turn tasks), post the transcript to `/end`, and record
the verdict as one JSONL line. An infrastructure failure (backend down, timeout,
budget) is retried with a fresh episode and counted apart from agent failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import mcp_types as types
from mcp import Client
from simia.sim.backends import Backend, Usage
from simia.sim.verdict import Outcome, Verdict, outcome, tally
from simia.sim.wire import TaskInfo, WorldInfo

from .agent import Agent, EpisodeRun
from .api import ServerUnreachable, SimiaApiError, SimiaClient
from .user import UserSimulator

__all__ = ["RolloutConfig", "RunResult", "RunStatus", "Summary", "TaskStats", "rollout", "select_tasks"]


@dataclass
class RolloutConfig:
    """One `simia rollout`.

    Attributes:
        server: base URL of a running `simia serve`.
        world: the world as the server describes it (`SimiaClient.world(name)`): tools, policy, tasks.
        tasks: the tasks to run.
        n: episodes per task.
        concurrency: episodes in flight at once.
        max_turns: agent model calls per episode.
        out: folder for results.jsonl and summary.json.
        retries: fresh-episode retries after an infrastructure failure.
        token: bearer token for the server, if it needs one.
        seed: base seed (episode seeds are seed + run index) for reproducible simulations.
        attempts: episodes per task id, where a plan decides them (`simia.clients.curriculum`); a task it
            does not name runs none. None: `n` for every task.
        personas: the personas the user simulator plays, one drawn per (task, attempt), seeded by `seed` so a run
            replays (`simia.sim.world.personas`); None: each task's own (cooperative where it names none). A task
            with a persona runs the user simulator even without `user_hidden`.
    """

    server: str
    world: WorldInfo
    tasks: list[TaskInfo]
    n: int = 1
    concurrency: int = 4
    max_turns: int = 10
    out: Path = Path("rollouts")
    retries: int = 2
    token: str | None = None
    seed: int | None = None
    agent_max_tokens: int = 512
    user_max_tokens: int = 256
    attempts: dict[str, int] | None = None
    personas: list[str] | None = None

    def persona(self, task: TaskInfo, attempt: int) -> str | None:
        """The persona the user simulator plays in `task`'s `attempt` (the same on every retry of it)."""
        if not self.personas:
            return task.persona
        return random.Random(f"{self.seed or 0}:{task.id}:{attempt}").choice(self.personas)


RunStatus = Literal["judged", "infra_failed", "agent_failed"]
"""judged: the episode ran and was judged. infra_failed: the environment failed (server unreachable, simulator
backend down, timeout, budget) on every try. agent_failed: the agent's or user's own model failed, or the agent
produced nothing usable (no tool call and no message)."""


_MASKED_RUN: dict[RunStatus, str] = {
    "infra_failed": "infrastructure failure",
    "agent_failed": "agent failure",
    "judged": "not judged",
}
"""Why a run without a usable verdict is masked, in `Verdict.mask_reason`'s words."""
_INFRA_FAILED = Outcome("masked", _MASKED_RUN["infra_failed"])


@dataclass
class RunResult:
    """One (task, attempt): its last episode, how it ended and its verdict's reward."""

    task: str
    attempt: int
    episode_id: str
    status: RunStatus
    persona: str | None = None
    """The persona the user simulator played (None: no user simulator ran)."""
    reward: int | None = None
    training_reward: float | None = None
    verdict_status: str | None = None
    stop: str = ""
    turns: int = 0
    tool_calls: int = 0
    tokens: int = 0
    usage: dict[str, Any] = field(default_factory=dict)
    """What the agent's and the user simulator's model calls cost (`Usage.as_dict`; the simulator's own calls
    are the server's: its /metrics and the viewer show them)."""
    infra_retries: int = 0
    error: str = ""
    seconds: float = 0.0
    transcript: list[dict[str, Any]] = field(default_factory=list)
    outcome: Outcome = _INFRA_FAILED
    """What the run is as training data (`simia.sim.verdict.outcome`): masked unless it was judged."""


@dataclass
class TaskStats:
    """What a task's usable rewards (judged, not masked) say, over its attempts in attempt order.

    Attributes:
        task: the task id.
        n: attempts with a usable reward.
        mean: mean reward.
        ci95: Wilson 95% interval of the success rate (rewards are 0/1).
        pass_k: pass^k for k = 1..n (tau-bench: the chance that k attempts drawn from these all succeed,
            C(successes, k) / C(n, k)).
        flips: the share of consecutive attempts whose verdicts differ (identical runs of a reliable agent
            and judge flip 0).
    """

    task: str
    n: int
    mean: float | None
    ci95: tuple[float, float] | None
    pass_k: list[float]
    flips: float | None

    @classmethod
    def of(cls, task: str, results: list[RunResult]) -> TaskStats:
        rewards = [r.training_reward for r in sorted(results, key=lambda r: r.attempt) if r.training_reward is not None]
        n, wins = len(rewards), sum(1 for r in rewards if r >= 1)
        pass_k = [math.comb(wins, k) / math.comb(n, k) for k in range(1, n + 1)]
        flips = sum(a != b for a, b in itertools.pairwise(rewards)) / (n - 1) if n > 1 else None
        return cls(task, n, sum(rewards) / n if n else None, _wilson(wins, n), pass_k, flips)

    def line(self) -> str:
        if not self.n or self.mean is None or self.ci95 is None:
            return f"{self.task}  no usable rewards"
        passes = " ".join(f"{p:.2f}" for p in self.pass_k)
        flips = f"{self.flips:.2f}" if self.flips is not None else "-"
        low, high = self.ci95
        mean = f"mean {self.mean:.2f} [{low:.2f}, {high:.2f}]"
        return f"{self.task}  n={self.n}  {mean}  pass^1..{self.n} {passes}  flips {flips}"


def _wilson(wins: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The Wilson score interval of a success rate (sound at 0, 1 and small n, unlike mean +- 2 SE)."""
    if not n:
        return None
    p = wins / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, center - half), min(1.0, center + half))


@dataclass
class Summary:
    """All results of a rollout; `succeeded` is false when no episode was judged."""

    results: list[RunResult] = field(default_factory=list)
    interrupted: bool = False

    @property
    def succeeded(self) -> bool:
        return any(r.status == "judged" for r in self.results)

    def counts(self) -> dict[str, Any]:
        return {
            "runs": len(self.results),
            "judged": sum(r.status == "judged" for r in self.results),
            "infra_failed": sum(r.status == "infra_failed" for r in self.results),
            "agent_failed": sum(r.status == "agent_failed" for r in self.results),
            "mean_reward": _mean([r.training_reward for r in self.results if r.training_reward is not None]),
            "tasks": [asdict(stats) for stats in self.task_stats()],
            "agent_usage": self.usage().as_dict(),
        }

    def task_stats(self) -> list[TaskStats]:
        return [
            TaskStats.of(task, [r for r in self.results if r.task == task])
            for task in sorted({r.task for r in self.results})
        ]

    def table(self) -> str:
        rows = [("TASK", "RUNS", "JUDGED", "INFRA", "AGENT-FAIL", "MEAN REWARD")]
        for task in sorted({r.task for r in self.results}):
            mine = [r for r in self.results if r.task == task]
            rewards = [r.training_reward for r in mine if r.training_reward is not None]
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
        table = "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
        repeated = [s for s in self.task_stats() if s.n > 1]
        if repeated:  # several attempts per task: how reliable the agent is, and how stable the verdicts
            table += "\n\n" + "\n".join(s.line() for s in repeated)
        return table

    def usage(self) -> Usage:
        """What the agent and user models cost over all runs."""
        return sum((Usage.from_dict(r.usage) for r in self.results), Usage())

    def cost_line(self) -> str:
        """What the agent and user models cost, in all and per episode."""
        usage = self.usage()
        per = (
            f"; ${usage.cost_usd / len(self.results):.4f} per episode"
            if usage.cost_usd is not None and self.results
            else ""
        )
        return f"agent and user models: {usage.describe()}{per}"


def select_tasks(world: WorldInfo, spec: str) -> list[TaskInfo]:
    """`all`, one task id, or a file of task ids (one a line, or JSONL objects with "id")."""
    if spec == "all":
        return list(world.tasks)
    task = world.task(spec)
    if task is not None:
        return [task]
    path = Path(spec)
    if path.is_file():
        ids = []
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            line = line.strip()
            if not line:
                continue
            try:
                ids.append(str(json.loads(line)["id"]) if line.startswith("{") else line)
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError(f'{path}:{n}: expected a task id or a JSON object with "id"') from None
        missing = [i for i in ids if world.task(i) is None]
        if missing:
            raise ValueError(f"unknown task id(s) in {path}: {', '.join(missing)}")
        if not ids:
            raise ValueError(f"{path} lists no task ids")
        return [t for i in ids if (t := world.task(i)) is not None]
    known = ", ".join(t.id for t in world.tasks) or "(none)"
    raise ValueError(f"--tasks {spec!r} is neither 'all', a task id of {world.name!r} ({known}), nor a file")


class _Progress:
    def __init__(self, total: int) -> None:
        self.total = total
        self.done = self.tokens = 0
        self.outcomes: list[Outcome] = []
        self.rewards: list[float] = []
        self.tty = sys.stderr.isatty()
        self.start = time.monotonic()

    def update(self, result: RunResult) -> None:
        self.done += 1
        self.outcomes.append(result.outcome)
        self.tokens += result.tokens
        if result.training_reward is not None:
            self.rewards.append(result.training_reward)
        mean = f"{sum(self.rewards) / len(self.rewards):.2f}" if self.rewards else "-"
        line = (
            f"[{self.done}/{self.total}] {tally(self.outcomes)}  mean reward {mean}  tokens {self.tokens}  "
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
    summary = Summary()
    counts = config.attempts if config.attempts is not None else {task.id: config.n for task in config.tasks}
    jobs = [(task, i) for task in config.tasks for i in range(counts.get(task.id, 0))]
    progress = _Progress(len(jobs))
    semaphore = asyncio.Semaphore(config.concurrency)
    agent = Agent(agent_backend, max_turns=config.max_turns, max_tokens=config.agent_max_tokens)

    async with SimiaClient(config.server, token=config.token) as api:

        async def one(index: int, task: TaskInfo, attempt: int) -> None:
            async with semaphore:
                result = await _run_with_retries(api, config, agent, user_backend, task, attempt, index)
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
            written = {"world": config.world.name, "planned": len(jobs), "interrupted": summary.interrupted}
            (config.out / "summary.json").write_text(json.dumps({**written, **summary.counts()}, indent=1))
    return summary


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


async def _run_with_retries(
    api: SimiaClient,
    config: RolloutConfig,
    agent: Agent,
    user_backend: Backend | None,
    task: TaskInfo,
    attempt: int,
    index: int,
) -> RunResult:
    start = time.monotonic()
    last = RunResult(task=task.id, attempt=attempt, episode_id="", status="infra_failed")
    for retry in range(config.retries + 1):
        seed = None if config.seed is None else config.seed + index * 1000 + retry
        try:
            episode = await api.create(config.world.name, task=task.id, seed=seed)
        except ServerUnreachable as exc:
            last.error = str(exc)
            continue
        except SimiaApiError as exc:
            last.error = f"creating the episode failed: {exc}"
            if exc.status < 500:
                break
            continue
        persona = config.persona(task, attempt)
        user = (
            UserSimulator(
                user_backend,
                instruction=task.instruction,
                hidden=task.user_hidden,
                max_tokens=config.user_max_tokens,
                seed=seed,
                persona=persona,
                reference_turns=task.user_turns,
            )
            if user_backend is not None and (task.user_hidden or persona or task.user_turns)
            else None
        )
        try:
            async with contextlib.AsyncExitStack() as stack:
                session = await stack.enter_async_context(api.mcp(episode))
                if user is not None and episode.user_mcp_url:  # a dual-control world: the user's own tools
                    await _give_user_tools(user, await stack.enter_async_context(api.mcp(episode.user_mcp_url)))
                run = await agent.run(
                    session, instruction=task.instruction, policy=config.world.policy, user=user, seed=seed
                )
        except Exception as exc:  # MCP transport errors and the like: the environment failed
            last = RunResult(
                task.id, attempt, episode.id, "infra_failed", error=f"{type(exc).__name__}: {exc}", infra_retries=retry
            )
            continue
        status: RunStatus = "judged"
        error = ""
        if run.stop == "infra_error":
            status, error = "infra_failed", run.infra_error
            if retry < config.retries:
                last = _result(task, attempt, episode.id, status, run, retry, error, None)
                await _end_quietly(api, episode.id, run.transcript)  # keep the partial trajectory
                continue
        elif run.stop == "agent_error":
            status, error = "agent_failed", run.agent_error
        verdict: Verdict | None = None
        if user is not None:  # the judge reads which persona the user played (the agent never saw the marks)
            run.transcript = user.mark(run.transcript)
        try:
            verdict = (await api.end(episode.id, transcript=run.transcript)).verdict
        except (SimiaApiError, ServerUnreachable) as exc:
            status, error = "infra_failed", f"/end failed: {exc}"
        result = _result(task, attempt, episode.id, status, run, retry, error, verdict)
        result.seconds, result.persona = time.monotonic() - start, user.persona.name if user else None
        return result
    last.seconds = time.monotonic() - start
    return last


def _result(
    task: TaskInfo,
    attempt: int,
    episode_id: str,
    status: RunStatus,
    run: EpisodeRun,
    retry: int,
    error: str,
    verdict: Verdict | None,
) -> RunResult:
    judged = status == "judged" and verdict is not None
    return RunResult(
        task=task.id,
        attempt=attempt,
        episode_id=episode_id,
        status=status,
        reward=verdict.reward if judged and verdict else None,
        training_reward=verdict.training_reward() if judged and verdict else None,
        verdict_status=verdict.status if verdict else None,
        stop=run.stop,
        turns=run.turns,
        tool_calls=run.tool_calls,
        tokens=run.usage.total_tokens,
        usage=run.usage.as_dict(),
        infra_retries=retry,
        error=error,
        transcript=run.transcript,
        outcome=outcome(verdict if judged else None, unjudged=_MASKED_RUN[status]),
    )


async def _give_user_tools(user: UserSimulator, session: Client) -> None:
    """Let the user simulator call the user's own tools over the episode's user MCP session."""

    async def call(name: str, arguments: dict[str, Any]) -> str:
        result = await session.call_tool(name, arguments)
        return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))

    user.use_tools((await session.list_tools()).tools, call)


async def _end_quietly(api: SimiaClient, episode_id: str, transcript: list[dict[str, Any]]) -> None:
    """End an episode about to be retried, so its partial trajectory is kept; a failure here changes nothing."""
    with contextlib.suppress(SimiaApiError, ServerUnreachable):
        await api.end(episode_id, transcript=transcript)
