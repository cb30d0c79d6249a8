"""A seed record's tools, in MCP's shape: `{name, description, inputSchema}` with a JSON Schema 2020-12 object.

Datasets write a tool in five ways, and `normal_tools` reads each:

    {"type": "function", "function": {...}}           OpenAI's wrapper (Nemotron, Toucan, Hermes): unwrapped
    {"name", "description", "parameters": {...}}      a JSON Schema (APIGen-MT, glaive): kept
    {"name", "inputSchema" | "input_schema": {...}}   MCP's own (Toucan's servers): kept
    {"parameters": {"n": {"type": "int, optional"}}}  xLAM's map of Python type strings: `int` -> integer,
                                                      `List[str]` -> array of string, `optional` (or a default)
                                                      -> not required
    {"parameters": {"type": "dict", ...}}             ToolACE's Python type names: `dict` -> object,
                                                      `float` -> number, `required: true` on a property -> the
                                                      object's `required` list

Older JSON Schema drafts are brought to 2020-12 (`dialects.upgrade_schema`). A `think` tool (tau-bench's pseudo-tool
for thinking out loud) is taken out of the set: its calls become the assistant's reasoning. Every change is a
`ReportEntry`; a tool whose schema still is not valid makes its record a `SkipRecord`.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..world import TOOL_NAME, canonical_json
from .dialects import SUBSCHEMA_LISTS, SUBSCHEMA_MAPS, SUBSCHEMA_SINGLE, upgrade_schema
from .imported import ReportEntry, mcp_tool_name, tool_schema_problem
from .seeds_records import SkipRecord, loads

__all__ = ["INVALID_SCHEMA", "NO_TOOLS", "THINK_TOOL", "NormalTools", "normal_tools", "parse_loose", "type_from_text"]

THINK_TOOL = "think"
"""The name of the pseudo-tool whose calls are the assistant's reasoning (tau-bench's `think`, case ignored)."""

NO_TOOLS = "no tools"
THINK_REMOVED = "a pseudo-tool for thinking out loud: not served; its calls became the assistant's reasoning"
INVALID_SCHEMA = "invalid tool schema"

_JSON_TYPES = frozenset({"string", "integer", "number", "boolean", "object", "array", "null"})
_PYTHON_TYPES = {
    "str": "string",
    "string": "string",
    "text": "string",
    "char": "string",
    "int": "integer",
    "integer": "integer",
    "long": "integer",
    "float": "number",
    "double": "number",
    "number": "number",
    "decimal": "number",
    "bool": "boolean",
    "boolean": "boolean",
    "dict": "object",
    "object": "object",
    "mapping": "object",
    "map": "object",
    "json": "object",
    "list": "array",
    "array": "array",
    "tuple": "array",
    "set": "array",
    "sequence": "array",
    "iterable": "array",
    "none": "null",
    "null": "null",
    "nonetype": "null",
}
_ANY = frozenset({"any", "typing.any", "object?", ""})
_GENERIC = re.compile(r"(?:typing\.)?(\w+)\s*\[(.*)\]", re.DOTALL)


@dataclass(frozen=True)
class NormalTools:
    """A record's tools in MCP's shape, sorted by name, and what it took to get there.

    `key` identifies the tool set (names and input schemas), `described` the same with the descriptions:
    records of one key share a world."""

    tools: tuple[dict[str, Any], ...]
    renamed: dict[str, str]  # the source's name -> the MCP-valid one, where they differ
    think: frozenset[str]  # the source's names of think pseudo-tools (taken out)
    changes: tuple[ReportEntry, ...]
    key: str
    described: str

    @cached_property
    def names(self) -> frozenset[str]:
        return frozenset(tool["name"] for tool in self.tools)

    @cached_property
    def schemas(self) -> dict[str, dict[str, Any]]:
        """Each tool's inputSchema by name (the same objects every time: validators are compiled once per schema)."""
        return {tool["name"]: tool["inputSchema"] for tool in self.tools}


def parse_loose(text: str) -> Any:
    """JSON, else a Python literal (Hermes and ToolACE write `{'name': 'x'}`); raises ValueError when neither."""
    try:
        return loads(text)
    except (ValueError, RecursionError):
        pass
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise ValueError("neither JSON nor a Python literal") from None


def normal_tools(raw: Any) -> NormalTools:
    """The tools of one record (a list of tools, one tool, or a JSON string of either) in MCP's shape.

    Raises:
        SkipRecord: "no tools" (none, or only `think`), or "invalid tool schema" (a tool without a name, one whose
            schema stays invalid after conversion, one name listed twice with different schemas).
    """
    if isinstance(raw, str):
        if not raw.strip():
            raise SkipRecord(NO_TOOLS)
        try:
            raw = parse_loose(raw)
        except ValueError:
            raise SkipRecord(INVALID_SCHEMA, "the tools are not JSON") from None
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise SkipRecord(NO_TOOLS)
    tools: dict[str, dict[str, Any]] = {}
    renamed: dict[str, str] = {}
    think: set[str] = set()
    changes: list[ReportEntry] = []
    for item in raw:
        source, tool, tool_changes = _one_tool(item)
        if source.lower() == THINK_TOOL:
            if not think:
                changes.append(ReportEntry("changed", source, THINK_REMOVED))
            think.add(source)
            continue
        name = tool["name"]
        if name != source:
            renamed[source] = name
        if name in tools:
            if canonical_json(tools[name]) != canonical_json(tool):
                raise SkipRecord(INVALID_SCHEMA, f"tool {name!r} is listed twice with different schemas")
            continue
        tools[name] = tool
        changes += tool_changes
    if not tools:
        raise SkipRecord(NO_TOOLS, "only a think tool" if think else "")
    ordered = tuple(tools[name] for name in sorted(tools))
    key = _digest([[t["name"], t["inputSchema"]] for t in ordered])
    described = _digest([[t["name"], t.get("description", ""), t["inputSchema"]] for t in ordered])
    return NormalTools(ordered, renamed, frozenset(think), tuple(changes), key, described)


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def _one_tool(item: Any) -> tuple[str, dict[str, Any], list[ReportEntry]]:
    """(the source's name, the MCP tool, its changes)."""
    if not isinstance(item, dict):
        raise SkipRecord(INVALID_SCHEMA, f"a tool is a JSON {type(item).__name__}, not an object")
    changes: list[ReportEntry] = []
    wrapped = item.get("type") == "function" and isinstance(item.get("function"), dict)
    if wrapped:
        item = item["function"]
    source = item.get("name")
    if not isinstance(source, str) or not source.strip():
        raise SkipRecord(INVALID_SCHEMA, "a tool without a name")
    name = source if TOOL_NAME.fullmatch(source) else mcp_tool_name(source)
    if wrapped:
        changes.append(ReportEntry("changed", name, "unwrapped from OpenAI's {type: function, function: ...}"))
    if name != source:
        changes.append(ReportEntry("changed", name, f"renamed from {source!r} (MCP names are A-Z a-z 0-9 _ . -)"))
    schema: Any = None
    for field in ("inputSchema", "input_schema", "parameters"):
        if field in item:
            schema = item[field]
            break
    if isinstance(schema, str):
        try:
            schema = parse_loose(schema)
        except ValueError:
            raise SkipRecord(INVALID_SCHEMA, f"tool {source!r}: its parameters are not JSON") from None
    if schema is None or schema == {}:
        schema = {"type": "object", "properties": {}}
    elif not isinstance(schema, dict):
        raise SkipRecord(INVALID_SCHEMA, f"tool {source!r}: its parameters are a {type(schema).__name__}")
    elif _is_type_map(schema):
        schema = _from_type_map(schema, name, changes)
    else:
        schema = _fix(schema, name, changes, root=True)
    schema, upgraded = upgrade_schema(schema)
    changes += [ReportEntry("changed", name, change) for change in upgraded]
    problem = tool_schema_problem(schema)
    if problem:
        raise SkipRecord(INVALID_SCHEMA, f"tool {source!r}: {problem}")
    tool: dict[str, Any] = {"name": name}
    description = item.get("description")
    if isinstance(description, str) and description.strip():
        tool["description"] = description.strip()
    tool["inputSchema"] = schema
    return source, tool, changes


def _is_type_map(schema: dict[str, Any]) -> bool:
    """xLAM's form: parameter name -> {type, description, default}, with no JSON Schema keyword at the top."""
    if {"type", "properties", "$schema", "required", "anyOf", "oneOf", "allOf", "$ref"} & schema.keys():
        return False
    return all(isinstance(v, dict) and ("type" in v or "description" in v) for v in schema.values())


def _from_type_map(params: dict[str, Any], tool: str, changes: list[ReportEntry]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param, spec in params.items():
        prop: dict[str, Any] = {}
        optional = "default" in spec
        kind = spec.get("type")
        if isinstance(kind, str):
            typed, maybe, known = type_from_text(kind)
            optional = optional or maybe
            prop.update(typed)
            _note_type(changes, f"{tool}.{param}", kind, typed, known, optional)
        elif kind is not None:
            prop.update(_fix({"type": kind}, f"{tool}.{param}", changes))
        for key, value in spec.items():
            if key not in {"type", "optional", "required"}:
                prop.setdefault(key, value)
        if spec.get("optional") is True or spec.get("required") is False:
            optional = True
        properties[str(param)] = prop
        if not optional:
            required.append(str(param))
    changes.append(ReportEntry("changed", tool, "parameters map (xLAM style) turned into a JSON Schema object"))
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _note_type(
    changes: list[ReportEntry], item: str, text: str, typed: dict[str, Any], known: bool, optional: bool
) -> None:
    if not known and not typed:
        changes.append(ReportEntry("changed", item, f"type {text!r} is not a type simia knows: left unconstrained"))
        return
    shown = canonical_json(typed) if typed else "any value"
    if not known:
        shown += " (the parts simia does not know are left unconstrained)"
    if typed.get("type") == text and not optional:
        return
    tail = ", not required" if optional else ""
    changes.append(ReportEntry("changed", item, f"type {text!r} -> {shown}{tail}"))


def type_from_text(text: str) -> tuple[dict[str, Any], bool, bool]:
    """A JSON Schema from a Python-style type string: (schema, optional, known).

    `int` -> {"type": "integer"}; `List[str]` -> array of string; `str, optional` and `Optional[str]` -> string,
    optional; `Union[int, str]` -> {"type": ["integer", "string"]}; `Literal['a', 'b']` -> enum; `Any` -> {}.
    """
    kind = text.strip()
    optional = False
    tail = re.fullmatch(r"(.*?)[,\s]+optional", kind, re.IGNORECASE | re.DOTALL)
    if tail:
        kind, optional = tail.group(1).strip(), True
    lower = kind.lower()
    if lower in _ANY:
        return {}, optional, True
    if lower in _PYTHON_TYPES:
        return {"type": _PYTHON_TYPES[lower]}, optional, True
    if "|" in kind and "[" not in kind:
        return _union(_split(kind, "|"), optional)
    generic = _GENERIC.fullmatch(kind)
    if generic is None:
        return {}, optional, False
    outer, inner = generic.group(1).lower(), generic.group(2)
    parts = _split(inner, ",")
    if outer == "optional":
        typed, _, known = type_from_text(inner)
        return typed, True, known
    if outer == "union":
        return _union(parts, optional)
    if outer == "literal":
        try:
            values = [ast.literal_eval(part) for part in parts]
        except (ValueError, SyntaxError):
            return {}, optional, False
        return {"enum": values}, optional, True
    if _PYTHON_TYPES.get(outer) == "array":
        items, _, known = type_from_text(parts[0]) if parts and parts[0] != "..." else ({}, False, True)
        if outer == "tuple" and len(parts) > 1 and parts[-1] != "...":
            shapes = [type_from_text(part) for part in parts]
            if len({canonical_json(shape[0]) for shape in shapes}) > 1:
                prefix = [shape[0] for shape in shapes]
                return {"type": "array", "prefixItems": prefix}, optional, all(s[2] for s in shapes)
        return ({"type": "array", "items": items} if items else {"type": "array"}), optional, known
    if _PYTHON_TYPES.get(outer) == "object":
        members, _, known = type_from_text(parts[1]) if len(parts) == 2 else ({}, False, True)
        return ({"type": "object", "additionalProperties": members} if members else {"type": "object"}), optional, known
    return {}, optional, False


def _union(parts: list[str], optional: bool) -> tuple[dict[str, Any], bool, bool]:
    shapes = [type_from_text(part) for part in parts if part.strip().lower() not in {"none", "nonetype"}]
    optional = optional or len(shapes) < len(parts)
    if not shapes:
        return {"type": "null"}, optional, True
    known = all(shape[2] for shape in shapes)
    if any(not shape[0] for shape in shapes):
        return {}, optional, known
    if len(shapes) == 1:
        return shapes[0][0], optional, known
    if all(shape[0].keys() == {"type"} and isinstance(shape[0]["type"], str) for shape in shapes):
        return {"type": list(dict.fromkeys(shape[0]["type"] for shape in shapes))}, optional, known
    return {"anyOf": [shape[0] for shape in shapes]}, optional, known


def _split(text: str, separator: str) -> list[str]:
    """`text` split at `separator` outside brackets and quotes."""
    parts: list[str] = []
    depth, quote, start = 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[({":
            depth += 1
        elif char in "])}":
            depth -= 1
        elif char == separator and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [part for part in parts if part]


def _fix(node: Any, where: str, changes: list[ReportEntry], *, root: bool = False) -> Any:
    """A JSON Schema with Python type names (ToolACE) made valid: types mapped, `required: true` flags moved."""
    if not isinstance(node, dict):
        return node
    out = dict(node)
    kind = out.get("type")
    if isinstance(kind, str) and kind not in _JSON_TYPES:
        typed, _, known = type_from_text(kind)
        out = {k: v for k, v in out.items() if k != "type"} if "type" not in typed else out
        for key, value in typed.items():
            out[key] = out[key] if key in out and key != "type" else value
        _note_type(changes, where, kind, typed, known, False)
    elif isinstance(kind, list) and any(k not in _JSON_TYPES for k in kind if isinstance(k, str)):
        mapped = [_PYTHON_TYPES.get(k.lower(), k) if isinstance(k, str) else k for k in kind]
        out["type"] = list(dict.fromkeys(mapped))
        changes.append(ReportEntry("changed", where, f"type {kind!r} -> {out['type']!r}"))
    if root and "type" not in out and ("properties" in out or not (out.keys() - {"description", "title"})):
        out["type"] = "object"
        changes.append(ReportEntry("changed", where, "the schema's root was given 'type: object' (MCP requires it)"))
    properties = out.get("properties")
    if isinstance(properties, dict):
        required = list(out["required"]) if isinstance(out.get("required"), list) else []
        fixed: dict[str, Any] = {}
        for name, sub in properties.items():
            if isinstance(sub, dict) and isinstance(sub.get("required"), bool):
                sub = dict(sub)
                if sub.pop("required") and name not in required:
                    required.append(name)
                changes.append(ReportEntry("changed", f"{where}.{name}", "required: true/false moved to 'required'"))
            if isinstance(sub, dict) and isinstance(sub.get("optional"), bool):
                sub = dict(sub)
                if sub.pop("optional") and name in required:
                    required.remove(name)
                changes.append(ReportEntry("changed", f"{where}.{name}", "optional: true turned into not required"))
            fixed[name] = _fix(sub, f"{where}.{name}", changes)
        out["properties"] = fixed
        if required or isinstance(out.get("required"), list):
            out["required"] = required
    if isinstance(out.get("required"), bool):
        del out["required"]  # a flag on a non-object schema: it says nothing JSON Schema can hold
        changes.append(ReportEntry("changed", where, "a required flag outside an object's properties dropped"))
    for key in SUBSCHEMA_MAPS:
        if key != "properties" and isinstance(out.get(key), dict):
            out[key] = {k: _fix(v, f"{where}.{k}", changes) for k, v in out[key].items()}
    for key in SUBSCHEMA_SINGLE:
        if key in out:
            out[key] = _fix(out[key], f"{where}[]" if key == "items" else where, changes)
    for key in SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_fix(v, where, changes) for v in out[key]]
    return out
