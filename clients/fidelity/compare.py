"""Agreement of one call: the real server's answer and the simulated step side by side, scored on outcome
(both answered or both failed), the simulated answer's fit to the tool's output schema, shared key paths
(structure), equal JSON leaves (values) and error codes."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from simia.sim.engine import Step, ToolCall
from simia.sim.schema import validate_instance
from simia.sim.world import ToolSpec, World

from .report import CallComparison

__all__ = ["compare"]


def compare(
    index: int, call: ToolCall, tool: ToolSpec | None, world: World, real: types.CallToolResult, step: Step
) -> CallComparison:
    """One call compared (`tool` is None for a name the world lacks: an agent's call may name one)."""
    real_error, sim_error = bool(real.is_error), bool(step.is_error)
    real_answer, sim_answer = (_real_answer(real) if not real_error else None), step.output
    structure = values = None
    if not real_error and not sim_error:
        a, b = _leaves(real_answer), _leaves(sim_answer)
        union = set(a) | set(b)
        structure = len(set(a) & set(b)) / len(union) if union else 1.0
        values = sum(1 for p in union if p in a and p in b and a[p] == b[p]) / len(union) if union else 1.0
    schema_valid = None
    if tool and tool.output_schema and not sim_error:
        schema_valid = not validate_instance(tool.output_schema, sim_answer)
    real_text = "\n".join(c.text for c in real.content if isinstance(c, types.TextContent))
    return CallComparison(
        index=index,
        tool=call.tool,
        arguments=call.arguments,
        real_error=real_error,
        sim_error=sim_error,
        sim_infra=step.error_kind == "infra",
        outcome_agrees=real_error == sim_error,
        schema_valid=schema_valid,
        structure=structure,
        values=values,
        real_code=world.code_named(real_text, tool) if real_error and tool else None,
        sim_code=step.error_code if sim_error else None,
        real=real_answer if not real_error else real_text,
        simulated=sim_answer if not sim_error else step.text,
    )


def _real_answer(result: types.CallToolResult) -> Any:
    if result.structured_content is not None:
        return result.structured_content
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {"text": text}


def _leaves(value: Any, path: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_leaves(item, f"{path}/{key}"))
        return out or {path: {}}
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            out.update(_leaves(item, f"{path}/{i}"))
        return out or {path: []}
    return {path: value}
