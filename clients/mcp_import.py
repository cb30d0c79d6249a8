"""Read a real MCP server for import: serverInfo, instructions, every page of `tools/list`, probed calls.

The server is reached with the MCP SDK client, over streamable HTTP (a URL, with optional
headers) or stdio (a command it launches). What it answers becomes a
`simia.sim.importers.mcp.ServerListing`; `simia.sim.importers.mcp.world_from_listing` turns that
into world files. Every failure is an `ImportSourceError` with one line that says what happened.

    listing = await read_server("http://127.0.0.1:3001/mcp", headers={"Authorization": "Bearer ${GITHUB_TOKEN}"})
    listing = await read_server(["npx", "-y", "@modelcontextprotocol/server-everything"])

The listing's `real_server` (world.yaml's) keeps the headers and environment variables the server was read
with as `${NAME}` references, never their values (`simia.sim.importers.mcp.real_server_record`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, TextIO

import anyio
import httpx2 as httpx
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from simia.sim.errors import ImportSourceError
from simia.sim.importers import (
    ProbeCall,
    ProbeResult,
    ReportEntry,
    ServerListing,
    check_probe_calls,
    real_server_record,
)
from simia.sim.world import RealServer

__all__ = ["MAX_PAGES", "connect", "read_server"]

MAX_PAGES = 1000
"""tools/list pages read at most: a server whose cursor never ends cannot hang an import."""


async def read_server(
    target: str | Sequence[str],
    *,
    headers: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    probe: Sequence[ProbeCall] = (),
    allow_writes: bool = False,
    timeout: float = 60.0,
    environ: Mapping[str, str] | None = None,
) -> ServerListing:
    """Connect, read everything an import needs, run the probe calls, disconnect.

    Args:
        target: a streamable HTTP URL, or a command and its arguments (stdio).
        headers: extra HTTP headers (e.g. Authorization); URL targets only. `${NAME}` in a value is read from
            `environ`, and written to world.yaml as given; any other value is written as a reference.
        env: extra environment variables for a stdio server (on top of the SDK's safe defaults); likewise.
        probe: calls to run on the real server; their results become reference trajectories.
        allow_writes: also run probe calls on tools not marked `readOnlyHint: true`.
        timeout: seconds for the whole exchange.
        environ: where `${NAME}` references are read (default: this process's environment).

    Raises:
        ImportSourceError: unreachable server, a failing handshake or tools/list, a bad probe call, a timeout,
            a malformed or unset `${NAME}`.
    """
    where = target if isinstance(target, str) else " ".join(target)
    try:
        record, given, notes = real_server_record(target, headers or {}, env or {})
        server = RealServer.model_validate(record)
        headers, env = server.resolved({**(os.environ if environ is None else environ), **given})
    except ValueError as exc:
        raise ImportSourceError(str(exc)) from None
    refused: list[str] = []  # HTTP statuses >= 400 (the SDK's error for them does not carry the status)
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            with anyio.fail_after(timeout):
                async with connect(target, headers, env, errlog, timeout, refused) as client:
                    listing = await _listing(client, where)
                    listing.real_server = record
                    listing.report.extend(notes)
                    if probe:
                        try:
                            check_probe_calls(probe, listing.tools, allow_writes=allow_writes)
                        except ValueError as exc:
                            raise ImportSourceError(str(exc)) from None
                        listing.probes = await _run_probes(client, probe, listing.report)
                    return listing
        except ImportSourceError:
            raise
        except Exception as exc:  # the SDK and transports raise many kinds; the user gets one line
            ours = next((leaf for leaf in _leaves(exc) if isinstance(leaf, ImportSourceError)), None)
            said = refused[-1] if refused else _last_line(errlog)
            raise (ours or ImportSourceError(_explain(exc, where, timeout, said, http=bool(refused)))) from None


@contextlib.asynccontextmanager
async def connect(
    target: str | Sequence[str],
    headers: Mapping[str, str],
    env: Mapping[str, str],
    errlog: TextIO,
    timeout: float,
    refused: list[str],
    client_type: type[Client] = Client,
) -> AsyncIterator[Client]:
    """An MCP SDK client session on a real server: a streamable HTTP URL (with `headers`; HTTP refusals are
    noted in `refused`) or a command started over stdio (with `env`; its stderr goes to `errlog`), as a
    `client_type` (a `Client` subclass that records, for instance)."""
    if isinstance(target, str):

        async def note(response: httpx.Response) -> None:
            if response.status_code >= 400:
                refused.append(f"HTTP {response.status_code} {response.reason_phrase}")

        async with (
            httpx.AsyncClient(headers=dict(headers), timeout=timeout, event_hooks={"response": [note]}) as http,
            client_type(streamable_http_client(target, http_client=http)) as client,
        ):
            yield client
        return
    if not target:
        raise ImportSourceError("no command given; use: simia import mcp -- COMMAND ARGS...")
    command, *args = target
    params = StdioServerParameters(command=command, args=args, env={**get_default_environment(), **env})
    async with client_type(stdio_client(params, errlog=errlog)) as client:
        yield client


async def _listing(client: Client, where: str) -> ServerListing:
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += [tool.model_dump(by_alias=True, exclude_none=True) for tool in page.tools]
        cursor = page.next_cursor
        if cursor is None:
            break
        if cursor in seen:
            raise ImportSourceError(f"{where}: tools/list returned the cursor {cursor!r} twice; the listing never ends")
        seen.add(cursor)
    else:
        raise ImportSourceError(f"{where}: tools/list has more than {MAX_PAGES} pages")
    info = client.server_info
    return ServerListing(
        source=where,
        tools=tools,
        name=info.name if info else None,
        title=info.title if info else None,
        version=info.version if info else None,
        description=getattr(info, "description", None) if info else None,
        instructions=client.instructions,
    )


async def _run_probes(client: Client, calls: Sequence[ProbeCall], report: list[ReportEntry]) -> list[ProbeResult]:
    results: list[ProbeResult] = []
    for call in calls:
        try:
            result = await client.call_tool(call.tool, call.arguments)
        except MCPError as exc:
            report.append(ReportEntry("skipped", f"probe line {call.line}", f"the server refused the call: {exc}"))
            continue
        results.append(
            ProbeResult(call, _result_text(result), bool(result.is_error), result.structured_content or None)
        )
    return results


def _result_text(result: types.CallToolResult) -> str:
    """The tool message an agent would see: the text content (other content named), or the structured JSON."""
    parts: list[str] = []
    for item in result.content:
        if isinstance(item, types.TextContent):
            parts.append(item.text)
        elif isinstance(item, types.ImageContent | types.AudioContent):
            parts.append(f"[{item.type} {item.mime_type}]")
        elif isinstance(item, types.ResourceLink):
            parts.append(f"[resource link {item.uri}]")
        elif isinstance(item, types.EmbeddedResource):
            resource = item.resource
            text = getattr(resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[resource {resource.uri}]")
        else:
            parts.append(f"[{getattr(item, 'type', 'content')}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _explain(exc: BaseException, where: str, timeout: float, stderr: str, *, http: bool = False) -> str:
    """One line for an exception out of the SDK: the most telling leaf of an exception group."""
    leaves = _leaves(exc)
    said = f" (server said: {stderr})" if stderr else ""
    for leaf in leaves:
        if isinstance(leaf, MCPError) and http:
            return f"{where}: the server refused the request: {stderr} (check the URL, and --header for credentials)"
        if isinstance(leaf, MCPError):
            return f"{where}: the server answered with an error: {leaf}{said}"
    for leaf in leaves:
        if isinstance(leaf, httpx.HTTPStatusError):
            status = leaf.response.status_code
            return f"{where}: HTTP {status} {leaf.response.reason_phrase} (check the URL and any --header it needs)"
        if isinstance(leaf, httpx.TransportError):
            return f"cannot reach {where}: {type(leaf).__name__} {leaf} (is the server running at that URL?)"
        if isinstance(leaf, FileNotFoundError):
            return f"cannot start {where!r}: {leaf.strerror}: {leaf.filename} (is the command on PATH?)"
        if isinstance(leaf, TimeoutError):
            return f"{where}: no answer within {timeout:g} s{said} (pass --timeout to wait longer)"
        if isinstance(leaf, anyio.ClosedResourceError | anyio.EndOfStream | anyio.BrokenResourceError):
            return f"{where}: the server closed the connection{said}"
    leaf = leaves[0]
    text = " ".join(str(leaf).split()) or type(leaf).__name__
    return f"{where}: {type(leaf).__name__}: {text[:300]}{said}"


def _last_line(errlog: TextIO) -> str:
    """The last non-empty line a stdio server wrote to stderr (what it said before failing)."""
    try:
        errlog.seek(0)
        lines = [line.strip() for line in errlog.read()[-4000:].splitlines() if line.strip()]
    except (OSError, ValueError):
        return ""
    return lines[-1][:200] if lines else ""
