"""The structured action: a tool-calling turn as one JSON answer, `{"message", "tool_calls": [{"name", "arguments"}]}`.

A model without native tool calling (the embedded model, for one) answers `action_schema`,
built from the tools' input schemas.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["ActionTool", "action_schema"]


class ActionTool(Protocol):
    """What the structured action needs of a tool; an MCP `types.Tool` and a `FunctionTool` both have it."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str | None: ...

    @property
    def input_schema(self) -> dict[str, Any]: ...


def action_schema(tools: Sequence[ActionTool], max_calls: int = 4) -> dict[str, Any]:
    """The agent's answer: a message to the user and/or tool calls valid against each tool's inputSchema."""
    variants = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": _plain(t.input_schema)},
            "required": ["name", "arguments"],
        }
        for t in tools
    ]
    return {
        "type": "object",
        "properties": {
            "message": {"type": "string"},
            "tool_calls": {"type": "array", "items": {"anyOf": variants}, "maxItems": max_calls},
        },
        "required": ["message", "tool_calls"],
    }


def _plain(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k not in {"$schema", "$id"}}
