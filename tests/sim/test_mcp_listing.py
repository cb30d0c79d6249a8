"""A server's tools/list answer as world data: what is kept, upgraded, skipped, and how probes become examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from simia.sim.importers import (
    ProbeCall,
    ProbeResult,
    ServerListing,
    check_probe_calls,
    parse_probe_calls,
    world_from_listing,
)
from simia.sim.importers.imported import ReportEntry, world_name
from simia.sim.world import write_world

ECHO = {
    "name": "echo",
    "title": "Echo",
    "description": "Echo a message.",
    "inputSchema": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"message": {"type": "string"}},
        "required": ["message"],
    },
    "annotations": {"readOnlyHint": True},
    "execution": {"taskSupport": "forbidden"},
    "_meta": {"vendor/x": 1},
}
WRITE = {"name": "write", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}


def listing(*tools: dict[str, Any], **fields: Any) -> ServerListing:
    return ServerListing(source="test", tools=list(tools), **fields)


def test_tools_keep_their_wire_shape_with_schemas_upgraded_and_the_world_header_from_server_info() -> None:
    world = world_from_listing(
        listing(ECHO, WRITE, name="srv", title="My Server", version="2.0", instructions="Be nice.")
    )
    assert (world.name, world.title, world.version, world.policy) == ("my-server", "My Server", "2.0", "Be nice.")
    echo = {**ECHO, "inputSchema": {k: v for k, v in ECHO["inputSchema"].items() if k != "$schema"}}
    assert world.tools == [echo, WRITE]
    assert world.report == [
        ReportEntry("changed", "tool 'echo'", "inputSchema: draft-07 $schema removed (upgraded to 2020-12)")
    ]


@pytest.mark.parametrize(
    ("tool", "reason"),
    [
        ({"name": "has space", "inputSchema": {"type": "object"}}, "not a valid MCP tool name"),
        ({"name": "x" * 129, "inputSchema": {"type": "object"}}, "not a valid MCP tool name"),
        ({"name": "listing", "inputSchema": {"type": "array"}}, "the root must be 'type: object'"),
        ({"name": "typo", "inputSchema": {"type": "objekt"}}, "not a valid JSON Schema 2020-12"),
        (
            {"name": "out", "inputSchema": {"type": "object"}, "outputSchema": {"type": "string"}},
            "outputSchema: the root",
        ),
        ({"name": "ann", "inputSchema": {"type": "object"}, "annotations": ["read-only"]}, "annotations"),
    ],
)
def test_a_tool_simia_cannot_serve_is_skipped_with_the_reason(tool: dict[str, Any], reason: str) -> None:
    world = world_from_listing(listing(tool, WRITE))
    assert [t["name"] for t in world.tools] == ["write"]
    [entry] = world.report
    assert entry.kind == "skipped" and reason in entry.reason and repr(tool["name"]) in entry.item


def test_a_duplicate_name_keeps_the_first_tool_and_unknown_fields_are_dropped() -> None:
    newer = {**WRITE, "futureField": {"a": 1}}
    world = world_from_listing(listing(newer, {**WRITE, "description": "second"}))
    assert world.tools == [WRITE]
    assert [str(e) for e in world.report] == [
        "changed  tool 'write': field(s) simia does not serve dropped: futureField",
        "skipped  tool 'write': the server lists this name twice; the first is kept",
    ]


def test_probe_results_become_reference_trajectories_grouped_by_trajectory() -> None:
    calls = [
        ProbeCall("echo", {"message": "a"}, 1, "chat", "Say a, then b"),
        ProbeCall("echo", {"message": "zz"}, 2),
        ProbeCall("echo", {"message": "b"}, 3, "chat"),
    ]
    results = [
        ProbeResult(calls[0], "a"),
        ProbeResult(calls[1], "too long", is_error=True),
        ProbeResult(calls[2], "b"),
    ]
    world = world_from_listing(listing(ECHO, probes=results))

    def call(n: int, message: str) -> dict[str, Any]:
        fn = {"name": "echo", "arguments": f'{{"message": "{message}"}}'}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"call_{n}", "type": "function", "function": fn}],
        }

    assert world.examples == {
        "chat": {
            "messages": [
                {"role": "user", "content": "Say a, then b"},
                call(1, "a"),
                {"role": "tool", "tool_call_id": "call_1", "content": "a"},
                call(3, "b"),
                {"role": "tool", "tool_call_id": "call_3", "content": "b"},
            ]
        },
        "probe_002_echo": {
            "messages": [call(2, "zz"), {"role": "tool", "tool_call_id": "call_2", "content": "Error: too long"}]
        },
    }


def test_an_imported_world_with_examples_passes_the_loader(tmp_path: Path) -> None:
    call = ProbeCall("echo", {"message": "hi"}, 1)
    world = world_from_listing(listing(ECHO, WRITE, title="T", probes=[ProbeResult(call, "hi")]))
    loaded = write_world(tmp_path / world.name, world.files())
    assert [t.name for t in loaded.tools] == ["echo", "write"] and [e.name for e in loaded.examples] == [
        "probe_001_echo"
    ]
    assert (tmp_path / world.name / "import_report.json").is_file()


def test_probe_files_are_read_line_by_line_with_clear_errors() -> None:
    text = '{"tool": "echo", "arguments": {"message": "hi"}}\n\n{"tool": "echo", "trajectory": "t", "user": "u"}\n'
    assert parse_probe_calls(text) == [
        ProbeCall("echo", {"message": "hi"}, 1),
        ProbeCall("echo", {}, 3, "t", "u"),
    ]
    for bad, message in [
        ("{nope", "probe file:1: not JSON"),
        ('{"name": "echo"}', 'probe file:1: expected {"tool": NAME'),
        ('{"tool": "echo", "args": {}}', "unknown field(s) args"),
        ('{"tool": "echo", "arguments": [1]}', "arguments must be a JSON object"),
        ("\n", "no calls"),
    ]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("{", r"\{")):
            parse_probe_calls(bad)


def test_probe_calls_are_checked_before_any_reaches_the_server() -> None:
    tools = [ECHO, WRITE]
    check_probe_calls([ProbeCall("echo", {"message": "hi"}, 1)], tools, allow_writes=False)
    check_probe_calls([ProbeCall("write", {"text": "x"}, 1)], tools, allow_writes=True)
    for call, message in [
        (ProbeCall("write", {"text": "x"}, 4), ":4: 'write' is not marked read-only"),
        (ProbeCall("nope", {}, 2), ":2: the server has no tool 'nope'; it has: echo, write"),
        (
            ProbeCall("echo", {"message": 3}, 3),
            ":3: arguments break the inputSchema of 'echo': $.message: 3 is not of type",
        ),
    ]:
        with pytest.raises(ValueError) as raised:
            check_probe_calls([call], tools, allow_writes=False)
        assert message in str(raised.value)


@pytest.mark.parametrize(
    ("title", "name"),
    [
        ("Everything Reference Server", "everything-reference-server"),
        ("Swagger Petstore - OpenAPI 3.0", "swagger-petstore-openapi-3.0"),
        ("  ¡Ünïcode!  ", "n-code"),
        ("", "imported"),
        ("---", "imported"),
        ("x" * 100, "x" * 64),
    ],
)
def test_world_names_come_from_titles_and_are_always_url_safe(title: str, name: str) -> None:
    assert world_name(title) == name
