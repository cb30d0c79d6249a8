"""How a tool looks to an agent model and to a trainer: the OpenAI `tools` entry, the one-line tool card, and
the check that a transcript's tool calls fit the tools.

Works on anything with a tool's `name`, `description`, `input_schema` and `output_schema`
(a world's `ToolSpec`, an MCP SDK `Tool`), so rollouts, exports, GRPO and synthesis
show and check tools the same way. The simulator's own, fuller spec sheet of a tool
lives in `simia.sim.engine.prompts`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..records import REFUSED_ARGUMENTS
from ..schema import validate_instance
from .model import World

__all__ = [
    "ToolLike",
    "check_tool_calls",
    "openai_tool",
    "openai_tool_call",
    "schema_signature",
    "tool_card",
    "world_card",
]


class ToolLike(Protocol):
    """What showing a tool needs: a world's `ToolSpec`, an MCP SDK `Tool` and an OpenAI function all have it
    (`output_schema`, where a tool has one, is read when present)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str | None: ...

    @property
    def input_schema(self) -> dict[str, Any]: ...


def openai_tool(tool: ToolLike) -> dict[str, Any]:
    """The OpenAI chat-completions `tools` entry (also what TRL and chat templates take)."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description or "", "parameters": tool.input_schema},
    }


def openai_tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """One entry of an OpenAI assistant message's `tool_calls`: arguments as a JSON string (as the API sends
    them; a string is kept as it is)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def tool_card(tool: ToolLike, *, returns: bool = False) -> str:
    """One line: `- name(arg: type, opt?: type) [-> output]: description`."""
    output = getattr(tool, "output_schema", None)
    out = f" -> {schema_signature(output) if output else 'object'}" if returns else ""
    return f"- {tool.name}({schema_signature(tool.input_schema)}){out}: {' '.join((tool.description or '').split())}"


def world_card(world: World) -> str:
    """A world as a model drafting for it reads it: title, description, policy and its tools' cards."""
    tools = "\n".join(tool_card(t, returns=True) for t in world.tools)
    return (
        f"# World: {world.title or world.name}\n{world.description}\n\n# Policy\n{world.policy or '(none)'}\n\n"
        f"# Tools (arguments -> result)\n{tools}"
    )


def check_tool_calls(
    messages: Sequence[Mapping[str, Any]], tools: Mapping[str, ToolLike], *, fit: bool = True
) -> list[str]:
    """Problems that make a transcript unfit for training (empty when it is fine): calls to unknown tools,
    arguments that are not JSON or break the tool's inputSchema, or that the server refused and did not keep
    (`REFUSED_ARGUMENTS`), calls without ids, and calls and results that do not pair.

    With `fit=False` a call need not fit the tools (an unknown tool, arguments the tool refuses): RL data keeps
    the agent's mistakes, which its reward judges; the transcript must still be well formed."""
    problems = []
    pending: dict[str, str] = {}
    for i, message in enumerate(messages):
        for call in message.get("tool_calls") or []:
            fn = call.get("function", {}) if isinstance(call, Mapping) else {}
            name, raw = fn.get("name"), fn.get("arguments", "{}")
            try:
                args = json.loads(raw) if isinstance(raw, str) else raw
            except json.JSONDecodeError as exc:
                problems.append(f"message {i}: arguments of {name} are not valid JSON ({exc.msg})")
                continue
            tool = tools.get(str(name))
            if isinstance(args, Mapping) and REFUSED_ARGUMENTS in args:
                problems.append(f"message {i}: the server refused the arguments of {name} ({args[REFUSED_ARGUMENTS]})")
            elif fit and tool is None:
                problems.append(f"message {i}: calls {name!r}, which is not in tools")
            elif fit and tool is not None:
                problems += [
                    f"message {i}: {name} arguments break its inputSchema: {p}"
                    for p in validate_instance(tool.input_schema, args)
                ]
            if not call.get("id"):
                problems.append(f"message {i}: a tool call of {name} has no id")
            else:
                pending[call["id"]] = str(name)
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                problems.append(f"message {i}: tool result {call_id!r} answers no earlier call")
            else:
                del pending[str(call_id)]
    problems += [f"tool call {call_id} ({name}) has no result" for call_id, name in pending.items()]
    return problems


def schema_signature(schema: Any, depth: int = 0) -> str:
    """A compact, TypeScript-like rendering of a JSON Schema, for prompts (a third the tokens of JSON)."""
    if not isinstance(schema, dict):
        return "any"
    if "enum" in schema:
        return "|".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return "|".join(schema_signature(s, depth) for s in schema[key])
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(schema_signature({**schema, "type": k}, depth) for k in kind)
    if kind == "array":
        return f"{schema_signature(schema.get('items', {}), depth)}[]"
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        if not props or depth > 3:
            return "object"
        required = set(schema.get("required") or [])
        parts = []
        for name, sub in props.items():
            text = f"{name}{'' if name in required else '?'}: {schema_signature(sub, depth + 1)}"
            if isinstance(sub, dict) and sub.get("description"):
                text += f" /*{sub['description']}*/"
            parts.append(text)
        return "{" + ", ".join(parts) + "}"
    if kind in ("integer", "number"):
        low, high = schema.get("minimum"), schema.get("maximum")
        return (
            f"{kind}({'' if low is None else low}..{'' if high is None else high})"
            if (low, high) != (None, None)
            else kind
        )
    return str(kind or "any")
