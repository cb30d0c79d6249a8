"""Whether the simulator would take a call's arguments (their size and the tool's input schema): the one rule that
real-server routing and fault injection share, so that neither acts on a call the simulator refuses as the agent's
own mistake."""

from __future__ import annotations

from typing import Any

from pydantic_core import to_json
from simia.sim.schema import validate_instance

__all__ = ["fits"]


def fits(schema: dict[str, Any], arguments: dict[str, Any], max_argument_bytes: int) -> bool:
    """Whether `arguments` are at most `max_argument_bytes` as JSON and valid under the input `schema`."""
    try:
        size = len(to_json(arguments))
    except ValueError:  # not serializable (too deep, bad unicode): the simulator refuses it
        return False
    return size <= max_argument_bytes and not validate_instance(schema, arguments)
