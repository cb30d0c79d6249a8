"""MCP fuzzing: generated messages to both kinds of MCP URL in both protocol eras (`bench/fuzz_mcp.py`, a few
hundred cases in CI, `--cases 10000` for the long run), and the bugs it found, each pinned by a plain case."""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2 as httpx
import pytest
from mcp.shared.inbound import encode_header_value

BENCH = Path(__file__).resolve().parents[2] / "bench"
HANDSHAKE = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
MODERN = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call"}
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_few_hundred_generated_mcp_messages_get_a_protocol_error_or_a_result_and_never_corrupt_state() -> None:
    report = _load("fuzz_mcp").run(cases=500, seed=0)
    assert report.failures == {}
    assert report.cases >= 490
    assert {"result", "isError", "jsonrpc_error"} <= set(report.kinds)
    assert report.prompts > 0  # simulator prompts were checked for the canaries


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth - 1):
        value = {"a": value}
    return value


async def _session(http: httpx.AsyncClient, path: str) -> dict[str, str]:
    """Open a handshake-era session (its tool names travel only in the body, so any string can be sent)."""
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    answer = await http.post(path, json=init, headers=HANDSHAKE)
    headers = {**HANDSHAKE, "mcp-session-id": answer.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    await http.post(path, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return headers


async def _call(http: httpx.AsyncClient, path: str, name: str, raw_arguments: str) -> dict[str, Any]:
    """A tools/call whose name and arguments are sent as given (JSON text no SDK client would produce): in the
    2026-07-28 era (its JSON parser takes ~1,000 levels of nesting) unless no header can carry the name."""
    try:
        header = encode_header_value(name)
    except UnicodeEncodeError:
        header = ""
    if 0 < len(header) < 1000:
        headers, meta = {**HANDSHAKE, **MODERN, "mcp-name": header}, f', "_meta": {json.dumps(META)}'
    else:
        headers, meta = await _session(http, path), ""
    params = f'{{"name": {json.dumps(name)}, "arguments": {raw_arguments}{meta}}}'
    body = f'{{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {params}}}'
    response = await http.post(path, content=body.encode(), headers=headers)
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        result: dict[str, Any] = response.json()["result"]
        return result
    data = next(line[5:] for line in response.text.splitlines() if line.startswith("data:") and '"id"' in line)
    result = json.loads(data)["result"]
    return result


@pytest.mark.parametrize(
    ("name", "arguments", "text", "stored"),
    [
        (
            "get_item",
            json.dumps({"name": _nested(40)}),
            "Arguments are nested too deeply (the limit is 32 levels).",
            {"simia/refused_arguments": "not storable (too deep or invalid Unicode)"},
        ),
        (
            "get_item",
            json.dumps({"name": _nested(900)}),
            "Arguments are nested too deeply (the limit is 32 levels).",
            {"simia/refused_arguments": "not storable (too deep or invalid Unicode)"},
        ),
        (
            "get_item",
            '{"name": "\\ud800"}',
            "Arguments must be valid Unicode text (a string holds an unpaired surrogate).",
            {"simia/refused_arguments": "not storable (too deep or invalid Unicode)"},
        ),
        (
            "get_item",
            json.dumps({"name": "x" * 40_000}),
            "Arguments are too large (40011 bytes; the limit is 32768).",
            {"simia/refused_arguments": "40011 bytes"},
        ),
        (  # Python's and pydantic's JSON parsers take NaN and Infinity; stored, they would read back as null
            "get_item",
            '{"name": NaN}',
            "Arguments hold NaN or Infinity at $.name, which JSON does not have: send a number or a string.",
            {"simia/refused_arguments": "NaN or Infinity, which JSON does not have"},
        ),
        (
            "get_item",
            '{"name": "a", "extra": {"deep": [1, -Infinity]}}',
            "Arguments hold NaN or Infinity at $.extra.deep[1], which JSON does not have: send a number or a string.",
            {"simia/refused_arguments": "NaN or Infinity, which JSON does not have"},
        ),
    ],
)
async def test_arguments_no_store_can_hold_are_refused_as_the_agents_error_and_recorded_as_a_note(
    make_server: Any, caplog: pytest.LogCaptureFixture, name: str, arguments: str, text: str, stored: Any
) -> None:
    caplog.set_level(logging.ERROR)
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        result = await _call(http, f"/episodes/{episode['id']}/mcp", name, arguments)
        detail = (await http.get(f"/v1/episodes/{episode['id']}")).json()
    assert result["isError"] is True
    assert result["content"][0]["text"] == text
    assert result["_meta"]["simia/error_kind"] == "agent"
    assert [(e["tool"], e["arguments"]) for e in detail["events"]] == [(name, stored)]
    assert detail["state"] == detail["initial_state"]
    assert server.backend.requests == []  # no model was asked
    assert [r.getMessage() for r in caplog.records] == []


async def test_an_unknown_tool_name_is_repeated_and_stored_short_and_as_valid_unicode(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        path = f"/episodes/{episode['id']}/mcp"
        long_name = await _call(http, path, "y" * 1_000_000, "{}")
        odd = await _call(http, path, "\u202etool\u0000", "{}")
        events = (await http.get(f"/v1/episodes/{episode['id']}")).json()["events"]
    assert long_name["content"][0]["text"].startswith(f"Unknown tool '{'y' * 64}...'. Available tools: list_items")
    assert odd["content"][0]["text"].startswith("Unknown tool '\\u202etool\\x00'. Available tools")
    assert [e["tool"] for e in events] == ["y" * 64 + "...", "\u202etool\u0000"]
