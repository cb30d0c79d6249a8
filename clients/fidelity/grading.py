"""Grading a compared step: a model scores the simulated answer against the real one on the step-grade
dimensions (`simia.sim.judging.step_grade`), given the window of calls the simulator saw."""

from __future__ import annotations

from collections.abc import Sequence

from simia.sim.backends import Backend
from simia.sim.judging import GradeError, grade_step
from simia.sim.records import PastCall
from simia.sim.world import ToolSpec

from .compare import CallComparison

__all__ = ["grade"]


async def grade(
    grader: Backend, compared: CallComparison, tool: ToolSpec | None, seen: Sequence[PastCall], *, seed: int
) -> None:
    """Grade one compared step in place: its grade, or why it has none (a bad grade is data, not a crash)."""
    try:
        graded = await grade_step(
            grader,
            tool,
            compared.arguments,
            seen,
            compared.real,
            compared.simulated,
            real_error=compared.real_error,
            simulated_error=compared.sim_error,
            seed=seed,
        )
    except GradeError as exc:
        compared.grade_error = str(exc)
    else:
        compared.grade = graded.model_dump()
