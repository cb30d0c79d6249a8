"""The two fidelity runs: a calls file (`run_fidelity`), or the built-in agent on one of the world's tasks
(`run_agent_fidelity`), played on the real server, then replayed on a fresh simulation and compared. A run
that could write on the real server (a call, or for the agent a tool, not annotated `readOnlyHint`) is
refused before anything runs unless `allow_writes`: a fidelity run must not change real data by surprise."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import Client
from simia.sim.backends import Backend
from simia.sim.engine import ToolCall
from simia.sim.schema import validate_instance
from simia.sim.world import Task, World, apply_patch

from ..agent import Agent, EpisodeRun
from ..user import UserSimulator
from .consistency_checks import read_only
from .real import RecordingClient, on_real_server, until_failure, where
from .report import AgentSummary, FidelityReport
from .simulation import simulate

__all__ = ["call_problem", "load_calls", "run_agent_fidelity", "run_fidelity"]


def load_calls(path: str | Path, world: World) -> list[ToolCall]:
    """The calls of a JSONL file (`{"tool", "arguments"}` a line), each checked against the world's tools;
    ValueError names every bad line before anything runs."""
    calls: list[ToolCall] = []
    problems: list[str] = []
    file = Path(path)
    if not file.is_file():
        raise ValueError(
            f'no calls file at {str(path)!r}; pass --calls FILE.jsonl (one {{"tool", "arguments"}} a line)'
        )
    for n, line in enumerate(file.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            tool, arguments = str(row["tool"]), row.get("arguments", {})
        except (json.JSONDecodeError, KeyError, TypeError):
            problems.append(f'{path}:{n}: expected a JSON object with "tool" and "arguments"')
            continue
        problem = call_problem(world, tool, arguments)
        if problem:
            problems.append(f"{path}:{n}: {problem}")
        else:
            calls.append(ToolCall(tool, arguments))
    if problems:
        raise ValueError(" | ".join(problems[:10]))
    if not calls:
        raise ValueError(f"{path} holds no calls")
    return calls


def call_problem(world: World, tool: str, arguments: Any) -> str:
    """Why a call of `tool` with `arguments` cannot be played on `world` ("" when it can)."""
    spec = world.tool(tool)
    if spec is None:
        return f"unknown tool {tool!r} ({world.name!r} has {', '.join(t.name for t in world.tools)})"
    if not isinstance(arguments, dict):
        return f"{tool} arguments must be a JSON object"
    bad = validate_instance(spec.input_schema, arguments)
    return f"{tool} arguments break its inputSchema: {bad[0]}" if bad else ""


async def run_fidelity(
    world: World,
    real: str | Sequence[str],
    calls: Sequence[ToolCall],
    backend: Backend,
    *,
    headers: dict[str, str] | None = None,
    allow_drift: bool = False,
    allow_writes: bool = False,
    grader: Backend | None = None,
) -> FidelityReport:
    """Run `calls` on the real server (a URL or a stdio command) and on a fresh simulation of `world`;
    with `grader`, a model grades each simulated step (`simia.sim.judging.step_grade`).

    A real server that dies after answering some calls gives the report of those, with `stopped` saying
    what happened.

    Raises:
        ValueError: `calls` hold writes (unless `allow_writes`), or the world's tools differ from the real
            server's (unless `allow_drift`).
        Exception: the real server could not be reached, or failed before answering anything.
    """
    if not allow_writes:
        _refuse_writes(world, (call.tool for call in calls), "the calls include")
    answers: list[types.CallToolResult] = []

    async def play(client: Client) -> None:
        for call in calls:
            answers.append(await client.call_tool(call.tool, call.arguments))

    stopped = await until_failure(on_real_server(world, real, headers, allow_drift, play, Client), answers)
    report = await simulate(world, where(real), calls[: len(answers)], answers, backend, grader)
    report.stopped = stopped and f"{stopped} after {len(answers)} of {len(calls)} calls"
    return report


async def run_agent_fidelity(
    world: World,
    real: str | Sequence[str],
    agent: Agent,
    task: Task,
    backend: Backend,
    *,
    user: UserSimulator | None = None,
    headers: dict[str, str] | None = None,
    allow_drift: bool = False,
    allow_writes: bool = False,
    seed: int | None = None,
    grader: Backend | None = None,
) -> FidelityReport:
    """Run `agent` on `task` against the real server, record its calls with the real answers, then replay
    those calls on a fresh simulation of `world` (from the task's starting state) and compare (and grade,
    with `grader`).

    Raises:
        ValueError: the world has writes the agent may call (unless `allow_writes`), or its tools differ from
            the real server's (unless `allow_drift`).
        Exception: the real server could not be reached or died (its error, for the caller to report).
    """
    if not allow_writes:
        _refuse_writes(world, (tool.name for tool in world.tools), "the agent may call")

    recorded: list[tuple[ToolCall, types.CallToolResult]] = []
    runs: list[EpisodeRun] = []

    async def play(client: Client) -> None:
        assert isinstance(client, RecordingClient)  # on_real_server made it one
        client.recorded = recorded
        runs.append(await agent.run(client, instruction=task.instruction, policy=world.policy, user=user, seed=seed))

    stopped = await until_failure(on_real_server(world, real, headers, allow_drift, play, RecordingClient), recorded)
    start = apply_patch(world.initial_state, task.initial_state_patch, world.state_schema)
    calls, answers = [call for call, _ in recorded], [answer for _, answer in recorded]
    report = await simulate(world, where(real), calls, answers, backend, grader, start)
    run = runs[0] if runs else EpisodeRun(transcript=[], stop="real_server_failed")
    report.agent = AgentSummary(task.id, run.stop, run.turns, len(calls), run.agent_error or run.infra_error)
    report.stopped = stopped and f"{stopped} after {len(calls)} calls"
    return report


def _refuse_writes(world: World, tools: Iterable[str], what: str) -> None:
    """ValueError naming the tools among `tools` that are not annotated read-only (each once, in order)."""
    writes = [name for name in dict.fromkeys(tools) if not read_only(world, name)]
    if writes:
        raise ValueError(
            f"{what} writes ({', '.join(writes)}: not annotated readOnlyHint), which would change the real"
            " server's data: pass --allow-writes to run them there, or leave them out"
        )
