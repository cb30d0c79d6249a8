"""The two fidelity checks that need no real server: a read-only call repeated with no write between
answers the same (repeated read), and one repeated after a write that changed the state answers
differently (read after write)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from simia.sim.engine import Step, ToolCall
from simia.sim.world import World

__all__ = ["consistency"]


def consistency(
    world: World, calls: Sequence[ToolCall], steps: Sequence[Step]
) -> tuple[tuple[int, int], tuple[int, int]]:
    """(repeated read, read after write) as (consistent, checked) over a simulated sequence: a read-only
    call repeated with no state change between must answer the same (an error counts as its code);
    repeated after a call that changed the state, differently (a check that presumes the write touched
    what the read reads, made on two real answers only). Infrastructure failures are no answers."""
    repeated = [0, 0]
    after_write = [0, 0]
    last_read: dict[str, tuple[int, Any, bool]] = {}  # call key -> (index, answer, was an error)
    writes: list[int] = []  # indices of calls that changed the state
    for i, (call, step) in enumerate(zip(calls, steps, strict=True)):
        tool = world.tool(call.tool)
        read_only = bool(tool and tool.annotations and tool.annotations.get("readOnlyHint") is True)
        if not read_only:
            if step.state_patch:
                writes.append(i)
            continue
        if step.error_kind == "infra":
            continue
        key = json.dumps([call.tool, call.arguments], sort_keys=True)
        answer = ("error", step.error_code) if step.is_error else step.output
        if key in last_read:
            before, earlier, was_error = last_read[key]
            if not any(before < w < i for w in writes):
                repeated[1] += 1
                repeated[0] += earlier == answer
            elif not (was_error or step.is_error):
                after_write[1] += 1
                after_write[0] += earlier != answer
        last_read[key] = (i, answer, step.is_error)
    return (repeated[0], repeated[1]), (after_write[0], after_write[1])
