"""MCP endpoints: thin translation between MCP requests and `EpisodeService`.

Two low-level MCP servers, each mounted once:
  - `/episodes/{episode_id}/mcp`: bound to one episode by the URL; every protocol era.
  - `/worlds/{world}/mcp`: each handshake-era session opens a new episode. This URL
    serves the handshake era only (a 2026-07-28 request gets method-not-found, so
    `auto` clients fall back to `initialize` and get a session id): a sessionless
    client could not be told apart from another, and would share its state.
Handlers never raise for tool failures: they become `isError` results. A committed call's result carries, for
a task with checks, the call's shaped reward and the progress after it in `_meta` (`StepRewards`, the same
trackers the trainer protocols use, so each call is folded once and nothing is read again per call).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic_core import to_json
from simia.sim import __version__
from simia.sim.engine import INTERNAL_TEXT
from simia.sim.errors import StoreUnavailable
from simia.sim.records import EventRecord
from simia.sim.verdict import ProgressStep
from simia.sim.wire import (
    META_EPISODE,
    META_ERROR_CODE,
    META_ERROR_KIND,
    META_INJECTED,
    META_PROGRESS,
    META_REWARD,
    META_SEQ,
)
from simia.sim.world import Side, World
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .envelope import checked_message, jsonrpc_error
from .episodes import EpisodeService
from .errors import ApiError, Conflict, http_error
from .step_rewards import StepRewards

__all__ = [
    "DATABASE_TEXT",
    "EpisodeGate",
    "McpEndpoints",
    "WorldGate",
    "answer_call",
    "call_result",
    "failure_result",
    "tool_list",
]

log = logging.getLogger("simia.mcp")
DATABASE_TEXT = "The tool simulator's database is unavailable. Try again."
"""What the agent reads when the database is down or refused the call's commit (`database_unavailable`, `infra`)."""


def tool_list(world: World, side: Side = "agent") -> list[types.Tool]:
    """The tools an MCP client of `world` lists: the agent's, or (`side="user"`) the user's own."""
    return [types.Tool.model_validate(t.mcp_dict()) for t in (world.user_tools if side == "user" else world.tools)]


def _request(ctx: ServerRequestContext[Any]) -> Request:
    request = ctx.request
    if not isinstance(request, Request):
        raise RuntimeError("simia's MCP endpoints are served over HTTP only")
    return request


def principal_of(scope_or_request: Request) -> str:
    return str(getattr(scope_or_request.state, "principal", ""))


def request_key(ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any]) -> str | None:
    """Identifies a retried request: the same JSON-RPC id, session and call means the same request."""
    if ctx.request_id is None:
        return None
    session = _request(ctx).headers.get("mcp-session-id", "")
    try:
        raw = to_json([session, ctx.request_id, name, arguments], fallback=str)
    except ValueError:  # arguments no JSON can carry (too deep, unpaired surrogates): the simulator refuses them
        return None
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def call_result(event: EventRecord, episode_id: str, step: ProgressStep | None = None) -> types.CallToolResult:
    """A committed call as an MCP result; `step` (its progress step, None without checks) adds the call's shaped
    reward and the progress after it to `_meta`."""
    meta: dict[str, Any] = {META_EPISODE: episode_id, META_SEQ: event.seq}
    if step is not None:
        meta[META_REWARD] = step.reward
        meta[META_PROGRESS] = step.progress
    if event.injected:
        meta[META_INJECTED] = event.injected
    if event.is_error:
        meta[META_ERROR_KIND] = event.error_kind or "agent"
        meta[META_ERROR_CODE] = event.error_code or ""
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=event.text)], is_error=True, _meta=meta
        )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=event.text)],
        structured_content=event.output if isinstance(event.output, dict) else None,  # MCP: an object or none
        is_error=False,
        _meta=meta,
    )


def failure_result(text: str, kind: str, code: str, episode_id: str) -> types.CallToolResult:
    meta = {META_EPISODE: episode_id, META_ERROR_KIND: kind, META_ERROR_CODE: code}
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True, _meta=meta)


async def answer_call(
    service: EpisodeService,
    episode_id: str,
    principal: str,
    name: str,
    arguments: dict[str, Any],
    key: str | None = None,
    rewards: StepRewards | None = None,
    *,
    sessionless: bool = False,
    side: Side = "agent",
) -> types.CallToolResult:
    """One tool call through the service, with the wire's one error rule: every failure is an `isError`
    result with a short, true message (API errors keep their code; anything unexpected is logged and
    becomes `internal_error`), and nothing unexpected leaks onto the wire. With `rewards`, a committed call's
    result carries its step reward (see `call_result`). `sessionless`: the request came without a session and with
    a counter id, so once its result is handed back the same request again is a new call
    (`LiveEpisode.answered_sessionless`). `side="user"`: a call of the user's own tool."""
    try:
        event = await service.call(episode_id, principal, name, arguments, request_key=key, side=side)
        if sessionless:
            service.answered_sessionless(episode_id, event)
    except ApiError as exc:
        return failure_result(exc.message, "infra", exc.code, episode_id)
    except StoreUnavailable as exc:  # the database, not the call: the same call may be retried
        log.warning("tool call failed: episode=%s tool=%s: %s", episode_id, name, exc)
        return failure_result(DATABASE_TEXT, "infra", "database_unavailable", episode_id)
    except Exception:
        log.exception("tool call failed: episode=%s tool=%s", episode_id, name)
        return failure_result(INTERNAL_TEXT, "infra", "internal_error", episode_id)
    step = None
    if rewards is not None:
        try:
            step = await rewards.step(episode_id, event)
        except StoreUnavailable as exc:  # the call stands, committed: only its reward could not be read
            log.warning("tool call reward unread: episode=%s seq=%d: %s", episode_id, event.seq, exc)
    return call_result(event, episode_id, step)


class McpEndpoints:
    """Builds the two MCP apps over one `EpisodeService`.

    Args:
        service: the episodes.
        security: the transports' DNS-rebinding settings (allowed hosts and origins).
        max_sessions: the most MCP sessions each app keeps.
        idle_timeout: seconds after which an idle MCP session is closed.
        rewards: the step rewards of the episodes' calls, shared with the trainer protocols of the same app.
    """

    def __init__(
        self,
        service: EpisodeService,
        security: TransportSecuritySettings,
        *,
        max_sessions: int,
        idle_timeout: float,
        rewards: StepRewards,
    ) -> None:
        self.service = service
        self.rewards = rewards
        self.sessions: dict[str, str] = {}  # handshake session id -> episode id (world URLs)
        # handshake session id -> (the principal that opened it, on which world's URL); the oldest are forgotten
        # past the cap
        self.owners: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self.max_owners = 4 * max_sessions
        self._tools = {name: tool_list(world) for name, world in service.worlds.items()}
        self._user_tools = {name: tool_list(world, "user") for name, world in service.worlds.items()}
        schemas: dict[str, list[dict[str, Any]]] = {}
        for world in service.worlds.values():
            for tool in world.tools:
                schemas.setdefault(tool.name, []).append(tool.input_schema)
        unique = {name: found[0] for name, found in schemas.items() if len(found) == 1}
        self.episode_server: Server[Any] = Server(
            "simia",
            version=__version__,
            instructions="Simulated tools of one simia episode.",
            on_list_tools=self._episode_list_tools,
            on_call_tool=self._episode_call_tool,
            get_tool_input_schema=unique.get,
        )
        self.world_server: Server[Any] = Server(
            "simia-world",
            version=__version__,
            instructions="Simulated tools of a simia world; each MCP session is a new episode.",
            on_list_tools=self._world_list_tools,
            on_call_tool=self._world_call_tool,
        )
        self.user_server: Server[Any] = Server(
            "simia-user",
            version=__version__,
            instructions="The user's own tools in one simia episode (a dual-control world: the user's device).",
            on_list_tools=self._user_list_tools,
            on_call_tool=self._user_call_tool,
        )
        common = dict(transport_security=security, max_sessions=max_sessions, session_idle_timeout=idle_timeout)
        self.episode_app: Starlette = self.episode_server.streamable_http_app(**common)  # type: ignore[arg-type]
        self.world_app: Starlette = self.world_server.streamable_http_app(**common)  # type: ignore[arg-type]
        self.user_app: Starlette = self.user_server.streamable_http_app(**common)  # type: ignore[arg-type]
        for app in (
            self.episode_app,
            self.world_app,
            self.user_app,
        ):  # a path under an MCP URL that is not one: the API's 404
            app.add_exception_handler(HTTPException, http_error)

    def forget(self, episode_ids: set[str]) -> None:
        """Drop the session mappings of episodes that are no longer active (their sessions expired)."""
        for session in [s for s, e in self.sessions.items() if e in episode_ids]:
            del self.sessions[session]
            self.owners.pop(session, None)

    def own(self, session: str, principal: str, world: str) -> None:
        """Record that `principal` opened `session` on the URL of `world`."""
        self.owners[session] = (principal, world)
        while len(self.owners) > self.max_owners:
            self.owners.popitem(last=False)

    async def _episode_list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        request = _request(ctx)
        episode = await self.service.get(request.path_params["episode_id"], principal_of(request))
        return types.ListToolsResult(tools=self._tools[episode.world], _meta={META_EPISODE: episode.id})

    async def _episode_call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        request = _request(ctx)
        return await self._call(ctx, request.path_params["episode_id"], principal_of(request), params)

    async def _user_list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        request = _request(ctx)
        episode = await self.service.get(request.path_params["episode_id"], principal_of(request))
        return types.ListToolsResult(tools=self._user_tools[episode.world], _meta={META_EPISODE: episode.id})

    async def _user_call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        request = _request(ctx)
        return await self._call(ctx, request.path_params["episode_id"], principal_of(request), params, side="user")

    async def _world_episode(self, ctx: ServerRequestContext[Any]) -> str:
        request = _request(ctx)
        session = request.headers.get("mcp-session-id")
        if not session:
            raise Conflict("world URLs need an MCP session; initialize first or use /episodes/{id}/mcp")
        episode_id = self.sessions.get(session)
        if episode_id is None:
            episode = await self.service.create(request.path_params["world"], principal=principal_of(request))
            self.rewards.opened(episode)
            episode_id = self.sessions[session] = episode.id
            log.info("session %s... opened episode %s on world %s", session[:8], episode.id, episode.world)
        return episode_id

    async def _world_list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        world = _request(ctx).path_params["world"]
        episode_id = await self._world_episode(ctx)
        return types.ListToolsResult(tools=self._tools[world], _meta={META_EPISODE: episode_id})

    async def _world_call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            episode_id = await self._world_episode(ctx)
        except ApiError as exc:
            return failure_result(exc.message, "infra", exc.code, "")
        except StoreUnavailable:
            return failure_result(DATABASE_TEXT, "infra", "database_unavailable", "")
        return await self._call(ctx, episode_id, principal_of(_request(ctx)), params)

    async def _call(
        self,
        ctx: ServerRequestContext[Any],
        episode_id: str,
        principal: str,
        params: types.CallToolRequestParams,
        side: Side = "agent",
    ) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        key = request_key(ctx, params.name, arguments)
        # Without a session, an integer id is a per-connection counter (a client per call sends 1 every time): a
        # request with it is a new call once its answer was handed back. A string id (a UUID) is the client's own
        # unique request id, so a resend of it is a retry whatever happened to the first answer.
        sessionless = "mcp-session-id" not in _request(ctx).headers and isinstance(ctx.request_id, int)
        return await answer_call(
            self.service,
            episode_id,
            principal,
            params.name,
            arguments,
            key,
            self.rewards,
            sessionless=sessionless,
            side=side,
        )


class EpisodeGate:
    """In front of `/episodes/{id}/mcp`: unknown episodes and other principals' episodes get a 404."""

    def __init__(self, app: ASGIApp, service: EpisodeService) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            episode_id = scope.get("path_params", {}).get("episode_id", "")
            principal = str(scope.get("state", {}).get("principal", ""))
            try:
                owned = await self.service.owns(episode_id, principal)
            except StoreUnavailable as exc:  # fail closed, and say to retry, as the API's routes do
                log.warning("episode %s: ownership check failed: %s", episode_id, exc)
                body = {
                    "error": {"code": "database_unavailable", "message": "the database is unavailable; retry shortly"}
                }
                await JSONResponse(body, status_code=503)(scope, receive, send)
                return
            if not owned:
                body = {
                    "error": {
                        "code": "not_found",
                        "message": f"no episode {episode_id!r}; create one with POST /v1/episodes",
                    }
                }
                await JSONResponse(body, status_code=404)(scope, receive, send)
                return
            checked = await checked_message(scope, receive, send)
            if checked is None:
                return
            receive = checked
        await self.app(scope, receive, send)


class WorldGate:
    """In front of `/worlds/{world}/mcp`: unknown worlds 404; the 2026-07-28 era is refused (see module doc);
    a session belongs to the principal that opened it and to the world URL it was opened on (anyone else, another
    world's URL, or a session it no longer knows, gets a 404); closing a session (DELETE) ends its episode."""

    def __init__(self, app: ASGIApp, endpoints: McpEndpoints) -> None:
        self.app = app
        self.endpoints = endpoints

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        world = scope.get("path_params", {}).get("world", "")
        if world not in self.endpoints.service.worlds:
            known = ", ".join(sorted(self.endpoints.service.worlds))
            body = {"error": {"code": "not_found", "message": f"unknown world {world!r}; loaded worlds: {known}"}}
            await JSONResponse(body, status_code=404)(scope, receive, send)
            return
        checked = await checked_message(scope, receive, send)
        if checked is None:
            return
        receive = checked
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        version = headers.get("mcp-protocol-version")
        if scope["method"] == "POST" and version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await self._refuse_modern(scope, receive, send)
            return
        principal = str(scope.get("state", {}).get("principal", ""))
        session = headers.get("mcp-session-id")
        if session and self.endpoints.owners.get(session) != (principal, world):  # another's, or another world's
            body = {"error": {"code": "not_found", "message": "no such MCP session; initialize a new one"}}
            await JSONResponse(body, status_code=404)(scope, receive, send)
            return
        if scope["method"] == "DELETE" and session:  # ended before the answer: a client that reads it next sees it
            self.endpoints.owners.pop(session, None)
            episode_id = self.endpoints.sessions.pop(session, None)
            if episode_id is not None:
                try:
                    await self.endpoints.service.end(episode_id, principal)
                except (ApiError, StoreUnavailable):
                    log.warning("could not end episode %s of closed session", episode_id)
                self.endpoints.rewards.forget(episode_id)
        if session:
            await self.app(scope, receive, send)
        else:
            await self.app(scope, receive, self._recording(send, principal, world))

    def _recording(self, send: Send, principal: str, world: str) -> Send:
        """`send`, noting the owner and world of a session the SDK opens in its answer (an `initialize`)."""

        async def recording(message: Message) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", []):
                    if name.lower() == b"mcp-session-id":
                        self.endpoints.own(value.decode("latin-1"), principal, world)
            await send(message)

        return recording

    async def _refuse_modern(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a 2026-07-28 message (its envelope already checked, `checked_message`): a request gets
        method-not-found, a notification or an answer 202."""
        message = json.loads(await Request(scope, receive).body())
        if "id" not in message or "method" not in message:
            await Response(status_code=202)(scope, receive, send)
            return
        message_text = (
            "Method not found: this world URL serves MCP sessions (protocol 2025-11-25 and earlier); "
            "connect with a session, or create an episode with POST /v1/episodes and use its mcp_url"
        )
        # 404, as the SDK's own 2026-07-28 transport answers method-not-found
        await jsonrpc_error(-32601, message_text, request_id=message["id"], status=404)(scope, receive, send)
