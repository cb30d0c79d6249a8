"""A seed conversation built turn by turn in OpenAI chat format, whatever format the record was in: a `Seed`.

`Chat` is what every format's reader writes into: user turns, assistant turns (text, calls by name with their
arguments, the model's own reasoning) and tool results. It checks each call against the record's tools (a call of a
tool the record does not list skips the record), gives calls ids where the source has none, pairs each result with
the oldest call still waiting, and turns calls of a `think` pseudo-tool into the next assistant turn's
`reasoning_content`. Each problem is a `SkipRecord` under a fixed reason; each conversion a line of `changes`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..schema import non_finite_path
from .seeds_records import SkipRecord
from .seeds_tools import NormalTools, parse_loose

__all__ = [
    "BAD_ARGUMENTS",
    "CONVENTION_CHANGE",
    "MALFORMED_CALL",
    "NO_ASSISTANT",
    "NO_USER",
    "ORPHAN_RESULT",
    "UNKNOWN_TURN",
    "UNLISTED",
    "Chat",
    "Seed",
    "message_text",
]

UNLISTED = "calls a tool it does not list"
MALFORMED_CALL = "malformed tool call"
BAD_ARGUMENTS = "call arguments are not a JSON object"
ORPHAN_RESULT = "a tool result with no call"
NO_USER = "no user turn"
NO_ASSISTANT = "no assistant turn"
UNKNOWN_TURN = "unknown turn"
THINK_CHANGE = "think calls became the assistant's reasoning (reasoning_content); their results dropped"
IDS_CHANGE = "tool calls got ids (call_1, call_2, ...): the source has none"
CONVENTION_CHANGE = "the system turn is a calling convention (tool list, call syntax), not a policy: dropped"
LATE_REASONING = "reasoning after the last assistant turn dropped"


@dataclass
class Seed:
    """One record read: its tools, its conversation (no system message), its system prompt ("" when it has none
    or when it was only a calling convention) and the record-level changes made on the way."""

    tools: NormalTools
    messages: list[dict[str, Any]]
    system: str = ""
    changes: set[str] = field(default_factory=set)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (tool, arguments) of every call


class Chat:
    """An OpenAI chat built turn by turn, checking each call against the tools and pairing results with calls."""

    def __init__(self, tools: NormalTools) -> None:
        self.tools = tools
        self.messages: list[dict[str, Any]] = []
        self.pending: list[tuple[str, bool]] = []  # (call id, a think call), oldest first
        self.reasoning: list[str] = []
        self.changes: set[str] = set()
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def user(self, content: Any) -> None:
        self.messages.append({"role": "user", "content": message_text(content)})

    def assistant(self, content: Any = None, calls: Iterable[tuple[Any, Any, Any]] = (), reasoning: Any = None) -> None:
        """An assistant turn: text, calls (name, arguments, id or None) and the model's own reasoning."""
        if isinstance(reasoning, str) and reasoning.strip():
            self.reasoning.append(reasoning.strip())
        tool_calls: list[dict[str, Any]] = []
        for name, arguments, call_id in calls:
            if not isinstance(name, str) or not name.strip():
                raise SkipRecord(MALFORMED_CALL, "a call without a tool name")
            args = _arguments(name, arguments)
            given = call_id if isinstance(call_id, str) and call_id else ""
            if name in self.tools.think:
                thought = args.get("thought") if isinstance(args.get("thought"), str) else _dump(args)
                self.reasoning.append(str(thought).strip())
                self.changes.add(THINK_CHANGE)
                self.pending.append((given, True))
                continue
            tool = self.tools.renamed.get(name, name)
            if tool not in self.tools.names:
                raise SkipRecord(UNLISTED, f"calls {name!r}, which its tools do not list")
            self.calls.append((tool, args))
            if not given:
                given = f"call_{len(self.calls)}"
                self.changes.add(IDS_CHANGE)
            function = {"name": tool, "arguments": _dump(args)}
            tool_calls.append({"id": given, "type": "function", "function": function})
            self.pending.append((given, False))
        text = message_text(content).strip()
        if not text and not tool_calls:
            return  # an empty turn, or think calls only: their reasoning goes to the next assistant turn
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if self.reasoning:
            message["reasoning_content"] = "\n\n".join(self.reasoning)
            self.reasoning = []
        if tool_calls:
            message["tool_calls"] = tool_calls
        self.messages.append(message)

    def named_results(self, content: str) -> None:
        """A tool turn answering several calls at once as a JSON list of `{"name": ..., ...}` (ToolACE's): one result
        per waiting call when the list is as long as the calls waiting, else one result."""
        if len(self.pending) > 1:
            try:
                parts = parse_loose(content)
            except ValueError:
                parts = None
            named = isinstance(parts, list) and all(isinstance(p, dict) and "name" in p for p in parts)
            if named and isinstance(parts, list) and len(parts) == len(self.pending):
                for part in parts:
                    self.result(part)
                return
        self.result(content)

    def result(self, content: Any, call_id: Any = None) -> None:
        index = next((i for i, p in enumerate(self.pending) if call_id and p[0] == call_id), 0)
        if not self.pending:
            raise SkipRecord(ORPHAN_RESULT, "a tool result with no call before it")
        given, think = self.pending.pop(index)
        if not think:
            self.messages.append({"role": "tool", "tool_call_id": given, "content": message_text(content)})

    def seed(self, system: str = "") -> Seed:
        if self.reasoning:
            self.changes.add(LATE_REASONING)
        users = [m for m in self.messages if m["role"] == "user"]
        if not users or not users[0]["content"].strip():
            raise SkipRecord(NO_USER)
        if not any(m["role"] == "assistant" for m in self.messages):
            raise SkipRecord(NO_ASSISTANT)
        return Seed(self.tools, self.messages, system.strip(), self.changes, self.calls)


def message_text(value: Any) -> str:
    """A message's content as text: strings as they are, OpenAI content parts joined, other JSON written out."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, (str, dict)) for p in value):
        texts = [p if isinstance(p, str) else p.get("text") for p in value]
        if all(isinstance(t, str) for t in texts):
            return "".join(t for t in texts if isinstance(t, str))
    return _dump(value)


def _dump(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError:
        raise SkipRecord("not JSON", "NaN or an infinity in a call or a result") from None


def _arguments(name: str, arguments: Any) -> dict[str, Any]:
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if isinstance(arguments, str):
        try:
            arguments = parse_loose(arguments)
        except ValueError:
            raise SkipRecord(BAD_ARGUMENTS, f"{name}: the arguments are not JSON") from None
    if not isinstance(arguments, dict):
        raise SkipRecord(BAD_ARGUMENTS, f"{name}: the arguments are a {type(arguments).__name__}")
    if non_finite_path(arguments) is not None:
        raise SkipRecord("not JSON", f"{name}: NaN or an infinity in the arguments")
    return arguments
