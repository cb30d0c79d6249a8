"""The simulated side of a fidelity run: a call sequence replayed on a fresh simulated episode of the world
(the simulator in process, state carried from call to call), each step compared with the real answer and
scored beside the null and constant simulators, and the sequence's consistency pairs checked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mcp_types as types
from simia.sim.backends import Backend
from simia.sim.engine import Simulator, Step, ToolCall
from simia.sim.records import PastCall
from simia.sim.world import World

from .baselines import baselines
from .compare import compare, real_answer
from .consistency_checks import pairs
from .grading import grade
from .report import FidelityReport

__all__ = ["replay", "simulate"]


async def replay(
    world: World, calls: Sequence[ToolCall], backend: Backend, start: dict[str, Any] | None = None
) -> list[tuple[Step, list[PastCall]]]:
    """Run `calls` on a fresh simulated episode of `world` (from `start`, or the world's state; call i with
    seed i): each step with the window the simulator saw. Infrastructure failures change nothing and never
    enter the window, as in a served episode."""
    simulator = Simulator(backend)
    state = world.initial_state if start is None else start
    window: list[PastCall] = []
    out: list[tuple[Step, list[PastCall]]] = []
    for i, call in enumerate(calls):
        seen = window[-world.simulator.window :] if world.simulator.window else []
        step = await simulator.step(world, state, seen, call, seed=i)
        out.append((step, seen))
        if step.error_kind != "infra":
            state = step.state
            window.append(
                PastCall(call.tool, call.arguments, step.text if step.is_error else step.output, step.is_error)
            )
    return out


async def simulate(
    world: World,
    where: str,
    calls: Sequence[ToolCall],
    answers: Sequence[types.CallToolResult],
    backend: Backend,
    grader: Backend | None,
    start: dict[str, Any] | None = None,
) -> FidelityReport:
    """Replay `calls` on a fresh simulated episode (from `start`, or the world's state) and compare each
    simulated step with the real answer (and have `grader` grade it, given the simulator's window)."""
    report = FidelityReport(world=world.name, real=where)
    replayed = await replay(world, calls, backend, start)
    real = [real_answer(answer, world.tool(call.tool), world) for call, answer in zip(calls, answers, strict=True)]
    null, report.constant_code, constant = baselines(world, calls, real)
    for i, (call, answer, (step, seen)) in enumerate(zip(calls, real, replayed, strict=True)):
        compared = compare(i, call, world.tool(call.tool), answer, step)
        compared.null, compared.constant = null[i], constant[i]
        if grader is not None:
            await grade(grader, compared, world.tool(call.tool), seen, seed=i)
        report.calls.append(compared)
    report.pairs = pairs(world, calls, [step for step, _ in replayed], real)
    return report
