"""Exports of logged episodes for training: OpenAI fine-tuning JSONL (more formats in `simia export`)."""

from __future__ import annotations

import json
from typing import Any

from simia.sim.world import World

__all__ = ["openai_record"]


def _tool_entry(tool: Any) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description or "", "parameters": tool.input_schema},
    }


def openai_record(world: World, transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """One OpenAI fine-tuning record: `messages` (tool calls with JSON-string arguments) and `tools`."""
    messages = []
    for m in transcript:
        entry = {k: m[k] for k in ("role", "content", "tool_calls", "tool_call_id") if k in m}
        if entry.get("role") == "assistant" and entry.get("tool_calls"):
            entry["tool_calls"] = [
                {
                    **c,
                    "function": {
                        **c["function"],
                        "arguments": c["function"]["arguments"]
                        if isinstance(c["function"]["arguments"], str)
                        else json.dumps(c["function"]["arguments"]),
                    },
                }
                for c in entry["tool_calls"]
            ]
        messages.append(entry)
    return {"messages": messages, "tools": [_tool_entry(t) for t in world.tools]}
