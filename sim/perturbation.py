"""Perturbation settings: how often, and with which realistic faults, an episode's tool results are perturbed.

A value type shared by worlds (world.yaml `simulator.perturbation`), the HTTP API (episode create) and the
engine, which draws and applies the faults (`simia.sim.engine.faults`, where the kinds are described).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["KINDS", "PRE_CALL", "FaultKind", "Perturbation"]

FaultKind = Literal["rate_limit", "timeout", "documented_error", "partial", "stale_read"]
KINDS: tuple[FaultKind, ...] = ("rate_limit", "timeout", "documented_error", "partial", "stale_read")
PRE_CALL: frozenset[str] = frozenset({"rate_limit", "timeout", "documented_error"})
"""Kinds decided before the simulator runs: the call fails and no model is asked."""


class Perturbation(BaseModel):
    """How often, and with which faults, an episode's calls are perturbed (world.yaml `simulator.perturbation`,
    or `"perturbation"` when an episode is created, which overrides the world's)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    rate: float = Field(ge=0.0, le=1.0, description="Share of calls that get a fault.")
    kinds: list[FaultKind] = Field(default_factory=lambda: list(KINDS), min_length=1)
