"""The two simulators every agreement figure is read against, scored by `compare` on the same calls and real
answers: the null simulator (fails every call as infra: the floor, 0 by the scoring rule) and the constant
simulator (answers every call with one documented error code: the code of the called tools that scores best on
this sequence, so it is the strongest such simulator). A figure near the constant one is chance."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from simia.sim.engine import Step, ToolCall
from simia.sim.world import World

from .compare import Answer, compare

__all__ = ["baselines"]


def baselines(
    world: World, calls: Sequence[ToolCall], real: Sequence[Answer]
) -> tuple[list[float], str | None, list[float]]:
    """(null agreement per call, the constant simulator's code, its agreement per call); no calls: no code."""

    def scores(simulator: Callable[[ToolCall], Step]) -> list[float]:
        return [
            compare(i, call, world.tool(call.tool), answer, simulator(call)).agreement
            for i, (call, answer) in enumerate(zip(calls, real, strict=True))
        ]

    constant = {code: scores(_constant(code)) for code in _codes(world, calls)}
    best = max(constant, key=lambda code: sum(constant[code]), default=None)  # the first of the best
    return scores(_null), best, constant[best] if best else [0.0] * len(calls)


def _null(call: ToolCall) -> Step:
    return Step(call.tool, call.arguments, None, "the simulator failed", True, {}, error_code="invalid_simulation",
                error_kind="infra")  # fmt: skip


def _constant(code: str) -> Callable[[ToolCall], Step]:
    def answer(call: ToolCall) -> Step:
        return Step(call.tool, call.arguments, None, code, True, {}, error_code=code, error_kind="agent")

    return answer


def _codes(world: World, calls: Sequence[ToolCall]) -> list[str]:
    """The error codes the called tools document (then the world's shared ones), each once, in world order."""
    codes: dict[str, None] = {}
    for call in calls:
        tool = world.tool(call.tool)
        for error in world.error_codes(tool) if tool else world.shared_errors:
            codes.setdefault(error.code)
    return list(codes)
