"""Errors the HTTP API answers with, each a status, a short code and a message that says what to fix.

ApiError
├── BadRequest      400  malformed JSON, missing or invalid fields
├── Unauthorized    401  missing or unknown bearer token
├── NotFound        404  unknown episode or world (also: another principal's episode)
├── Conflict        409  the episode is not active
│   └── EpisodeClosed      a call on an ended or abandoned episode (each protocol says how it starts the next)
├── PayloadTooLarge 413  a request body (or a posted transcript) over its limit (read no further)
├── UnsupportedMediaType 415  an API POST body that is not `application/json`
└── Overloaded      503  too many live episodes

Two more 503s come from outside this tree, in the same body shape and with `Retry-After`: `database_unavailable`
(the store raised `simia.sim.errors.StoreUnavailable`; app.py) and `draining` (the server is shutting down; drain.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from simia.sim.errors import SimiaError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = [
    "ApiError",
    "BadRequest",
    "Conflict",
    "EpisodeClosed",
    "NotFound",
    "Overloaded",
    "PayloadTooLarge",
    "TooManyEpisodes",
    "Unauthorized",
    "UnsupportedMediaType",
    "http_error",
    "route_errors",
]


class ApiError(SimiaError):
    """An error answer of the HTTP API: its status, a short code and a message that says how to fix it."""

    status = 500
    code = "internal_error"

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.extra}}


class BadRequest(ApiError):
    status = 400
    code = "bad_request"


class Unauthorized(ApiError):
    status = 401
    code = "unauthorized"


class NotFound(ApiError):
    status = 404
    code = "not_found"


class Conflict(ApiError):
    status = 409
    code = "conflict"


class EpisodeClosed(Conflict):
    """A call on an episode that is no longer active. The message says how the HTTP API starts the next one; a
    protocol that starts episodes its own way (OpenEnv's reset) answers `episode_id` and `episode_status` with its
    own."""

    def __init__(self, episode_id: str, episode_status: str) -> None:
        super().__init__(f"episode {episode_id} is {episode_status}; start a new one with POST /v1/episodes")
        self.episode_id, self.episode_status = episode_id, episode_status


class PayloadTooLarge(ApiError):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(ApiError):
    """A body the API cannot read as JSON by its declared type: the API's POST routes take `application/json` only."""

    status = 415
    code = "unsupported_media_type"


class Overloaded(ApiError):
    status = 503
    code = "overloaded"


class TooManyEpisodes(ApiError):
    """A principal at its own limit of live episodes (the server may have room for others)."""

    status = 429
    code = "too_many_episodes"
    retry_after = 30


def route_errors(routes: str) -> Callable[[Request, Exception], Awaitable[Response]]:
    """A handler of Starlette's own refusals (no such route, a method the route lacks) in the API's error shape;
    a 404 says where the routes are (`routes`: "GET /openapi.json lists them")."""

    async def handler(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
        allowed = ", ".join(sorted((exc.headers or {}).get("Allow", "").split(", ")))  # a set: its order varies
        message = {
            404: f"no route {request.url.path!r}; {routes}",
            405: f"{request.method} is not allowed on {request.url.path}; use {allowed}",
        }.get(exc.status_code, str(exc.detail))
        return JSONResponse({"error": {"code": code, "message": message}}, exc.status_code, headers=exc.headers)

    return handler


http_error = route_errors("GET /openapi.json lists them")
"""`route_errors` of the server, whose routes `/openapi.json` lists."""
