"""The real side of a fidelity run: connecting to the real MCP server (a URL or a stdio command), refusing
a drift between its tools and the world's, recording what an agent calls on it, and turning a failure
after some answers into the line that ends the report."""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import mcp_types as types
from mcp import Client
from simia.sim.engine import ToolCall
from simia.sim.world import World

from ..mcp_import import connect

__all__ = ["RecordingClient", "on_real_server", "tool_drift", "until_failure", "where"]

T = TypeVar("T")


def tool_drift(world: World, real_tools: Sequence[types.Tool]) -> list[str]:
    """Where the world's tools and the real server's differ (names, input schemas)."""
    real = {t.name: t for t in real_tools}
    mine = {t.name: t for t in world.tools}
    drift = [f"the real server lacks {name}" for name in sorted(set(mine) - set(real))]
    drift += [f"the world lacks {name}" for name in sorted(set(real) - set(mine))]
    drift += [
        f"{name}: inputSchema differs"
        for name in sorted(set(mine) & set(real))
        if _plain(mine[name].input_schema) != _plain(real[name].input_schema)
    ]
    return drift


def _plain(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k not in {"$schema", "title"}}


@dataclass
class RecordingClient(Client):
    """An MCP SDK client that keeps every `call_tool` it makes with the real answer: the agent's calls."""

    recorded: list[tuple[ToolCall, types.CallToolResult]] = field(default_factory=list)

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        result = await super().call_tool(name, arguments, *args, **kwargs)
        self.recorded.append((ToolCall(name, dict(arguments or {})), result))
        return result


async def on_real_server(
    world: World,
    real: str | Sequence[str],
    headers: dict[str, str] | None,
    allow_drift: bool,
    play: Callable[[Client], Awaitable[T]],
    client_type: type[Client],
) -> T:
    """Connect to the real server, refuse a tool drift (after the connection is closed, so the error is
    plain), and `play` on it."""
    drift: list[str] = []
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        async with connect(real, headers or {}, {}, errlog, 120.0, [], client_type) as client:
            drift = tool_drift(world, (await client.list_tools()).tools)
            if not drift or allow_drift:
                return await play(client)
    raise ValueError(
        "the world's tools differ from the real server's: " + "; ".join(drift) + " (--allow-drift to go on)"
    )


async def until_failure(work: Awaitable[None], done: Sequence[Any]) -> str:
    """Await `work`; a failure once something is `done` is returned as one line (none: raised as it is)."""
    try:
        await work
    except ValueError:
        raise
    except Exception as exc:  # the SDK and its transports raise many kinds, often grouped
        if not done:
            raise
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions and isinstance(exc.exceptions[0], Exception):
            exc = exc.exceptions[0]
        return f"the real server failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return ""


def where(real: str | Sequence[str]) -> str:
    """The real server as the report names it: its URL, or its stdio command line."""
    return real if isinstance(real, str) else " ".join(real)
