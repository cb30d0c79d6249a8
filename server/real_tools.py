"""Real tools side by side: calls of tools routed `real` go to the world's real MCP server.

A world imported from a real server records where it is (`real_server` in world.yaml); a tool
with `route: real` is answered there instead of by the simulator (`fallback: simulate`: by the
simulator when the real server fails). Each call opens its own MCP SDK client session (streamable
HTTP, or the command over stdio), so nothing is held open between calls and a real server that
restarts costs nothing. The answer becomes an event like any other, with `source: real`; it
changes no simulated state (the real server keeps its own). `routed` decides which calls go there.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment
from simia.sim.errors import SimiaError
from simia.sim.records import EventRecord
from simia.sim.world import RealServer, ToolSpec, World

from .admission import fits

__all__ = ["RealServerFailed", "RealTools", "routed"]


class RealServerFailed(SimiaError):
    """The real server could not answer (unreachable, a protocol error, past its timeout): one line."""


class RealTools:
    """Calls tools on real MCP servers (injected into the episode service, so tests can swap it)."""

    async def call(self, server: RealServer, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """One call on `server`.

        Raises:
            RealServerFailed: no answer (a tool's own error result is an answer, not a failure).
        """
        target: str | StdioServerParameters = server.url or StdioServerParameters(
            command=(server.command or [""])[0], args=(server.command or [])[1:], env=get_default_environment()
        )
        try:
            with anyio.fail_after(server.timeout):
                async with Client(target) as client:
                    return await client.call_tool(tool, arguments)
        except TimeoutError:
            raise RealServerFailed(f"{server.address}: no answer within {server.timeout:g} s") from None
        except Exception as exc:  # the SDK and its transports raise many kinds, often grouped
            raise RealServerFailed(f"{server.address}: {_leaf(exc)}") from None

    async def event(self, world: World, tool: ToolSpec, arguments: dict[str, Any], key: str | None) -> EventRecord:
        """The event of a call answered by `world`'s real server (its error code: the first of the tool's
        codes its error text names).

        Raises:
            RealServerFailed: no answer.
        """
        assert world.real_server is not None  # the loader refuses `route: real` without one
        start = time.monotonic()
        result = await self.call(world.real_server, tool.name, arguments)
        text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
        output = result.structured_content
        if output is None and not result.is_error:
            output = _json_object(text)
        return EventRecord(
            tool=tool.name,
            arguments=arguments,
            output=None if result.is_error else output,
            text=text or json.dumps(output),
            is_error=bool(result.is_error),
            error_code=world.code_named(text, tool) if result.is_error else None,
            error_kind="agent" if result.is_error else None,
            latency_ms=(time.monotonic() - start) * 1000,
            model="real",
            detail=f"answered by the real server {world.real_server.address}",
            request_key=key,
            source="real",
        )


async def routed(
    real: RealTools, world: World, tool: str, arguments: dict[str, Any], key: str | None, *, max_argument_bytes: int
) -> tuple[EventRecord | None, str]:
    """For a tool routed `real` and a call that fits its input schema: the real server's event, or
    (it failed) an infra error event, or with `fallback: simulate` no event and why it fell back. Any
    other call: (None, "")."""
    spec = world.tool(tool)
    if spec is None or spec.route != "real" or not fits(spec.input_schema, arguments, max_argument_bytes):
        return None, ""
    try:
        return await real.event(world, spec, arguments, key), ""
    except RealServerFailed as exc:
        if spec.fallback == "simulate":
            return None, f"the real server failed ({exc})"
        text = "The tool's server did not answer. Try again later."
        failed = EventRecord(
            tool=tool,
            arguments=arguments,
            output=None,
            text=text,
            is_error=True,
            error_code="real_server_failed",
            error_kind="infra",
            detail=str(exc),
            request_key=key,
            source="real",
        )
        return failed, ""


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _leaf(exc: BaseException) -> str:
    """The first leaf of an exception group, as one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__
