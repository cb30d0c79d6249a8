"""Fidelity against the declarations: on a world whose tools are declared exactly, a model as the simulator is
scored with no real server. Each call is answered twice on the same state: exactly, by the world's declarations
(no model: the reference), and by a backend simulating `undeclared(world)` (the same world with every declaration
removed); the episode goes on from the exact answer's state, so each call starts from the same state on both sides.
Beside the answer (`compare`, as against a real server), the state each side left is compared (`state_change`:
the share of changed fields that agree), and the report splits the calls by how many fields the exact call changes
(`change_bucket`). A call of a tool the world does not declare exactly has no exact answer: it is skipped (the state
goes on without it), and the report says so.

A sequence is a calls file or the world's examples (from the world's state), or one task's expected actions (from
the task's starting state: tau2-bench's gold actions, as `simia import tau2` writes them); several sequences are
one report."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from simia.sim.backends import Backend, ScriptedBackend
from simia.sim.engine import Simulator, ToolCall, undeclared
from simia.sim.records import PastCall
from simia.sim.world import World, apply_patch

from .baselines import baselines
from .compare import Answer, compare, simulated_answer, state_change
from .consistency_checks import pairs
from .grading import grade
from .report import FidelityReport
from .run import call_problem

__all__ = ["CallSequence", "exact_tools", "example_sequences", "run_declared_fidelity", "task_sequences"]


@dataclass(frozen=True)
class CallSequence:
    """Calls played in order on one episode, from `start` (None: the world's state)."""

    name: str
    calls: list[ToolCall]
    start: dict[str, Any] | None = None


def exact_tools(world: World) -> list[str]:
    """The tools whose every call the world's declarations answer without a model (a grounding with a read, not
    `mode: guided`), in world order."""
    return [tool.name for tool in world.tools if tool.grounding is not None and tool.grounding.exact]


def example_sequences(world: World) -> list[CallSequence]:
    """The tool calls of each of the world's examples (OpenAI-format trajectories), one sequence per example from
    the world's state.

    Raises:
        ValueError: an example's call names no tool of the world or breaks its inputSchema (every such call named),
            or the examples hold no call.
    """
    out: list[CallSequence] = []
    problems: list[str] = []
    for n, example in enumerate(world.examples, start=1):
        name = example.name or f"example {n}"
        calls: list[ToolCall] = []
        for message in example.messages:
            for call in message.get("tool_calls") or []:
                function = call.get("function") if isinstance(call, dict) else None
                raw = (function.get("arguments") or "{}") if isinstance(function, dict) else None
                try:
                    arguments = json.loads(raw) if isinstance(raw, str) else raw
                except json.JSONDecodeError:
                    arguments = None
                if not isinstance(function, dict) or not isinstance(function.get("name"), str) or arguments is None:
                    problems.append(f"{name}: a tool call without a function name and JSON arguments")
                    continue
                tool = function["name"]
                problem = call_problem(world, tool, arguments)
                if problem:
                    problems.append(f"{name}: {problem}")
                else:
                    calls.append(ToolCall(tool, arguments))
        if calls:
            out.append(CallSequence(name, calls))
    if problems:
        raise ValueError(" | ".join(problems[:10]))
    if not out:
        raise ValueError(f"world {world.name!r} has no example with a tool call; pass --calls FILE.jsonl")
    return out


def task_sequences(world: World) -> list[CallSequence]:
    """The expected actions of each of the world's tasks that has some (tau2-bench's gold actions), one sequence
    per task from its starting state.

    Raises:
        ValueError: an action names no tool of the world or breaks its inputSchema (every such action named), or no
            task has expected actions.
    """
    out: list[CallSequence] = []
    problems: list[str] = []
    for task in world.tasks:
        if not task.expected_actions:
            continue
        calls: list[ToolCall] = []
        for action in task.expected_actions:
            problem = call_problem(world, action.name, action.arguments)
            if problem:
                problems.append(f"task {task.id}: {problem}")
            else:
                calls.append(ToolCall(action.name, dict(action.arguments)))
        start = apply_patch(world.base_state, task.initial_state_patch, world.state_schema)  # shares its base
        out.append(CallSequence(f"task {task.id}", calls, start if task.initial_state_patch else None))
    if problems:
        raise ValueError(" | ".join(problems[:10]))
    if not out:
        raise ValueError(f"no task of world {world.name!r} has expected actions; pass --calls FILE.jsonl")
    return out


async def run_declared_fidelity(
    world: World, sequences: Sequence[CallSequence], backend: Backend, *, grader: Backend | None = None
) -> FidelityReport:
    """Score `backend` simulating `undeclared(world)` against the world's declarations on `sequences` (and have
    `grader` grade each simulated step, given the simulator's window).

    Each call of an exactly declared tool is answered by the declarations and by the simulation on the same state,
    with the same window of earlier calls (their exact answers) and seed (its place in its sequence); the sequence
    goes on from the exact state. A call of another tool is skipped, and so is one whose declaration fails on the
    state (the world's bug, not the simulator's); the report's `skipped` says which and why.
    """
    report = FidelityReport(world=world.name, real="declarations", declared=True)
    exact = Simulator(ScriptedBackend([], model="declarations"))  # no answers: an exact call never asks for one
    simulator = Simulator(backend)
    modelled = undeclared(world)
    declared = set(exact_tools(world))
    not_declared: Counter[str] = Counter()
    truths: list[Answer] = []
    for sequence in sequences:
        state = world.initial_state if sequence.start is None else sequence.start
        window: list[PastCall] = []
        offset = len(report.calls)
        calls, steps = [], []
        for i, call in enumerate(sequence.calls):
            if call.tool not in declared:
                not_declared[call.tool] += 1
                continue
            truth = await exact.step(world, state, [], call, seed=i)
            if truth.error_kind == "infra":
                report.skipped.append(f"{sequence.name}, call {i + 1} ({call.tool}): its declaration failed on the"
                                      f" state: {truth.detail}")  # fmt: skip
                continue
            seen = window[-world.simulator.window :] if world.simulator.window else []
            step = await simulator.step(modelled, state, seen, call, seed=i)
            answer = simulated_answer(truth)
            assert answer is not None  # not infra
            compared = compare(len(report.calls), call, world.tool(call.tool), answer, step)
            change = state_change(state, truth.state, step.state)
            compared.changed, compared.state, compared.state_disagrees = (
                change.changed, change.agreement, change.disagrees,
            )  # fmt: skip
            if grader is not None:
                await grade(grader, compared, world.tool(call.tool), seen, seed=i)
            report.calls.append(compared)
            truths.append(answer)
            calls.append(call)
            steps.append(step)
            state = truth.state
            window.append(PastCall(call.tool, call.arguments, truth.text if truth.is_error else truth.output,
                                   truth.is_error))  # fmt: skip
        shifted = pairs(world, calls, steps, truths[offset:])
        report.pairs += [replace(p, first=p.first + offset, second=p.second + offset) for p in shifted]
    for tool, n in not_declared.items():
        report.skipped.append(f"{tool}: {n} call{'s' * (n != 1)} skipped: the world does not declare it exactly")
    scored = [ToolCall(c.tool, c.arguments) for c in report.calls]
    null, report.constant_code, constant = baselines(world, scored, truths)
    for compared, floor, chance in zip(report.calls, null, constant, strict=True):
        compared.null, compared.constant = floor, chance
    return report
