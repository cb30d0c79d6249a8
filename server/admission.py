"""Whether the simulator would take a call's arguments (their size and the tool's input schema): the one rule that
real-server routing and fault injection share, so that neither acts on a call the simulator refuses as the agent's
own mistake."""

from __future__ import annotations

from typing import Any

from pydantic_core import to_json
from simia.sim.schema import non_finite_path, validate_instance

__all__ = ["fits"]


def fits(schema: dict[str, Any], arguments: dict[str, Any], max_argument_bytes: int) -> bool:
    """Whether `arguments` are at most `max_argument_bytes` as JSON, hold no NaN or Infinity, and are valid under
    the input `schema`, formats included (`simia.sim.engine.simulator.check_call`'s rule)."""
    try:
        size = len(to_json(arguments))
    except ValueError:  # not serializable (too deep, bad unicode): the simulator refuses it
        return False
    if size > max_argument_bytes or non_finite_path(arguments) is not None:
        return False
    return not validate_instance(schema, arguments, formats=True)
