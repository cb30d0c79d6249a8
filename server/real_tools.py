"""Real tools side by side: calls of tools routed `real` go to the world's real MCP server.

A world imported from a real server records where it is (`real_server` in world.yaml, with the headers or
environment it needs, secrets as `${NAME}` read from this process's environment at call time); a tool with
`route: real` is answered there instead of by the simulator (`fallback: simulate`: by the simulator when the
real server fails). The answer becomes an event like any other, with `source: real`; it changes no
simulated state (the real server keeps its own). `routed` decides which calls go there.

An episode's first routed call opens a real session (`simia.server.real_sessions`: a process of its own for a
command, an MCP session for a URL) and the episode keeps it until it ends, is swept as idle, or the server
stops, so a stateful server keeps what the episode's earlier calls wrote; two episodes have two sessions,
and a fork gets a fresh one (a real server's state cannot be copied). A session whose server went away is
replaced on the next call, whose event says so. At most `max_sessions` are open: a call that would open
one more fails (`real_server_failed`) until an episode ends; none is closed to make room, since that would
lose the real state of an episode still running.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from simia.sim.records import EventRecord
from simia.sim.world import RealServer, ToolSpec, World

from .admission import fits
from .real_sessions import RealServerFailed, RealSession

__all__ = ["DEFAULT_MAX_REAL_SESSIONS", "RealServerFailed", "RealTools", "routed"]

DEFAULT_MAX_REAL_SESSIONS = 64
"""Real sessions open at once, by default (`simia serve --max-real-sessions`): a command server is a process each."""


class RealTools:
    """Calls tools on real MCP servers, one session per episode (injected into the episode service, so tests can
    swap it).

    Args:
        max_sessions: the most sessions open at once.
        environ: where `${NAME}` in a real server's headers and env is read, at each session's start (default:
            this process's environment, read then: a secret is never copied into settings or logs).
    """

    def __init__(self, *, max_sessions: int = DEFAULT_MAX_REAL_SESSIONS, environ: Mapping[str, str] | None = None):
        self.max_sessions = max_sessions
        self._environ = os.environ if environ is None else environ
        self._sessions: dict[str, RealSession] = {}

    def __len__(self) -> int:
        """How many sessions are open (or ended and not yet replaced)."""
        return len(self._sessions)

    async def call(
        self, episode_id: str, server: RealServer, tool: str, arguments: dict[str, Any]
    ) -> tuple[types.CallToolResult, str]:
        """One call on `server`, in the episode's session (opened on its first call; replaced, when it ended,
        and the second value says why).

        Raises:
            RealServerFailed: no answer (a tool's own error result is an answer, not a failure).
        """
        session = self._sessions.get(episode_id)
        note = ""
        if session is not None and session.ended is not None:
            note = f"in a new session (the previous one ended: {session.ended})"
            await self.close(episode_id)
            session = None
        if session is None:
            if len(self._sessions) >= self.max_sessions:
                raise RealServerFailed(
                    f"{len(self._sessions)} real sessions are open, the cap: end finished episodes "
                    "(POST /v1/episodes/{id}/end) or raise simia serve --max-real-sessions"
                )
            try:
                headers, env = server.resolved(self._environ)
            except ValueError as exc:
                raise RealServerFailed(f"{server.address}: {exc}") from None
            session = self._sessions[episode_id] = RealSession(server, headers, env)
        return await session.call(tool, arguments), note

    async def close(self, episode_id: str) -> None:
        """Close the episode's session, if it has one, and wait until its server is stopped."""
        session = self._sessions.pop(episode_id, None)
        if session is not None:
            await session.close()

    def episodes(self) -> list[str]:
        """The episodes that have a session."""
        return list(self._sessions)

    async def close_all(self) -> None:
        """Close every session (the server stops)."""
        await asyncio.gather(*(self.close(episode_id) for episode_id in list(self._sessions)))

    async def event(
        self, episode_id: str, world: World, tool: ToolSpec, arguments: dict[str, Any], key: str | None
    ) -> EventRecord:
        """The event of a call answered by `world`'s real server in the episode's session (its error code: the
        first of the tool's codes its error text names).

        Raises:
            RealServerFailed: no answer.
        """
        assert world.real_server is not None  # the loader refuses `route: real` without one
        start = time.monotonic()
        result, note = await self.call(episode_id, world.real_server, tool.name, arguments)
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
            detail=f"answered by the real server {world.real_server.address}{f' {note}' if note else ''}",
            request_key=key,
            source="real",
        )


async def routed(
    real: RealTools,
    episode_id: str,
    world: World,
    tool: str,
    arguments: dict[str, Any],
    key: str | None,
    *,
    max_argument_bytes: int,
) -> tuple[EventRecord | None, str]:
    """For a tool routed `real` and a call that fits its input schema: the real server's event (in the episode's
    session), or (it failed) an infra error event, or with `fallback: simulate` no event and why it fell back.
    Any other call: (None, "")."""
    spec = world.tool(tool)
    if spec is None or spec.route != "real" or not fits(spec.input_schema, arguments, max_argument_bytes):
        return None, ""
    try:
        return await real.event(episode_id, world, spec, arguments, key), ""
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
