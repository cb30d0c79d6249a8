"""Groundings a model drafts for a world's undeclared tools, each kept only if it runs on the drafted state.

`simia bootstrap` asks once for the tools that declare no grounding (a REST import declares its resources'
own): the tools whose answer follows from the state get a read, preconditions and effects, as world.yaml
would hold them. A proposal is kept only when it is a valid `Grounding`, passes the checks `simia validate`
makes (`check_grounding`: its templates name the tool's arguments, its pointers resolve, its codes are the
tool's) and runs on the drafted state: called with ids taken from the state where its pointers put an
argument, it plans without the world's fault (`Broken`), and its read's pointer finds a value. A rejected
proposal's problems are fed back, then it is dropped with them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from ..engine.grounded import Broken, Plan, plan_call
from ..world import (
    Effect,
    Grounding,
    ToolSpec,
    World,
    as_state,
    compact_json,
    fill_pointer,
    grounding_issues,
    is_missing,
    resolve_pointer,
    template_names,
    world_card,
)

__all__ = ["ANSWER", "draft_groundings", "grounding_problems"]

ANSWER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "groundings": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"tool": {"type": "string"}, "grounding": {"type": "object"}},
                "required": ["tool", "grounding"],
            },
        }
    },
    "required": ["groundings"],
}
FORMAT = """\
A grounding is data (no code); `{name}` in a pointer or value is the tool's argument `name`:
- "read": {"pointer": "/orders/{order_id}", "missing": "<error code when nothing is there>"} answers with the value
  at that JSON Pointer; or {"jsonpath": "$.orders[?@.user_id == {user_id}]"} with the list of matches. "key":
  "orders" wraps the value as {"orders": value}; "fields": ["id", "name"] keeps only those members.
- "preconditions": [{"pointer": "/orders/{order_id}/status", "equals": "pending", "error": "<code>"}] (or
  "exists": true|false, or "schema": {...}) checked first; a failed one answers its error code.
- "effects": [{"op": "replace", "path": "/orders/{order_id}/status", "value": "cancelled"}] (RFC 6902) applied
  to the state.
- "mode": "exact" (the read is the whole answer, no model) or "guided" (a model writes the answer around the
  declared parts)."""

Ask = Callable[[list[dict[str, Any]]], Awaitable[dict[str, Any] | None]]
"""One model request (its messages) answered under `ANSWER`, or None when the model gave no usable answer."""


async def draft_groundings(
    world: World, state: dict[str, Any], ask: Ask, attempts: int
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """(the kept grounding of each tool, as world.yaml holds it; the dropped ones, each `{tool, problems}`)."""
    names = [tool.name for tool in world.tools if tool.grounding is None]
    if not names or not state:
        return {}, []
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You declare how simulated tools' answers follow from their state. Answer JSON."},
        {
            "role": "user",
            "content": f"{world_card(world)}\n\n# State\n{json.dumps(state, ensure_ascii=False)[:6000]}\n\n"
            f"# Your task\n{FORMAT}\n\nFor each of these tools whose answer follows from the state alone, write its "
            f"grounding: {', '.join(names)}. Leave out tools whose answers need judgment (ranking, free text, "
            'effects nobody wrote down). Answer {"groundings": [{"tool": name, "grounding": {...}}]}.',
        },
    ]
    kept: dict[str, dict[str, Any]] = {}
    failed: dict[str, list[str]] = {}
    for _ in range(attempts):
        data = await ask(messages)
        problems: list[str] = [] if data is not None else ["the model gave no usable answer: answer the JSON asked"]
        for item in (data or {}).get("groundings") or []:
            name = item.get("tool") if isinstance(item, dict) else None
            if name not in names or name in kept:
                problems.append(f"{name!r} is not one of the tools to declare ({', '.join(names)})")
                continue
            found = grounding_problems(world, world.tools_by_name[name], item.get("grounding"), state)
            if found:
                failed[name] = found
                problems += [f"tool {name!r}: {p}" for p in found]
            else:
                kept[name] = item["grounding"]
                failed.pop(name, None)
        if not problems:
            break
        messages = [  # a new list: each request keeps the messages it was sent
            *messages,
            {"role": "assistant", "content": json.dumps(data)},
            {"role": "user", "content": "Fix these problems and answer again:\n- " + "\n- ".join(problems[:10])},
        ]
    return kept, [{"tool": name, "problems": found} for name, found in failed.items()]


def grounding_problems(world: World, tool: ToolSpec, raw: Any, state: dict[str, Any]) -> list[str]:
    """Why `raw` cannot be `tool`'s grounding in `world` with this initial `state` (empty when it can)."""
    try:
        grounding = Grounding.model_validate(raw)
    except ValidationError as exc:
        return [f"{'.'.join(map(str, e['loc'])) or 'grounding'}: {e['msg']}" for e in exc.errors()[:3]]
    declared = tool.model_copy(update={"grounding": grounding})
    issues = grounding_issues(declared, state, [e.code for e in world.error_codes(declared)])
    if issues:
        return [f"{i.path}: {i.message}" + (f" ({i.hint})" if i.hint else "") for i in issues[:3]]
    tools = [declared if t.name == tool.name else t for t in world.tools]
    trial = world.model_copy(update={"tools": tools, "initial_state": state})
    arguments = witness(declared, grounding, state)
    planned = plan_call(trial, declared, as_state(state), arguments)
    if isinstance(planned, Broken):
        return [f"called with {compact_json(arguments)} on the drafted state it fails: {planned.detail}"]
    read = grounding.read.pointer if grounding.read else None
    pointer = fill_pointer(read, arguments) if read else None
    after = planned.state if isinstance(planned, Plan) else state  # a refused call changed nothing
    if pointer is not None and is_missing(resolve_pointer(after, pointer)):
        return [
            f"called with {compact_json(arguments)} (ids from the drafted state) its read finds nothing at {pointer}"
        ]
    return []


def witness(tool: ToolSpec, grounding: Grounding, state: dict[str, Any]) -> dict[str, Any]:
    """Arguments that point at records of `state`: where a pointer's token is `{name}`, the first key (or index)
    of what the state holds there; any other argument a template names gets an example value (`_example`)."""
    pointers = [c.pointer for c in grounding.preconditions if c.pointer is not None]
    pointers += [e.path for e in grounding.effects if isinstance(e, Effect)]
    if grounding.read and grounding.read.pointer:
        pointers.insert(0, grounding.read.pointer)
    arguments: dict[str, Any] = {}
    for template in pointers:
        node: Any = state
        for token in template.split("/")[1:]:
            name = token[1:-1] if token.startswith("{") and token.endswith("}") else None
            if name is not None and name not in arguments:
                keys = _keys(node)
                if not keys:
                    break
                arguments[name] = _typed(tool, name, keys[0])
            node = _child(node, str(arguments[name]) if name is not None else _unescaped(token))
    values = [e.value for e in grounding.effects if isinstance(e, Effect)]
    named = [*pointers, *values, grounding.read.jsonpath if grounding.read else None]
    properties = tool.input_schema.get("properties") or {}
    for name in template_names(named):
        schema = properties.get(name)
        if name not in arguments:
            arguments[name] = _example(schema if isinstance(schema, dict) else {})
    return arguments


def _keys(node: Any) -> list[str]:
    if isinstance(node, dict):
        return list(node)
    return [str(i) for i in range(len(node))] if isinstance(node, list) else []


def _child(node: Any, key: str) -> Any:
    if isinstance(node, dict):
        return node.get(key)
    if isinstance(node, list) and key.isdigit() and int(key) < len(node):
        return node[int(key)]
    return None


def _unescaped(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


_OF_TYPE: dict[str, Any] = {"integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}, "null": None}


def _example(schema: dict[str, Any]) -> Any:
    """An argument's default, first example or first enum value, else a value of its type ("example" for a
    string or an untyped one; its `minimum` for a number that has one)."""
    candidates = [schema.get("default"), *(schema.get("examples") or [])[:1], *(schema.get("enum") or [])[:1]]
    given = next((value for value in candidates if value is not None), None)
    if given is not None:
        return given
    kind = schema.get("type")
    if kind in ("integer", "number") and isinstance(schema.get("minimum"), int | float):
        return schema["minimum"]
    return _OF_TYPE.get(kind, "example") if isinstance(kind, str) else "example"


def _typed(tool: ToolSpec, name: str, key: str) -> Any:
    """A state key as the argument `name` takes it (an integer id from a key "3")."""
    schema = (tool.input_schema.get("properties") or {}).get(name)
    kind = schema.get("type") if isinstance(schema, dict) else None
    return int(key) if kind == "integer" and key.lstrip("-").isdigit() else key
