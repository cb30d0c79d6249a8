"""The OpenAPI 3.1 description of simia's HTTP API, generated from the wire models (`simia.sim.wire`).

`OPERATIONS` lists every route of the app with its body, query, answer and the error statuses it
can give; `openapi_document` renders them with the wire models' JSON Schemas as components, so the
document, the server and the typed client read one contract. `GET /openapi.json` serves it. The MCP
endpoints are listed too (JSON-RPC over POST, the SSE stream, session close): their bodies and
errors are the MCP SDK's, described loosely; MCP itself is the contract there.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema
from simia.sim import __version__
from simia.sim.wire import (
    CreateEpisode,
    EndedEpisode,
    EndEpisode,
    Episode,
    EpisodeDetail,
    EpisodeList,
    ErrorBody,
    ForkEpisode,
    Health,
    WorldList,
)
from starlette.routing import Mount, WebSocketRoute

from .nemo_gym import SeedSession, Verify
from .openenv import ResetRequest, StepRequest

__all__ = ["ERROR_STATUSES", "OPERATIONS", "Operation", "QueryParam", "openapi_document", "served_routes"]

REF = "#/components/schemas/{model}"

ERROR_STATUSES: dict[int, str] = {
    400: "Malformed JSON (a key given twice included), an unknown, missing or invalid field, a bad query value (the "
    "message names it), or two Authorization headers",
    401: "Missing or unknown bearer token",
    403: "Origin not allowed (DNS-rebinding protection)",
    404: "Unknown episode or world (also: another principal's episode), or a list filter naming a world or task that "
    "no episode has and no served world defines",
    409: "The episode is not active, or (`/end`) it was ended before with another transcript or other tokens: its "
    "verdict stands",
    413: "Request body over the size limit",
    421: "Host not allowed (DNS-rebinding protection)",
    422: "The episode was judged, but its verdict has no usable reward (a NeMo Gym `/verify`: drop the rollout)",
    426: "A plain HTTP request on a WebSocket's path: open it with a WebSocket client",
    415: "A body that is not `application/json` (send it with `Content-Type: application/json`)",
    429: "The caller's own limit of live episodes (`--max-live-episodes-per-principal`) is reached, or this address "
    "sent too many wrong tokens (`--max-failed-logins`); `Retry-After` says when to retry",
    503: "Too many live episodes, the database cannot be written (disk full, read-only), or the server is "
    "draining to shut down; `Retry-After` says when to retry",
}
"""Every status the API answers with an `ErrorBody`, and when."""

_GUARD = (403, 421, 503)  # the outermost middleware answers these on every request (503: draining)


@dataclass(frozen=True)
class QueryParam:
    name: str
    description: str
    enum: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    """An integer parameter has a `minimum` (and may have a `maximum`); the others are strings."""


@dataclass(frozen=True)
class Operation:
    """One route and method of the app, as the document describes it.

    Attributes:
        answer: the model of the success body; None for non-JSON answers (`content` says what).
        errors: the error statuses the route itself can give (the guard's 403, 421 and, with tokens, 401
            are added to every operation).
        public: reachable without a bearer token.
        kind: `api` (JSON answers, `ErrorBody` errors), `mcp` (an MCP endpoint: the SDK's JSON-RPC),
            `trainer` (a trainer protocol's route: its answers are that protocol's, `ErrorBody` errors) or
            `websocket` (a trainer protocol's WebSocket: the handshake is a GET).
        tag: the trainer protocol of a `trainer` or `websocket` route (`nemo-gym`, `openenv`).
    """

    method: Literal["get", "post", "delete"]
    path: str
    operation_id: str
    summary: str
    answer: type[BaseModel] | None = None
    status: int = 200
    body: type[BaseModel] | None = None
    query: tuple[QueryParam, ...] = ()
    errors: tuple[int, ...] = ()
    public: bool = False
    kind: Literal["api", "mcp", "trainer", "websocket"] = "api"
    content: str = "application/json"
    tag: str = ""


_EPISODE_ID = "episode_id"
_BODY_ERRORS = (400, 413, 415)
OPERATIONS: tuple[Operation, ...] = (
    Operation("get", "/healthz", "health", "Liveness and the number of served worlds", Health, public=True),
    Operation("get", "/openapi.json", "openapi", "This document", content="application/json"),
    Operation(
        "get", "/metrics", "metrics", "Prometheus metrics: calls, errors, latency, episodes, tokens, cost", content=""
    ),
    Operation("get", "/v1/worlds", "list_worlds", "Worlds with their tools, policy and tasks", WorldList),
    Operation(
        "get",
        "/v1/episodes",
        "list_episodes",
        "The caller's episodes, newest first",
        EpisodeList,
        query=(
            QueryParam("world", "Only episodes of this world"),
            QueryParam("status", "Only episodes with this status", ("active", "ended", "abandoned")),
            QueryParam("task", "Only episodes of this task"),
            QueryParam(
                "limit", "The most episodes to list (default 1000); `more` says whether older ones match", (), 1, 1000
            ),
            QueryParam("offset", "Skip this many of the newest (default 0): page by the number listed", (), 0, 10**9),
        ),
        errors=(400, 404),
    ),
    Operation(
        "post",
        "/v1/episodes",
        "create_episode",
        "Start an episode of a world (a task's initial_state_patch is applied)",
        Episode,
        status=201,
        body=CreateEpisode,
        errors=(*_BODY_ERRORS, 404, 429, 503),
    ),
    Operation(
        "get",
        "/v1/episodes/{episode_id}",
        "get_episode",
        "An episode with its state, events, verdict and transcript",
        EpisodeDetail,
        errors=(404,),
    ),
    Operation(
        "post",
        "/v1/episodes/{episode_id}/fork",
        "fork_episode",
        "A new episode from the state after a step (default: the last)",
        Episode,
        status=201,
        body=ForkEpisode,
        errors=(*_BODY_ERRORS, 404, 429, 503),
    ),
    Operation(
        "post",
        "/v1/episodes/{episode_id}/end",
        "end_episode",
        "Close the episode and judge it (idempotent: the same body again answers the stored verdict)",
        EndedEpisode,
        body=EndEpisode,
        errors=(*_BODY_ERRORS, 404, 409),
    ),
    Operation(
        "post",
        "/episodes/{episode_id}/mcp",
        "episode_mcp_post",
        "MCP JSON-RPC on one episode",
        kind="mcp",
        errors=(404,),
    ),
    Operation(
        "get",
        "/episodes/{episode_id}/mcp",
        "episode_mcp_stream",
        "MCP server-to-client stream (handshake era)",
        kind="mcp",
        errors=(404,),
    ),
    Operation(
        "delete",
        "/episodes/{episode_id}/mcp",
        "episode_mcp_close",
        "Close an MCP session (handshake era)",
        kind="mcp",
        errors=(404,),
    ),
    Operation(
        "post",
        "/episodes/{episode_id}/user/mcp",
        "episode_user_mcp_post",
        "MCP JSON-RPC on the user's own tools of one episode (a world with user_tools: the episode's user_mcp_url)",
        kind="mcp",
        errors=(404,),
    ),
    Operation(
        "get",
        "/episodes/{episode_id}/user/mcp",
        "episode_user_mcp_stream",
        "MCP server-to-client stream of the user's MCP URL (handshake era)",
        kind="mcp",
        errors=(404,),
    ),
    Operation(
        "delete",
        "/episodes/{episode_id}/user/mcp",
        "episode_user_mcp_close",
        "Close an MCP session of the user's MCP URL (handshake era)",
        kind="mcp",
        errors=(404,),
    ),
    Operation(
        "post",
        "/worlds/{world}/mcp",
        "world_mcp_post",
        "MCP JSON-RPC; each handshake session opens a new episode",
        kind="mcp",
        errors=(404,),
    ),
    Operation(
        "get", "/worlds/{world}/mcp", "world_mcp_stream", "MCP server-to-client stream", kind="mcp", errors=(404,)
    ),
    Operation(
        "delete",
        "/worlds/{world}/mcp",
        "world_mcp_close",
        "Close an MCP session and end its episode",
        kind="mcp",
        errors=(404,),
    ),
    Operation(
        "post",
        "/nemo-gym/{world}/seed_session",
        "nemo_gym_seed_session",
        "NeMo Gym: a new episode for one rollout; answers its MCP url_path and sets the session cookie",
        status=200,
        body=SeedSession,
        errors=(*_BODY_ERRORS, 404, 429, 503),
        kind="trainer",
        tag="nemo-gym",
    ),
    Operation(
        "post",
        "/nemo-gym/{world}/verify",
        "nemo_gym_verify",
        "NeMo Gym: end the cookie's episode with the Responses-API output as transcript; the row, reward, verdict",
        body=Verify,
        errors=(*_BODY_ERRORS, 404, 422),
        kind="trainer",
        tag="nemo-gym",
    ),
    Operation(
        "post",
        "/openenv/{world}/reset",
        "openenv_reset",
        "OpenEnv: a new episode (task, seed); its observation",
        body=ResetRequest,
        errors=(*_BODY_ERRORS, 404, 429, 503),
        kind="trainer",
        tag="openenv",
    ),
    Operation(
        "post",
        "/openenv/{world}/step",
        "openenv_step",
        "OpenEnv: one action of an episode (list_tools, call_tool, end); its observation, reward and done",
        body=StepRequest,
        errors=(*_BODY_ERRORS, 404, 409),
        kind="trainer",
        tag="openenv",
    ),
    Operation(
        "get",
        "/openenv/{world}/state",
        "openenv_state",
        "OpenEnv: an episode's id and step count",
        query=(QueryParam("episode_id", "The episode (from /reset)"),),
        errors=(400, 404),
        kind="trainer",
        tag="openenv",
    ),
    Operation(
        "get",
        "/openenv/{world}/schema",
        "openenv_schema",
        "OpenEnv: the JSON Schemas of actions, observations and state",
        errors=(404,),
        kind="trainer",
        tag="openenv",
    ),
    Operation(
        "get",
        "/openenv/{world}/metadata",
        "openenv_metadata",
        "OpenEnv: the world's name, description and version",
        errors=(404,),
        kind="trainer",
        tag="openenv",
    ),
    Operation(
        "get",
        "/openenv/{world}/health",
        "openenv_health",
        "OpenEnv: health",
        errors=(404,),
        kind="trainer",
        tag="openenv",
    ),
    Operation(
        "post",
        "/openenv/{world}/mcp",
        "openenv_mcp",
        "OpenEnv: JSON-RPC (openenv/session/create and close, tools/list, tools/call)",
        errors=(404, 413),
        kind="trainer",
        tag="openenv",
    ),
    Operation(
        "get",
        "/openenv/{world}/ws",
        "openenv_ws",
        "OpenEnv: WebSocket session (reset, step, state, mcp, close messages)",
        errors=(426,),
        kind="websocket",
        tag="openenv",
    ),
    Operation(
        "get",
        "/openenv/{world}/mcp",
        "openenv_mcp_ws",
        "OpenEnv: JSON-RPC over a WebSocket, on a session of its own",
        errors=(426,),
        kind="websocket",
        tag="openenv",
    ),
)
"""Every route of `SimiaApp` (a test checks the app's route table against this list)."""

_REQUESTS: tuple[type[BaseModel], ...] = (
    CreateEpisode,
    ForkEpisode,
    EndEpisode,
    SeedSession,
    Verify,
    ResetRequest,
    StepRequest,
)
_ANSWERS: tuple[type[BaseModel], ...] = (
    ErrorBody,
    Health,
    WorldList,
    Episode,
    EpisodeList,
    EndedEpisode,
    EpisodeDetail,
)

_JSONRPC_ID = {"type": ["string", "integer"]}
_MCP_SCHEMAS: dict[str, Any] = {
    "JsonRpcMessage": {
        "description": "A JSON-RPC 2.0 request or notification of the Model Context Protocol.",
        "type": "object",
        "required": ["jsonrpc", "method"],
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "id": _JSONRPC_ID,
            "method": {"type": "string"},
            "params": {"type": "object"},
        },
    },
    "JsonRpcAnswer": {
        "description": "A JSON-RPC 2.0 result or error.",
        "type": "object",
        "required": ["jsonrpc"],
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "id": {"type": ["string", "integer", "null"]},
            "result": {"type": "object"},
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {"code": {"type": "integer"}, "message": {"type": "string"}},
            },
        },
    },
}


def _components() -> dict[str, Any]:
    modes: list[tuple[type[BaseModel], JsonSchemaMode]] = [(m, "validation") for m in _REQUESTS]
    modes += [(m, "serialization") for m in _ANSWERS]
    _, top = models_json_schema(modes, ref_template=REF)
    schemas: dict[str, Any] = dict(top.get("$defs", {}))
    schemas.update(copy.deepcopy(_MCP_SCHEMAS))
    return schemas


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def _error_response(status: int) -> dict[str, Any]:
    return {"description": ERROR_STATUSES[status], "content": {"application/json": {"schema": _ref(ErrorBody)}}}


def _path_params(path: str) -> list[dict[str, Any]]:
    params = []
    if "{episode_id}" in path:
        params.append(
            {
                "name": _EPISODE_ID,
                "in": "path",
                "required": True,
                "description": "An episode id from POST /v1/episodes",
                "schema": {"type": "string"},
            }
        )
    if "{world}" in path:
        params.append(
            {
                "name": "world",
                "in": "path",
                "required": True,
                "description": "A world name",
                "schema": {"type": "string"},
            }
        )
    return params


def _api_operation(op: Operation) -> dict[str, Any]:
    out: dict[str, Any] = {"operationId": op.operation_id, "summary": op.summary, "tags": ["api"]}
    params = _path_params(op.path)
    for q in op.query:
        schema: dict[str, Any] = {"type": "string"}
        if q.minimum is not None:
            schema = {"type": "integer", "minimum": q.minimum}
            if q.maximum is not None:
                schema["maximum"] = q.maximum
        if q.enum:
            schema["enum"] = list(q.enum)
        params.append(
            {"name": q.name, "in": "query", "required": False, "description": q.description, "schema": schema}
        )
    if params:
        out["parameters"] = params
    if op.body is not None:
        out["requestBody"] = {"required": False, "content": {"application/json": {"schema": _ref(op.body)}}}
    if op.answer is not None:
        success: dict[str, Any] = {"description": "OK", "content": {"application/json": {"schema": _ref(op.answer)}}}
    elif op.content:
        success = {"description": "OK", "content": {op.content: {"schema": {"type": "object"}}}}
    else:
        success = {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}
    out["responses"] = {str(op.status): success}
    return out


def _trainer_operation(op: Operation) -> dict[str, Any]:
    """A trainer protocol's route: its body is a wire model, its answer the protocol's own JSON (notes in its page of
    the docs: docs/trainers/), or for a WebSocket the 101 of its handshake."""
    out = _api_operation(op)
    out["tags"] = [op.tag, "api"]  # the protocol, and the HTTP API it is part of
    if op.body is not None and op.body.model_json_schema().get("required"):
        out["requestBody"]["required"] = True  # its rows and actions have required fields: no empty body
    if op.kind == "websocket":
        out["description"] = "A WebSocket: the GET is its handshake; messages are JSON text frames."
        out["responses"] = {"101": {"description": "Switching protocols: the WebSocket is open"}}
    else:
        out["responses"][str(op.status)] = {
            "description": f"The {op.tag} protocol's answer",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    return out


def _mcp_operation(op: Operation) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operationId": op.operation_id,
        "summary": op.summary,
        "tags": ["mcp"],
        "description": "The Model Context Protocol's Streamable HTTP transport (https://modelcontextprotocol.io); "
        "protocol errors are JSON-RPC errors, tool failures are isError results.",
        "parameters": [
            *_path_params(op.path),
            {"name": "MCP-Protocol-Version", "in": "header", "required": False, "schema": {"type": "string"}},
            {"name": "Mcp-Session-Id", "in": "header", "required": False, "schema": {"type": "string"}},
        ],
    }
    answer = {"schema": {"$ref": REF.format(model="JsonRpcAnswer")}}
    jsonrpc_error = {"application/json": answer}
    if op.method == "post":
        out["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": REF.format(model="JsonRpcMessage")}}},
        }
        out["responses"] = {
            "200": {
                "description": "The JSON-RPC answer, as JSON or as an SSE stream",
                "content": {"application/json": answer, "text/event-stream": {"schema": {"type": "string"}}},
            },
            "202": {"description": "A notification or response was accepted"},
        }
    elif op.method == "get":
        out["responses"] = {
            "200": {"description": "Server-to-client SSE stream", "content": {"text/event-stream": {}}},
            "405": {"description": "No stream on this URL or protocol era"},
        }
    else:
        out["responses"] = {"200": {"description": "Session closed"}, "405": {"description": "No sessions here"}}
    out["responses"].update(
        {
            "400": {
                "description": "A malformed message, a missing session, or a bad header",
                "content": {**jsonrpc_error, "text/plain": {"schema": {"type": "string"}}},
            },
            "404": {
                "description": "Unknown episode or world (also: another principal's episode), or an unknown session",
                "content": {"application/json": {"schema": {"anyOf": [_ref(ErrorBody), answer["schema"]]}}},
            },
            "406": {"description": "The Accept header excludes the answer's media types", "content": jsonrpc_error},
            "413": {
                "description": ERROR_STATUSES[413],
                "content": {
                    "application/json": {"schema": _ref(ErrorBody)},
                    "text/plain": {"schema": {"type": "string"}},
                },
            },
            "415": {"description": "Content-Type is not application/json", "content": jsonrpc_error},
        }
    )
    return out


def openapi_document(
    *, requires_token: bool, server_url: str | None = None, version: str = __version__
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of a simia server.

    Args:
        requires_token: the server was given bearer tokens: every operation but `/healthz` needs one
            (`bearerAuth`) and may answer 401.
        server_url: put in `servers` (absent: clients resolve paths against the document's own URL).
        version: the API version (`info.version`).

    Returns:
        The document as a JSON-ready dict.
    """
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        render = {"mcp": _mcp_operation, "trainer": _trainer_operation, "websocket": _trainer_operation}
        spec = render.get(op.kind, _api_operation)(op)
        statuses = sorted({*op.errors, *_GUARD, *((401, 429) if requires_token and not op.public else ())})
        for status in statuses:
            if op.kind in ("api", "trainer", "websocket") or str(status) not in spec["responses"]:
                spec["responses"][str(status)] = _error_response(status)
        if requires_token:
            spec["security"] = [] if op.public else [{"bearerAuth": []}]
        paths.setdefault(op.path, {})[op.method] = spec
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "simia",
            "version": version,
            "description": "An MCP server whose tools are simulated by an LLM: episodes, worlds and their MCP "
            'endpoints. Every error is {"error": {"code", "message"}} with a message that says what to fix.',
        },
        "paths": paths,
        "components": {"schemas": _components()},
    }
    if server_url:
        document["servers"] = [{"url": server_url}]
    if requires_token:
        document["components"]["securitySchemes"] = {
            "bearerAuth": {"type": "http", "scheme": "bearer", "description": "A token given to simia serve --token"}
        }
    return document


MCP_METHODS = ("get", "post", "delete")
"""What an MCP Streamable HTTP endpoint answers (any other method gets 405)."""


def served_routes(routes: list[Any], prefix: str = "") -> list[tuple[str, str]]:
    """Every (method, path) a Starlette route list serves, read from the table itself (HEAD aside).

    A `Mount` is walked into: through gates that wrap an app (`.app`) down to the first app with
    routes. A WebSocket route is its handshake's GET; another route without methods is an MCP endpoint
    (`MCP_METHODS`).
    """
    found: list[tuple[str, str]] = []
    for route in routes:
        path = prefix + str(getattr(route, "path", ""))
        if isinstance(route, Mount):
            app: Any = route.app
            while app is not None and getattr(app, "routes", None) is None:  # through the gates
                app = getattr(app, "app", None)
            found += served_routes(list(getattr(app, "routes", [])), path)
            continue
        methods = getattr(route, "methods", None)
        if isinstance(route, WebSocketRoute):
            verbs = ["get"]  # the handshake
        else:
            verbs = sorted(m.lower() for m in methods if m != "HEAD") if methods else list(MCP_METHODS)
        found += [(verb, path) for verb in verbs]
    return found
