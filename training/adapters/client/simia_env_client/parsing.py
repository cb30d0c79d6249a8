"""Tool calls in a model's text: the one parser of the text-in, text-out adapters (verl, SkyRL).

Two forms are read: Hermes / Qwen blocks, `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (any number,
the last one may be left unclosed), and OpenAI-style JSON as the whole answer (optionally in a ```json fence):
`{"name", "arguments"}`, a list of them, `{"tool_calls": [{"function": {"name", "arguments"}}]}` (or simia's
structured action, `{"message", "tool_calls": [{"name", "arguments"}]}`), with
`arguments` an object or a JSON string (`parameters` is read as `arguments`, as Llama's JSON form writes it).

A block that does not parse is a `problem`, not an exception: the adapter shows it to the model as the result of
its turn and sends nothing to the server (a bad rollout is data, not a crash). Text with no call is the model's
answer to the user.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FORMAT_HINT", "ParsedTurn", "Problem", "ToolCall", "parse_openai_message", "parse_tool_calls"]

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.S)
FORMAT_HINT = 'Call a tool as <tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>, or answer without one.'
"""What a model is told after a call that did not parse."""


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: the tool's name, its arguments (an object) and the id it has in the transcript."""

    name: str
    arguments: dict[str, Any]
    id: str = ""

    def openai(self) -> dict[str, Any]:
        """The call as an OpenAI chat `tool_calls` entry (arguments as a JSON string)."""
        arguments = json.dumps(self.arguments, ensure_ascii=False)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": arguments}}


@dataclass(frozen=True)
class Problem:
    """A call that did not parse: what was wrong (for the model), and the call's id when the model gave one
    (a native tool call's id, which its answer must carry)."""

    message: str
    id: str = ""


@dataclass(frozen=True)
class ParsedTurn:
    """What one model turn asked for.

    Attributes:
        content: the text outside the tool-call blocks (the whole text when it has none).
        calls: the calls that parsed, in order.
        problems: one message per block that did not parse (what was wrong, and the format to use).
    """

    content: str
    calls: list[ToolCall] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def is_answer(self) -> bool:
        """The turn neither calls a tool nor tries to: the model answered the user."""
        return not self.calls and not self.problems


def _call(data: Any, where: str) -> ToolCall | str:
    """A call from one decoded JSON value, or the problem with it."""
    if not isinstance(data, dict):
        return f"{where}: a tool call must be a JSON object with name and arguments. {FORMAT_HINT}"
    if isinstance(data.get("function"), dict):  # an OpenAI tool_calls entry
        data = data["function"]
    name = data.get("name")
    if not isinstance(name, str) or not name:
        return f"{where}: the tool call has no name. {FORMAT_HINT}"
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return f"{where}: the arguments of {name} are not valid JSON ({exc.msg}). {FORMAT_HINT}"
    if not isinstance(arguments, dict):
        return f"{where}: the arguments of {name} must be a JSON object. {FORMAT_HINT}"
    return ToolCall(name, arguments)


def _json_calls(text: str) -> tuple[list[Any], str] | None:
    """The call objects and the message of an answer that is OpenAI-style JSON, or None when it is not one."""
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1).strip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError:
        return None
    if isinstance(data, dict) and isinstance(data.get("tool_calls"), list):  # also simia's structured action
        message = data.get("message", data.get("content"))
        return list(data["tool_calls"]), message if isinstance(message, str) else ""
    if isinstance(data, dict) and ("name" in data or isinstance(data.get("function"), dict)):
        return [data], ""
    if isinstance(data, list) and data and all(isinstance(d, dict) and ("name" in d or "function" in d) for d in data):
        return list(data), ""
    return None


def parse_tool_calls(text: str, *, id_prefix: str = "call") -> ParsedTurn:
    """The tool calls in `text`, and the problems of those that did not parse.

    Args:
        text: the model's turn, as decoded.
        id_prefix: the calls get the ids `{id_prefix}_0`, `{id_prefix}_1`, ... (unique within an episode when
            the prefix names the turn).
    """
    blocks = _BLOCK.findall(text)
    if blocks:
        found: list[ToolCall | str] = []
        for i, block in enumerate(blocks):
            try:
                found.append(_call(json.loads(block.strip()), f"tool call {i + 1}"))
            except json.JSONDecodeError as exc:
                problem = exc.msg.removesuffix(" at")  # "Invalid control character at": the position follows
                found.append(f"tool call {i + 1} is not valid JSON ({problem} at char {exc.pos}). {FORMAT_HINT}")
        content = _BLOCK.sub("", text).strip()
    else:
        answer = _json_calls(text)
        if answer is None:
            return ParsedTurn(text.strip())
        objects, content = answer
        found = [_call(o, f"tool call {i + 1}") for i, o in enumerate(objects)]
    calls = [c for c in found if isinstance(c, ToolCall)]
    named = [ToolCall(c.name, c.arguments, f"{id_prefix}_{i}") for i, c in enumerate(calls)]
    return ParsedTurn(content, named, [Problem(p) for p in found if isinstance(p, str)])


def parse_openai_message(message: dict[str, Any], *, id_prefix: str = "call") -> ParsedTurn:
    """The tool calls of an OpenAI chat-completions assistant message (native `tool_calls`, their ids kept; a
    message without them is parsed as text, so a model that writes its calls in its content works too)."""
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    native = message.get("tool_calls") or []
    if not native:
        return parse_tool_calls(text, id_prefix=id_prefix)
    calls: list[ToolCall] = []
    problems: list[Problem] = []
    for i, entry in enumerate(native):
        found = _call(entry, f"tool call {i + 1}")
        call_id = str(entry.get("id") or f"{id_prefix}_{i}") if isinstance(entry, dict) else f"{id_prefix}_{i}"
        if isinstance(found, ToolCall):
            calls.append(ToolCall(found.name, found.arguments, call_id))
        else:
            problems.append(Problem(found, call_id))
    return ParsedTurn(text.strip(), calls, problems)
