"""The structured action: a tool-calling turn as one JSON answer, `{"message", "tool_calls": [{"name", "arguments"}]}`.

A model without native tool calling (the embedded model, a server that refuses `tools`)
answers `action_schema`, built from the tools' input schemas. `action_messages` renders an
OpenAI-format tool-calling conversation (tool calls, tool results) as plain turns such a
model can read, and `read_action` returns the answer in the shape native tool calling gives.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..world import ToolLike, tool_card

__all__ = ["ANSWER_FORMAT", "FunctionTool", "action_instructions", "action_messages", "action_schema", "read_action"]


@dataclass(frozen=True)
class FunctionTool:
    """A tool as OpenAI function calling describes it, `{"type": "function", "function": {"name", ...}}`."""

    name: str
    description: str | None
    input_schema: dict[str, Any]

    @classmethod
    def from_openai(cls, tool: Mapping[str, Any]) -> FunctionTool:
        fn = tool.get("function") or {}
        return cls(str(fn.get("name")), fn.get("description"), dict(fn.get("parameters") or {"type": "object"}))


def action_schema(tools: Sequence[ToolLike], max_calls: int = 4) -> dict[str, Any]:
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


ANSWER_FORMAT = (
    '# Answer format\nOne JSON object: {"message": text for the user, "tool_calls": [{"name", "arguments"}]}. '
    "Call tools when you need information or must act; answer with an empty tool_calls list to reply to the user."
)


def action_instructions(tools: Sequence[ToolLike]) -> str:
    """The system-prompt section that lists the tools and asks for the structured action."""
    cards = "\n".join(tool_card(t) for t in tools)
    return f"# Tools\n{cards}\n\n{ANSWER_FORMAT}"


def action_messages(messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolLike]) -> list[dict[str, Any]]:
    """An OpenAI-format tool-calling conversation as plain turns, for a model that answers the structured action.

    `action_instructions` join the first system message (chat templates want one, first); each
    assistant turn becomes the action it stands for, as JSON; consecutive tool results become one
    user turn, a `Result of {call id} {tool}: {text}` line per call.
    """
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool call id -> tool name, to label results
    instructions = action_instructions(tools)
    results: list[str] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            call_id = str(m.get("tool_call_id"))
            results.append(f"Result of {call_id} {names.get(call_id, 'tool')}: {_text(m.get('content'))}")
            continue
        if results:
            out.append({"role": "user", "content": "\n".join(results)})
            results = []
        if role == "system":
            out.append({"role": "system", "content": _text(m.get("content"))})
        elif role == "assistant":
            calls = []
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                names[str(call.get("id"))] = str(fn.get("name"))
                calls.append({"name": fn.get("name"), "arguments": _arguments(fn.get("arguments"))})
            action = {"message": _text(m.get("content")), "tool_calls": calls}
            out.append({"role": "assistant", "content": json.dumps(action, ensure_ascii=False)})
        else:
            out.append({"role": str(role), "content": _text(m.get("content"))})
    if results:
        out.append({"role": "user", "content": "\n".join(results)})
    if out and out[0]["role"] == "system":
        out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{instructions}"}
    else:
        out.insert(0, {"role": "system", "content": instructions})
    return out


def read_action(data: Mapping[str, Any]) -> dict[str, Any]:
    """A structured-action answer in the shape native tool calling returns,
    `{"message": str, "tool_calls": [{"id": None, "name", "arguments"}]}` (an action's calls have no ids)."""
    calls = []
    for call in data.get("tool_calls") or []:
        if isinstance(call, dict):
            arguments = call.get("arguments")
            if not isinstance(arguments, dict):
                arguments = {"_unparsed_arguments": arguments}  # the server names the problem to the agent
            calls.append({"id": None, "name": call.get("name"), "arguments": arguments})
    return {"message": str(data.get("message") or ""), "tool_calls": calls}


def _text(content: Any) -> str:
    """A message's content as text (OpenAI content may be None or a list of text parts)."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments if arguments is not None else {}
