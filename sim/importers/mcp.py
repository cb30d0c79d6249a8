"""A real MCP server's `tools/list` answer (and probed calls) as an `ImportedWorld`.

The listing is read by `simia.clients.mcp_import` (this package never speaks MCP); here it
becomes world data: tools kept in their wire shape, schemas of older JSON Schema drafts
upgraded to 2020-12 (`simia.sim.importers.dialects`), tools simia cannot serve skipped with the
reason (an MCP-invalid or duplicate name, a schema that is not a valid object schema), the
server's instructions as the policy, and probed calls as reference trajectories.

A probe file (`--probe CALLS.jsonl`) holds one call a line:

    {"tool": "get-sum", "arguments": {"a": 1, "b": 2}}
    {"tool": "echo", "arguments": {"message": "hi"}, "trajectory": "greeting", "user": "Say hi back"}

Calls that share a `trajectory` become one example, in file order; others one example each.
A chat `tool` message has no error flag, so the text of an `isError` result is prefixed with
"Error: " (unless it already starts with "error").

The `real_server` the world records keeps the `--header` and `--env` the server needed, never their values:
a value given with `${NAME}` references is written as given (the import itself reads NAME from its
environment), and any other value becomes a reference to a variable named after the header or the
variable (`Authorization: Bearer abc` -> `Bearer ${AUTHORIZATION}`, `API_KEY=abc` -> `${API_KEY}`); the
import report says which variables `simia serve` needs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..schema import validate_instance
from ..world import TOOL_NAME, RealServer, ToolSpec, openai_tool_call
from .dialects import upgrade_schema
from .imported import ImportedWorld, ReportEntry, mcp_tool_name, tool_schema_problem, world_name

__all__ = [
    "ProbeCall",
    "ProbeResult",
    "ServerListing",
    "is_read_only",
    "parse_probe_calls",
    "real_server_record",
    "world_from_listing",
]

_WIRE_FIELDS = {(f.alias or n) for n, f in ToolSpec.model_fields.items()} - {"errors"}


@dataclass(frozen=True)
class ProbeCall:
    """One call to run against the real server (a line of the probe file)."""

    tool: str
    arguments: dict[str, Any]
    line: int
    trajectory: str | None = None
    user: str | None = None


@dataclass(frozen=True)
class ProbeResult:
    """What the real server answered to a probe call: its text content, structured content and error flag."""

    call: ProbeCall
    text: str
    is_error: bool = False
    structured: dict[str, Any] | None = None


@dataclass
class ServerListing:
    """What an MCP server says about itself: serverInfo, instructions, every tool (wire dicts), probed calls."""

    source: str
    tools: list[dict[str, Any]]
    name: str | None = None
    title: str | None = None
    version: str | None = None
    description: str | None = None
    instructions: str | None = None
    probes: list[ProbeResult] = field(default_factory=list)
    report: list[ReportEntry] = field(default_factory=list)
    real_server: dict[str, Any] | None = None  # world.yaml's `real_server` (`real_server_record`)


def real_server_record(
    target: str | Sequence[str], headers: Mapping[str, str], env: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str], list[ReportEntry]]:
    """world.yaml's `real_server` for a server reached at `target` with `headers` (a URL) or `env` (a command):
    each value without a `${NAME}` reference replaced by one (its scheme kept: `Bearer ${AUTHORIZATION}`).

    Returns:
        the record; the values of the variables it introduced (with the import's own environment, what
        `RealServer.resolved` fills the record with to connect); a report note naming the variables
        `simia serve` will need.

    Raises:
        ValueError: a malformed `${...}` in a given value, named.
    """
    record: dict[str, Any] = {"url": target} if isinstance(target, str) else {"command": list(target)}
    given: dict[str, str] = {}
    for kind, values in (("headers", headers), ("env", env)):
        written: dict[str, str] = {}
        for name, value in values.items():
            if "${" in value:
                written[name] = value  # already names where it comes from
                continue
            variable = name if kind == "env" else re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_") or "HEADER"
            scheme = _SCHEME.fullmatch(value) if name.lower() in ("authorization", "proxy-authorization") else None
            written[name] = f"{scheme.group(1)} ${{{variable}}}" if scheme else f"${{{variable}}}"
            given[variable] = scheme.group(2) if scheme else value
        if written:
            record[kind] = written
    try:
        variables = RealServer.model_validate(record).variables()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(["real_server", *(str(part) for part in first["loc"])])
        raise ValueError(f"{where}: {first['msg'].removeprefix('Value error, ')}") from None
    notes = []
    if variables:
        names = ", ".join(variables)
        notes.append(
            ReportEntry(
                "note",
                "real_server",
                f"world.yaml reads {names} from the environment (its headers/env name them, never the values "
                f"given here): set {'them' if len(variables) > 1 else 'it'} where simia serve runs",
            )
        )
    return record, given, notes


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9_-]*) +(\S.*)")


def is_read_only(tool: dict[str, Any]) -> bool:
    """Whether the tool's annotations promise it changes nothing (`readOnlyHint: true`)."""
    annotations = tool.get("annotations")
    return isinstance(annotations, dict) and annotations.get("readOnlyHint") is True


def parse_probe_calls(text: str, source: str = "probe file") -> list[ProbeCall]:
    """Read a probe file (one JSON call a line; blank lines skipped).

    Raises:
        ValueError: a line that is not `{"tool": NAME, "arguments": {...}}`, named by its number.
    """
    calls: list[ProbeCall] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("tool"), str):
            raise ValueError(f'{source}:{number}: expected {{"tool": NAME, "arguments": {{...}}}}')
        unknown = set(row) - {"tool", "arguments", "trajectory", "user"}
        if unknown:
            fields = ", ".join(sorted(unknown))
            raise ValueError(f"{source}:{number}: unknown field(s) {fields}; use tool, arguments, trajectory, user")
        arguments = row.get("arguments", {})
        if not isinstance(arguments, dict):
            raise ValueError(f"{source}:{number}: arguments must be a JSON object")
        trajectory, user = row.get("trajectory"), row.get("user")
        if not isinstance(trajectory, str | None) or not isinstance(user, str | None):
            raise ValueError(f"{source}:{number}: trajectory and user must be strings")
        calls.append(ProbeCall(row["tool"], arguments, number, trajectory, user))
    if not calls:
        raise ValueError(f"{source}: no calls (one JSON object a line)")
    return calls


def check_probe_calls(
    calls: Sequence[ProbeCall], tools: Sequence[dict[str, Any]], *, allow_writes: bool, source: str = "probe file"
) -> None:
    """Refuse calls the world could not keep: unknown tools, arguments that break the inputSchema, and calls
    to tools that may change something (unless `allow_writes`).

    Raises:
        ValueError: the first such call, named by its line.
    """
    by_name: dict[Any, dict[str, Any]] = {}
    for listed in tools:
        by_name.setdefault(listed.get("name"), listed)  # a duplicate name: the first is the one imported
    for call in calls:
        tool = by_name.get(call.tool)
        if tool is None:
            known = ", ".join(sorted(str(n) for n in by_name)) or "(none)"
            raise ValueError(f"{source}:{call.line}: the server has no tool {call.tool!r}; it has: {known}")
        if not allow_writes and not is_read_only(tool):
            raise ValueError(
                f"{source}:{call.line}: {call.tool!r} is not marked read-only (annotations.readOnlyHint); "
                "pass --allow-writes to call it on the real server"
            )
        schema, _ = upgrade_schema(tool.get("inputSchema") or {})
        problems = validate_instance(schema, call.arguments)
        if problems:
            raise ValueError(f"{source}:{call.line}: arguments break the inputSchema of {call.tool!r}: {problems[0]}")


def world_from_listing(listing: ServerListing, *, name: str | None = None) -> ImportedWorld:
    """The world for a server's listing: valid tools kept (schemas upgraded to 2020-12), others reported.

    Args:
        listing: what `simia.clients.mcp_import.read_server` returned.
        name: the world name (default: from the server's title or name).
    """
    title = listing.title or listing.name or "Imported MCP server"
    world = ImportedWorld(
        name=name or world_name(listing.title or listing.name, fallback="mcp-server"),
        title=title,
        description=listing.description or f"Tools imported from the MCP server {title}.",
        version=listing.version or "1",
        policy=listing.instructions or "",
        source=listing.source,
        report=list(listing.report),
        real_server=listing.real_server,
    )
    seen: set[str] = set()
    for raw in listing.tools:
        tool = _tool(raw, seen, world.report)
        if tool is not None:
            seen.add(tool["name"])
            world.tools.append(tool)
    world.examples = _examples(listing.probes, seen, world.report)
    return world


def _tool(raw: dict[str, Any], seen: set[str], report: list[ReportEntry]) -> dict[str, Any] | None:
    name = raw.get("name")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        hint = f" (e.g. {mcp_tool_name(str(name))!r})" if isinstance(name, str) else ""
        report.append(
            ReportEntry(
                "skipped",
                f"tool {name!r}",
                f"not a valid MCP tool name: use 1-128 of A-Z a-z 0-9 _ - .{hint}",
            )
        )
        return None
    item = f"tool {name!r}"
    if name in seen:
        report.append(ReportEntry("skipped", item, "the server lists this name twice; the first is kept"))
        return None
    tool = {k: v for k, v in raw.items() if k in _WIRE_FIELDS}
    dropped = sorted(set(raw) - _WIRE_FIELDS)
    if dropped:
        report.append(ReportEntry("changed", item, f"field(s) simia does not serve dropped: {', '.join(dropped)}"))
    for key in ("inputSchema", "outputSchema"):
        schema = tool.get(key)
        if key == "outputSchema" and schema is None:
            continue
        if not isinstance(schema, dict):
            report.append(ReportEntry("skipped", item, f"{key} is not a JSON object"))
            return None
        upgraded, changes = upgrade_schema(schema)
        problem = tool_schema_problem(upgraded)
        if problem:
            report.append(ReportEntry("skipped", item, f"{key}: {problem}"))
            return None
        tool[key] = upgraded
        report.extend(ReportEntry("changed", item, f"{key}: {change}") for change in changes)
    try:
        ToolSpec.model_validate(tool)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        report.append(ReportEntry("skipped", item, f"{where}: {first['msg']}"))
        return None
    return tool


def _examples(probes: Sequence[ProbeResult], tools: set[str], report: list[ReportEntry]) -> dict[str, dict[str, Any]]:
    """Probed calls as reference trajectories in OpenAI chat format, grouped by `trajectory`."""
    groups: dict[str, list[ProbeResult]] = {}
    for probe in probes:
        if probe.call.tool not in tools:
            report.append(
                ReportEntry("skipped", f"probe line {probe.call.line}", f"tool {probe.call.tool!r} is not in the world")
            )
            continue
        key = probe.call.trajectory or f"probe_{probe.call.line:03d}_{probe.call.tool}"
        groups.setdefault(key, []).append(probe)
    examples: dict[str, dict[str, Any]] = {}
    for key, group in groups.items():
        messages: list[dict[str, Any]] = []
        user = next((p.call.user for p in group if p.call.user), None)
        if user:
            messages.append({"role": "user", "content": user})
        for probe in group:
            call_id = f"call_{probe.call.line}"
            entry = openai_tool_call(call_id, probe.call.tool, probe.call.arguments)
            messages.append({"role": "assistant", "content": None, "tool_calls": [entry]})
            text = probe.text
            if probe.is_error and not text.lower().startswith("error"):
                text = f"Error: {text}"
            messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        examples[mcp_tool_name(key)] = {"messages": messages}
    return examples
