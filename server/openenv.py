"""OpenEnv environments: every world at `/openenv/{world}`, with the routes of openenv 0.10's `create_app`, so
openenv's own clients (`MCPToolClient`, `GenericEnvClient`) and the trainers built on them drive simia episodes.

    POST /reset      {"task"?, "seed"?, "perturbation"?}: a new episode; its observation carries the task's instruction
    POST /step       {"action", "episode_id", "request_id"?}: one action of that episode (HTTP is stateless)
    GET  /state      ?episode_id=: {"episode_id", "step_count"}
    GET  /schema, /metadata, /health
    POST /mcp        JSON-RPC: openenv/session/create and /close, tools/list, tools/call (with `session_id`)
    WS   /ws         reset / step / state / mcp / close messages on one session (`?session_id=` attaches to a
                     session made over /mcp, as MCPToolClient does)
    WS   /mcp        JSON-RPC on a session of its own

A session holds one episode at a time: `reset` starts one (ending the session's previous episode), a tool call
before any reset starts one without a task, and closing the session (or its own socket) ends it. Actions are
openenv's `{"type": "list_tools"}` and `{"type": "call_tool", "tool_name", "arguments"}`, and simia's
`{"type": "end", "transcript"?}`, which ends and judges the episode: its observation has `done` and the reward
(`Verdict.training_reward()`, null when masked). A call's step answer carries the call's shaped reward as its
`reward` (`StepRewards`: the progress its state change made on the task's checks, with the progress after it in
the metadata; null for an episode without checks). A failed call is a `CallToolObservation` with `error` (openenv's
`tool_not_found`, `invalid_args`, `execution_error`) and the whole result, as openenv's MCP environments answer one;
a repeated call (the same `request_id` of HTTP /step or of an action's `metadata`, or the same JSON-RPC id in a
session) is answered from its committed event.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import to_json
from simia.sim.errors import SimiaError, StoreUnavailable
from simia.sim.perturbation import Perturbation
from simia.sim.records import EpisodeRecord, EventRecord
from simia.sim.verdict import ProgressStep
from simia.sim.wire import META_EPISODE, META_ERROR_CODE, META_ERROR_KIND, META_INJECTED, META_SEQ, EndEpisode, Seed
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route, Router, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from ._body import MAX_BODY
from .episodes import EpisodeService
from .errors import ApiError, BadRequest, Conflict, EpisodeClosed, NotFound
from .requests import json_body, parse_body
from .sessions import SessionBook, TooManySessions
from .settings import ServerSettings
from .step_rewards import META_PROGRESS, StepRewards

__all__ = [
    "Action",
    "CallToolAction",
    "EndAction",
    "ListToolsAction",
    "OpenEnv",
    "OpenEnvState",
    "ResetRequest",
    "StepRequest",
    "UpgradeRequired",
]

log = logging.getLogger("simia.openenv")


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    metadata: dict[str, Any] = Field(
        default_factory=dict, description="`request_id` here makes a retried call answer its committed result."
    )


class ListToolsAction(_Action):
    """openenv's `ListToolsAction`: the world's tools."""

    type: Literal["list_tools"]


class CallToolAction(_Action):
    """openenv's `CallToolAction`: one tool call of the episode."""

    type: Literal["call_tool"]
    tool_name: str = Field(max_length=1000)
    arguments: dict[str, Any] = Field(default_factory=dict)


class EndAction(_Action):
    """simia's final action: end the episode and judge it (`transcript`: the agent's OpenAI chat messages)."""

    type: Literal["end"]
    transcript: list[dict[str, Any]] | None = None


Action = Annotated[ListToolsAction | CallToolAction | EndAction, Field(discriminator="type")]
_ACTION: TypeAdapter[ListToolsAction | CallToolAction | EndAction] = TypeAdapter(Action)


class OpenEnvState(BaseModel):
    """What `state` answers."""

    episode_id: str | None = None
    step_count: int = 0


class ResetRequest(BaseModel):
    """`reset`'s arguments: the episode's task and seed. Other keys are dropped, as openenv's server drops the keyword
    arguments an environment's `reset` does not take (a trainer may pass a whole dataset row)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    task: str | None = Field(default=None, max_length=1024, description="A task id of the world.")
    seed: Seed | None = Field(default=None, description="Makes the simulation reproducible.")
    perturbation: Perturbation | None = Field(default=None, description="Inject realistic faults into its calls.")
    episode_id: str | None = Field(default=None, max_length=255, description="Ignored: simia names its episodes.")


class StepRequest(BaseModel):
    """HTTP `step`: one action of an episode (HTTP carries no session: name the episode `/reset` opened)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    action: dict[str, Any] = Field(description="An action: list_tools, call_tool (tool_name, arguments) or end.")
    episode_id: str | None = Field(default=None, max_length=200, description="From /reset's observation.")
    request_id: str | None = Field(
        default=None, max_length=255, description="A retried step with the same id answers its committed result."
    )
    timeout_s: float | None = Field(default=None, gt=0, description="Accepted for openenv clients; unused.")


_TOOL_ERRORS = {"unknown_tool": "tool_not_found", "invalid_arguments": "invalid_args"}
"""openenv's `ToolErrorType` of a failed call's error code (any other failure is an `execution_error`)."""


@dataclass
class _Session:
    id: str
    principal: str
    world: str
    episode_id: str | None = None
    attached: bool = False
    closing: bool = False


class UpgradeRequired(ApiError):
    """A plain HTTP request on a WebSocket's path."""

    status = 426
    code = "upgrade_required"


class _Socket(WebSocketRoute):
    """A WebSocket route that answers a plain HTTP request on its path with a 426 in the API's error shape (a 404
    would say the documented route does not exist)."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http":
            return super().matches({**scope, "type": "websocket"})
        return super().matches(scope)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raise UpgradeRequired(f"{scope['path']} is a WebSocket: open it with a WebSocket client (ws://)")
        await super().handle(scope, receive, send)


class _RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


_PARSE_ERROR, _INVALID_REQUEST, _METHOD_NOT_FOUND, _INVALID_PARAMS, _SERVER_ERROR = (
    -32700,
    -32600,
    -32601,
    -32602,
    -32000,
)


class OpenEnv:
    """The OpenEnv servers of every world, over one `EpisodeService` (mount `routes` at `/openenv/{world}`).

    Args:
        service: the episodes.
        settings: the server's (its tokens and allowed hosts guard the WebSockets, which the HTTP guard does not
            see; `max_sessions` bounds the sessions kept).
    """

    def __init__(self, service: EpisodeService, settings: ServerSettings, rewards: StepRewards | None = None) -> None:
        self.service = service
        self.settings = settings
        self.rewards = rewards if rewards is not None else StepRewards(service)  # the app's: one per episode
        self.sessions: SessionBook[_Session] = SessionBook(
            "OpenEnv sessions",
            total=4 * settings.max_sessions,
            per_principal=settings.max_sessions_per_principal,
            flag="--max-sessions-per-principal",
            idle=lambda session: not session.attached and session.episode_id is None,
        )
        self._hosts, self._origins = settings.hosts(), settings.origins()
        self._sockets: dict[WebSocket, _Session] = {}  # the open WebSockets, and the session each serves
        self.routes = Router(
            routes=[
                Route("/reset", self.http_reset, methods=["POST"]),
                Route("/step", self.http_step, methods=["POST"]),
                Route("/state", self.http_state, methods=["GET"]),
                Route("/schema", self.schema, methods=["GET"]),
                Route("/metadata", self.metadata, methods=["GET"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/mcp", self.http_mcp, methods=["POST"]),
                _Socket("/ws", self.ws),
                _Socket("/mcp", self.ws_mcp),
            ]
        )

    async def _reset(self, session: _Session | None, world: str, principal: str, data: Any) -> dict[str, Any]:
        if isinstance(data, ResetRequest):
            params = data
        elif isinstance(data, dict):
            try:
                params = ResetRequest.model_validate(data, strict=True)
            except ValidationError as exc:
                raise BadRequest(f"reset: {_problem(exc)}") from None
        else:
            raise BadRequest("reset arguments must be a JSON object")
        episode = await self.service.create(
            world, task=params.task, seed=params.seed, principal=principal, perturbation=params.perturbation
        )
        self.rewards.opened(episode)
        if session is not None:
            previous, session.episode_id = session.episode_id, episode.id
            if previous is not None:
                await self._close_episode(previous, principal)
        spec = self.service.world(world).task(params.task) if params.task else None
        meta = {META_EPISODE: episode.id, "world": world, "task": params.task, "seed": params.seed}
        observation = {
            "episode_id": episode.id,
            "world": world,
            "task": params.task,
            "instruction": spec.instruction if spec is not None else None,
            "metadata": meta,
        }
        return {"observation": observation, "reward": None, "done": False, "metadata": meta}

    async def _step(
        self, world: str, principal: str, episode_id: str | None, data: Any, key: str | None = None
    ) -> dict[str, Any]:
        """One action; `episode_id` None only for `list_tools` (a call opens an episode through its session first)."""
        try:
            action = _ACTION.validate_python(data)
        except ValidationError as exc:
            raise BadRequest(
                f"action: {_problem(exc)}; actions are list_tools, call_tool (tool_name, arguments) and end"
            ) from None
        if isinstance(action, ListToolsAction):
            return self._tools(world)
        if episode_id is None:
            raise BadRequest("no episode: reset first (its observation names the episode_id)")
        request_id = action.metadata.get("request_id")
        if request_id is not None:
            key = _key("openenv-step", episode_id, str(request_id))
        if isinstance(action, CallToolAction):
            event = await self.service.call(episode_id, principal, action.tool_name, action.arguments, request_key=key)
            return _call_observation(action.tool_name, event, episode_id, await self.rewards.step(episode_id, event))
        return await self._end(episode_id, principal, action.transcript)

    def _tools(self, world: str) -> dict[str, Any]:
        tools = [
            {"name": t.name, "description": t.description or "", "input_schema": t.input_schema}
            for t in self.service.world(world).tools
        ]
        return {"observation": {"tools": tools, "metadata": {}}, "reward": None, "done": False}

    async def _end(self, episode_id: str, principal: str, transcript: list[dict[str, Any]] | None) -> dict[str, Any]:
        try:
            EndEpisode(transcript=transcript)
        except ValueError as exc:
            raise BadRequest(f"end: {_problem(exc)}") from None
        # judged once: a repeated end with the same transcript (or none) answers the stored verdict, one with another
        # transcript is a `Conflict` (409), as `POST /v1/episodes/{id}/end` answers
        episode = await self._end_episode(episode_id, principal, transcript)
        self.rewards.forget(episode_id)
        verdict = episode.verdict
        reward = verdict.training_reward() if verdict is not None else None
        meta = {META_EPISODE: episode_id, "verdict_status": verdict.status if verdict is not None else None}
        observation = {
            "episode_id": episode_id,
            "verdict": verdict.as_json() if verdict is not None else None,
            "metadata": meta,
        }
        return {"observation": observation, "reward": reward, "done": True, "metadata": meta}

    async def _end_episode(
        self, episode_id: str, principal: str, transcript: list[dict[str, Any]] | None = None
    ) -> EpisodeRecord:
        try:
            return await self.service.end(episode_id, principal, transcript)
        except (StoreUnavailable, ApiError):
            raise
        except SimiaError as exc:
            raise BadRequest(str(exc)) from None

    async def _close_episode(self, episode_id: str, principal: str) -> None:
        """End a session's episode when the session moves on or closes (judged, as closing a world URL's session
        judges its episode); a failure is logged, never raised into the client's next action."""
        try:
            episode = await self.service.get(episode_id, principal)
            if episode.status == "active":
                await self._end_episode(episode_id, principal)
            self.rewards.forget(episode_id)
        except (ApiError, StoreUnavailable) as exc:
            log.warning("could not end episode %s of a closed OpenEnv session: %s", episode_id, exc)

    async def _state(self, episode_id: str | None, principal: str) -> dict[str, Any]:
        if episode_id is None:
            return OpenEnvState().model_dump()
        episode = await self.service.get(episode_id, principal)
        return OpenEnvState(episode_id=episode.id, step_count=episode.seq).model_dump()

    async def abandoned(self, episode_ids: set[str]) -> int:
        """Close the WebSockets whose episode the idle sweep abandoned (1001, saying why): a socket holds no episode
        nobody uses. Returns how many were closed."""
        closed = 0
        for websocket, session in list(self._sockets.items()):
            if session.episode_id in episode_ids:
                with contextlib.suppress(RuntimeError):  # it closed meanwhile
                    await websocket.close(code=1001, reason="its episode was abandoned after the idle timeout")
                    closed += 1
        return closed

    def _open_session(self, world: str, principal: str) -> _Session:
        session = _Session("os_" + secrets.token_urlsafe(24), principal, world)
        self.sessions.add(session.id, principal, session)  # room comes from this principal's own idle sessions
        return session

    async def _socket_session(self, websocket: WebSocket, world: str, principal: str) -> _Session | None:
        """A new session for a WebSocket; None (the socket told why and closed: try again later) when the principal
        is at its limit of sessions with none idle to give up."""
        try:
            return self._open_session(world, principal)
        except TooManySessions as exc:
            await _send_error(websocket, exc.message, "CAPACITY_REACHED", retry_after=exc.retry_after)
            await websocket.close(code=1013)
            return None

    def _session(self, session_id: Any, world: str, principal: str) -> _Session:
        session = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None or session.principal != principal or session.world != world:
            raise NotFound(f"Unknown session_id: {session_id}; create one with openenv/session/create")
        return session

    async def _episode_of(self, session: _Session) -> str:
        """The session's episode; a tool call before any reset opens one without a task (the session is the
        environment, as a world URL's MCP session is)."""
        if session.episode_id is None:
            episode = await self.service.create(session.world, principal=session.principal)
            self.rewards.opened(episode)
            session.episode_id = episode.id
        return session.episode_id

    async def _close_session(self, session: _Session) -> None:
        self.sessions.pop(session.id)
        if session.episode_id is not None:
            await self._close_episode(session.episode_id, session.principal)

    async def _rpc(self, message: Any, world: str, principal: str, bound: _Session | None) -> dict[str, Any]:
        request_id = message.get("id") if isinstance(message, dict) else None
        try:
            if not (
                isinstance(message, dict)
                and message.get("jsonrpc") == "2.0"
                and isinstance(message.get("method"), str)
                and (request_id is None or (isinstance(request_id, str | int) and not isinstance(request_id, bool)))
            ):
                raise _RpcError(_INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 request")
            params = message.get("params", {})
            if not isinstance(params, dict):
                raise _RpcError(_INVALID_PARAMS, "Params must be an object")
            result = await self._rpc_method(message["method"], params, request_id, world, principal, bound)
        except _RpcError as exc:
            return _rpc_error(request_id, exc.code, exc.message, exc.data)
        except NotFound as exc:
            return _rpc_error(request_id, _INVALID_PARAMS, exc.message, {"code": exc.code})
        except ApiError as exc:
            return _rpc_error(request_id, _SERVER_ERROR, exc.message, {"code": exc.code})
        except StoreUnavailable:
            return _rpc_error(
                request_id,
                _SERVER_ERROR,
                "the database is unavailable; retry shortly",
                {"code": "database_unavailable"},
            )
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    async def _rpc_method(
        self,
        method: str,
        params: dict[str, Any],
        request_id: str | int | None,
        world: str,
        principal: str,
        bound: _Session | None,
    ) -> Any:
        if method == "openenv/session/create":
            session = bound or self._open_session(world, principal)
            return {"session_id": session.id}
        if method == "tools/list":
            return {"tools": [tool.mcp_dict() for tool in self.service.world(world).tools]}
        if method == "openenv/session/close":
            target = params.get("session_id")
            if not target:
                raise _RpcError(_INVALID_PARAMS, "Invalid params - 'session_id' is required")
            session = self._session(target, world, principal)
            if session is bound:
                raise _RpcError(_INVALID_REQUEST, "Cannot close active WebSocket-managed session via MCP method")
            if session.attached:  # its WebSocket closes it when it detaches
                session.closing = True
                return {"session_id": session.id, "closed": False, "closing": True}
            await self._close_session(session)
            return {"session_id": session.id, "closed": True}
        if method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments", {})
            if not isinstance(name, str) or not name:
                raise _RpcError(_INVALID_PARAMS, "Missing 'name' in params")
            if not isinstance(arguments, dict):
                raise _RpcError(_INVALID_PARAMS, "'arguments' must be an object")
            session = bound or self._session(params.get("session_id"), world, principal)
            episode_id = await self._episode_of(session)
            explicit = params.get("request_id")
            key = (
                _key("openenv-step", episode_id, str(explicit))
                if explicit is not None
                else _key("openenv-rpc", session.id, request_id, name, arguments)
                if request_id is not None
                else None
            )
            event = await self.service.call(episode_id, principal, name, arguments, request_key=key)
            observation = _call_observation(name, event, episode_id, await self.rewards.step(episode_id, event))
            observation = observation["observation"]
            if event.is_error:  # as openenv's MCP environments answer a tool's error: a JSON-RPC error
                raise _RpcError(
                    _SERVER_ERROR, event.text, {"error": observation["error"], "result": observation["result"]}
                )
            return observation["result"]
        raise _RpcError(_METHOD_NOT_FOUND, f"Method not found: {method}")

    def _world(self, name: Any) -> str:
        self.service.world(str(name))  # NotFound names the loaded worlds
        return str(name)

    async def http_reset(self, request: Request) -> Response:
        world = self._world(request.path_params.get("world"))
        params = await parse_body(request, ResetRequest)
        return JSONResponse(await self._reset(None, world, request.state.principal, params))

    async def http_step(self, request: Request) -> Response:
        world = self._world(request.path_params.get("world"))
        body = await parse_body(request, StepRequest)
        principal, episode_id = request.state.principal, body.episode_id
        if episode_id is not None:
            episode = await self._episode_in(world, episode_id, principal)
            calls = isinstance(body.action, dict) and body.action.get("type") == "call_tool"
            if calls and episode.status != "active":
                raise Conflict(
                    f"episode {episode_id} is {episode.status}; POST /openenv/{world}/reset starts a new one"
                )
        key = _key("openenv-step", episode_id, body.request_id) if body.request_id is not None else None
        return JSONResponse(await self._step(world, principal, episode_id, body.action, key))

    async def http_state(self, request: Request) -> Response:
        world = self._world(request.path_params.get("world"))
        unknown = set(request.query_params) - {"episode_id"}
        if unknown:
            raise BadRequest(f"unknown query parameter {sorted(unknown)[0]!r}; /state takes episode_id")
        episode_id, principal = request.query_params.get("episode_id"), request.state.principal
        if episode_id is not None:
            await self._episode_in(world, episode_id, principal)
        return JSONResponse(await self._state(episode_id, principal))

    async def _episode_in(self, world: str, episode_id: str, principal: str) -> EpisodeRecord:
        """The episode, if it is `principal`'s and of `world` (the URL's): otherwise NotFound."""
        episode = await self.service.get(episode_id, principal)
        if episode.world != world:
            raise NotFound(f"no episode {episode_id!r} in world {world!r}; reset on this world's URL")
        return episode

    async def schema(self, request: Request) -> Response:
        self._world(request.path_params.get("world"))
        observation = {"type": "object", "properties": {"done": {"type": "boolean"}, "reward": {}}}
        return JSONResponse(
            {"action": _ACTION.json_schema(), "observation": observation, "state": OpenEnvState.model_json_schema()}
        )

    async def metadata(self, request: Request) -> Response:
        world = self.service.world(self._world(request.path_params.get("world")))
        return JSONResponse(
            {
                "name": world.name,
                "description": world.description,
                "readme_content": world.policy or None,
                "version": world.version or None,
                "author": None,
                "documentation_url": None,
            }
        )

    async def health(self, request: Request) -> Response:
        self._world(request.path_params.get("world"))
        return JSONResponse({"status": "healthy"})

    async def http_mcp(self, request: Request) -> Response:
        world = self._world(request.path_params.get("world"))
        raw = await json_body(request)
        try:
            message = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            return JSONResponse(_rpc_error(None, _PARSE_ERROR, "Parse error: the body is not JSON"))
        return JSONResponse(await self._rpc(message, world, request.state.principal, None))

    def _ws_principal(self, websocket: WebSocket) -> str | None:
        """The principal of a WebSocket handshake, or None to refuse it: the HTTP guard's checks (Host, Origin, the
        bearer token), which the guard leaves to WebSocket endpoints."""
        headers = websocket.headers
        if not _allowed(headers.get("host"), self._hosts):
            return None
        origin = headers.get("origin")
        if origin and not _allowed(origin, self._origins):
            return None
        if not self.settings.requires_token:
            return ""
        if len(headers.getlist("authorization")) > 1:  # never resolved to one of them, as the HTTP guard refuses it
            return None
        auth = headers.get("authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        return self.settings.principal_for(token.encode("latin-1")) if token else None

    async def _accept(self, websocket: WebSocket) -> tuple[str, str] | None:
        principal = self._ws_principal(websocket)
        if principal is None:
            await websocket.close(code=1008)  # before accept: the handshake gets a 403
            return None
        await websocket.accept()
        world = str(websocket.path_params.get("world", ""))
        if world not in self.service.worlds:
            known = ", ".join(sorted(self.service.worlds))
            await _send_error(websocket, f"unknown world {world!r}; loaded worlds: {known}", "SESSION_ERROR")
            await websocket.close()
            return None
        return world, principal

    async def ws(self, websocket: WebSocket) -> None:
        accepted = await self._accept(websocket)
        if accepted is None:
            return
        world, principal = accepted
        requested = websocket.query_params.get("session_id")
        if requested:
            session = self.sessions.get(requested)
            if session is None or session.principal != principal or session.world != world or session.attached:
                reason = "already has an attached WebSocket" if session is not None and session.attached else ""
                await _send_error(websocket, f"Unknown session_id: {requested} {reason}".strip(), "SESSION_ERROR")
                await websocket.close()
                return
            session.attached = True
        else:
            session = await self._socket_session(websocket, world, principal)
            if session is None:
                return
        self._sockets[websocket] = session
        try:
            await self._serve_socket(websocket, session)
        finally:
            self._sockets.pop(websocket, None)
            if requested:
                session.attached = False
                if session.closing:
                    await self._close_session(session)
            else:
                await self._close_session(session)
            with contextlib.suppress(RuntimeError):
                await websocket.close()

    async def _serve_socket(self, websocket: WebSocket, session: _Session) -> None:
        while True:
            message = await _receive(websocket, self.settings.ws_idle_timeout)
            if message is None:
                return
            if not isinstance(message, dict):
                await _send_error(websocket, "Invalid message: a JSON object with a 'type'", "VALIDATION_ERROR")
                continue
            kind = message.get("type")
            if kind == "close":
                return
            try:
                if kind == "reset":
                    data = await self._reset(session, session.world, session.principal, message.get("data", {}))
                    answer = {"type": "observation", "data": data}
                elif kind == "step":
                    episode_id = session.episode_id
                    action = message.get("data")
                    if isinstance(action, dict) and action.get("type") == "call_tool":
                        episode_id = await self._episode_of(session)
                    try:
                        data = await self._step(session.world, session.principal, episode_id, action)
                    except EpisodeClosed as exc:  # this protocol starts the next episode with a reset
                        raise Conflict(
                            f"episode {exc.episode_id} is {exc.episode_status}; send a reset message to start a new one"
                        ) from None
                    answer = {"type": "observation", "data": data}
                elif kind == "state":
                    answer = {"type": "state", "data": await self._state(session.episode_id, session.principal)}
                elif kind == "mcp":
                    rpc = await self._rpc(message.get("data"), session.world, session.principal, session)
                    answer = {"type": "mcp", "data": rpc}
                else:
                    await _send_error(websocket, f"Unknown message type: {kind}", "UNKNOWN_TYPE")
                    continue
            except BadRequest as exc:
                await _send_error(websocket, exc.message, "VALIDATION_ERROR")
                continue
            except ApiError as exc:
                await _send_error(websocket, exc.message, "EXECUTION_ERROR", simia_code=exc.code)
                continue
            except StoreUnavailable:
                await _send_error(websocket, "the database is unavailable; retry shortly", "EXECUTION_ERROR")
                continue
            await websocket.send_text(to_json(answer).decode())

    async def ws_mcp(self, websocket: WebSocket) -> None:
        accepted = await self._accept(websocket)
        if accepted is None:
            return
        world, principal = accepted
        session = await self._socket_session(websocket, world, principal)
        if session is None:
            return
        self._sockets[websocket] = session
        try:
            while True:
                message = await _receive(websocket, self.settings.ws_idle_timeout)
                if message is None:
                    return
                await websocket.send_text(to_json(await self._rpc(message, world, principal, session)).decode())
        finally:
            self._sockets.pop(websocket, None)
            await self._close_session(session)
            with contextlib.suppress(RuntimeError):
                await websocket.close()


def _call_observation(tool_name: str, event: EventRecord, episode_id: str, step: ProgressStep | None) -> dict[str, Any]:
    """A committed call as openenv's `CallToolObservation`: `result` is the MCP result (as fastmcp's
    `CallToolResult` serializes: `data` is what `MCPToolClient.call_tool` returns), `error` set when it failed;
    the step's `reward` is the call's shaped reward (`step`: its progress step, None without checks)."""
    meta: dict[str, Any] = {META_EPISODE: episode_id, META_SEQ: event.seq}
    if step is not None:
        meta[META_PROGRESS] = step.progress
    if event.injected:
        meta[META_INJECTED] = event.injected
    error = None
    if event.is_error:
        meta[META_ERROR_KIND] = event.error_kind or "agent"
        meta[META_ERROR_CODE] = event.error_code or ""
        error = {"error_type": _TOOL_ERRORS.get(event.error_code or "", "execution_error"), "message": event.text}
    result = {
        "content": [{"type": "text", "text": event.text}],
        "structured_content": event.output if not event.is_error and isinstance(event.output, dict) else None,
        "meta": meta,
        "data": None if event.is_error else (event.output if event.output is not None else event.text),
        "is_error": event.is_error,
    }
    observation = {"tool_name": tool_name, "result": result, "error": error, "metadata": meta}
    reward = step.reward if step is not None else None
    return {"observation": observation, "reward": reward, "done": False, "metadata": meta}


def _key(*parts: Any) -> str | None:
    """A retried request's key (see `LiveEpisode.retried`)."""
    try:
        raw = to_json(list(parts), fallback=str)
    except ValueError:  # arguments no JSON can carry: the simulator refuses them anyway
        return None
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def _rpc_error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    valid_id = request_id if isinstance(request_id, str | int) and not isinstance(request_id, bool) else None
    return {"jsonrpc": "2.0", "id": valid_id, "error": error}


def _problem(exc: ValueError) -> str:
    """The first problem of a validation error, with where it is."""
    if isinstance(exc, ValidationError):
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in error["loc"])
        reason = str(error.get("ctx", {}).get("error", error["msg"]))
        return f"{where}: {reason}" if where else reason
    return str(exc)


def _allowed(value: str | None, patterns: list[str]) -> bool:
    if not value:
        return False
    return any(value == p or (p.endswith(":*") and value.startswith(p[:-1])) for p in patterns)


async def _receive(websocket: WebSocket, idle: float) -> Any:
    """The next message, parsed (None when the client went away, or sent nothing for `idle` seconds: then the socket
    is closed, 1001 with the reason); a bad one is answered with an error frame."""
    while True:
        try:
            frame = await asyncio.wait_for(websocket.receive(), idle)
        except TimeoutError:
            with contextlib.suppress(RuntimeError):
                await websocket.close(code=1001, reason=f"idle for {idle:g} s (--ws-idle-timeout)")
            return None
        except (WebSocketDisconnect, RuntimeError):
            return None
        if frame["type"] == "websocket.disconnect":
            return None
        raw = frame.get("text")
        if raw is None:  # a binary frame
            await _send_error(websocket, "a binary frame: send each message as JSON in a text frame", "INVALID_JSON")
            continue
        if len(raw) > MAX_BODY:
            await _send_error(websocket, f"message over the limit of {MAX_BODY} bytes", "VALIDATION_ERROR")
            continue
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, RecursionError) as exc:
            await _send_error(websocket, f"Invalid JSON: {exc}", "INVALID_JSON")


async def _send_error(websocket: WebSocket, message: str, code: str, **extra: Any) -> None:
    await websocket.send_text(to_json({"type": "error", "data": {"message": message, "code": code, **extra}}).decode())
