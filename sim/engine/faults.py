"""Perturbation: realistic faults injected into an episode's tool results at a set rate (stress testing).

Which calls get a fault, and which fault, is drawn from the episode's seed (or id) and the
call's sequence number, so a run replays exactly. Kinds:

    rate_limit        the call is refused with `rate_limited`; nothing happens (no model call)
    timeout           the call times out with `timeout`; nothing happens (no model call)
    documented_error  one of the tool's documented errors, picked by the same draw; nothing happens
                      (no model call)
    partial           a successful result comes back with its lists cut to half (the state change stands)
    stale_read        a read-only call answers what the same call answered earlier, before the last write
                      (also when the simulator's answer now is an error: the stale answer hides it)

A kind that does not apply to a call falls back to `rate_limit`, so the rate holds: no documented
errors, no list in the output, no earlier different answer to repeat, and for the two kinds applied
after the simulator answers (`partial`, `stale_read`), an error answer they cannot alter (the
answer, and any state change, are dropped). The one exception is a call whose simulation failed
(an infra error, not the world's behaviour): it stays that failure, with no fault. An injected
fault is the environment's behaviour, not an infrastructure failure: it enters the simulator's
window and the agent is expected to handle it; its event carries `injected` (the kind).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..perturbation import FaultKind, Perturbation
from ..world import ToolSpec

__all__ = [
    "Fault",
    "applicable",
    "choose_fault",
    "injected_error",
    "perturb_output",
]


@dataclass(frozen=True)
class Fault:
    """The fault drawn for one call: its kind, and a number from the same draw that picks which of the tool's
    documented errors a `documented_error` is."""

    kind: FaultKind
    pick: int = 0


def choose_fault(perturbation: Perturbation, episode_key: str, seq: int) -> Fault | None:
    """The fault of call `seq` of the episode keyed `episode_key` (its seed, else its id), or None."""
    digest = hashlib.blake2b(f"{episode_key}:{seq}".encode(), digest_size=8).digest()
    draw = random.Random(int.from_bytes(digest, "big"))
    if draw.random() >= perturbation.rate:
        return None
    kind = draw.choice(perturbation.kinds)
    return Fault(kind, draw.getrandbits(32))


def injected_error(kind: str, tool: ToolSpec, pick: int = 0) -> tuple[str, str]:
    """(error code, message for the agent) of a pre-call fault; `documented_error` is the tool's documented
    error number `pick` (modulo how many it has)."""
    if kind == "timeout":
        return "timeout", "The request timed out before the service answered. Nothing was changed; try again."
    if kind == "documented_error" and tool.errors:
        error = tool.errors[pick % len(tool.errors)]
        return error.code, f"{error.when[0].upper()}{error.when[1:]}."
    return "rate_limited", "Too many requests: the service is rate limited. Wait a moment and try again."


def applicable(kind: str, tool: ToolSpec) -> bool:
    """Whether a pre-call fault can happen to `tool` as drawn (else it falls back to `rate_limit`)."""
    return kind != "documented_error" or bool(tool.errors)


def perturb_output(
    kind: str, tool: ToolSpec, arguments: dict[str, Any], output: dict[str, Any] | None, earlier: Sequence[Any]
) -> dict[str, Any] | None:
    """A post-call fault applied to the simulator's answer (`output`: None for an error answer); None when it
    does not apply (the caller then falls back to `rate_limit`). `earlier` holds the episode's recent
    (tool, arguments, output) successful answers that were not themselves faults."""
    if kind == "partial" and output is not None:
        cut = _halve_lists(output)
        return cut if cut != output else None
    if kind == "stale_read" and tool.annotations and tool.annotations.get("readOnlyHint") is True:
        for past_tool, past_arguments, past_output in reversed(earlier):
            if past_tool == tool.name and past_arguments == arguments and past_output != output:
                return dict(past_output)
    return None


def _halve_lists(value: Any) -> Any:
    if isinstance(value, list):
        return [_halve_lists(v) for v in value[: len(value) // 2]] if len(value) > 1 else value
    if isinstance(value, dict):
        return {k: _halve_lists(v) for k, v in value.items()}
    return value
