"""Fault injection: an episode's perturbation draws a fault for some of its calls; a pre-call fault answers in the
simulator's place, a post-call fault alters the simulator's answer (a success, or an error it can stand in for).
`simia.sim.engine` draws and shapes the faults (its `faults` module says what each kind does on an error answer);
this module turns them into the events the episode commits."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from pydantic_core import to_json
from simia.sim.engine import Fault, applicable, choose_fault, injected_error, perturb_output
from simia.sim.perturbation import Perturbation
from simia.sim.records import EpisodeRecord, EventRecord
from simia.sim.schema import validate_instance
from simia.sim.world import World

from .admission import fits

__all__ = ["draw_fault", "injected", "perturbed"]


def draw_fault(
    episode: EpisodeRecord, world: World, tool: str, arguments: dict[str, Any], *, max_argument_bytes: int
) -> Fault | None:
    """The fault injected into the episode's next call, if its perturbation draws one. A call the simulator
    would refuse (unknown tool, arguments too large or breaking the input schema) gets no fault: the
    agent's own mistake is reported as such."""
    if episode.perturbation is None:  # the common case: nothing more to look at on a call's path
        return None
    spec = world.tool(tool)
    if spec is None or not fits(spec.input_schema, arguments, max_argument_bytes):
        return None
    perturbation = Perturbation.model_validate(episode.perturbation)
    key = str(episode.seed) if episode.seed is not None else episode.id
    return choose_fault(perturbation, key, episode.seq + 1)


def injected(world: World, tool: str, arguments: dict[str, Any], fault: Fault, key: str | None) -> EventRecord:
    """The event of a call a pre-call fault stopped (a kind that does not apply falls back to `rate_limit`)."""
    spec = world.tool(tool)
    assert spec is not None  # draw_fault draws faults for known tools only
    kind = fault.kind if applicable(fault.kind, spec) else "rate_limit"
    code, message = injected_error(kind, spec, fault.pick)
    return EventRecord(
        tool=tool,
        arguments=arguments,
        output=None,
        text=f"Error ({code}): {message}",
        is_error=True,
        error_code=code,
        error_kind="agent",
        request_key=key,
        injected=kind,
    )


def perturbed(
    world: World,
    event: EventRecord,
    new_state: dict[str, Any] | None,
    fault: Fault,
    recent: Iterable[EventRecord],
    key: str | None,
) -> tuple[EventRecord, dict[str, Any] | None]:
    """The simulator's event after a post-call fault. A fault that does not apply (an error answer it cannot
    stand in for, or a result that would break the tool's output schema) becomes a `rate_limit` instead, and
    the call's state change is dropped; a simulation that failed (an infra error) stays as it is, unperturbed."""
    if event.is_error and event.error_kind == "infra":
        return event, new_state
    spec = world.tool(event.tool)
    assert spec is not None
    earlier = [(e.tool, e.arguments, e.output) for e in recent if not e.is_error and e.injected is None]
    output = perturb_output(fault.kind, spec, event.arguments, event.output, earlier)
    if output is None or (spec.output_schema and validate_instance(spec.output_schema, output)):
        return injected(world, event.tool, event.arguments, Fault("rate_limit"), key), None
    text = to_json(output).decode()
    event = replace(
        event, output=output, text=text, is_error=False, error_code=None, error_kind=None, injected=fault.kind
    )
    return event, new_state
