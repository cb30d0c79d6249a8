"""The ASGI app: HTTP API, both MCP endpoints, auth, DNS-rebinding protection, metrics and lifespan.

Routes (JSON; a bearer token is required when any is configured):

    GET  /healthz                       liveness (no token needed)
    GET  /metrics                       Prometheus text
    GET  /openapi.json                  the OpenAPI 3.1 description of this API (server/openapi.py)
    GET  /ui                            the episode viewer (HTML; server/ui; a token may come from its cookie)
    GET  /v1/worlds                     loaded worlds with their tools and tasks
    POST /v1/episodes                   {"world", "task"?, "seed"?} -> 201 episode with its mcp_url
    GET  /v1/episodes[?world=&status=&task=]
    GET  /v1/episodes/{id}              state, events, verdict
    POST /v1/episodes/{id}/fork         {"step"?} -> 201 new episode from that step's state
    POST /v1/episodes/{id}/end          {"transcript"?} -> the ended episode with its verdict
    /episodes/{id}/mcp                  MCP, bound to one episode, every protocol era
    /worlds/{name}/mcp                  MCP, each handshake session opens a new episode
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import re
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any, TypeVar
from urllib.parse import quote

from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel, ValidationError
from simia.sim.engine import Simulator
from simia.sim.errors import SimiaError, StateError, StoreUnavailable
from simia.sim.judging import Judge
from simia.sim.storage import Store
from simia.sim.wire import (
    CreateEpisode,
    EndedEpisode,
    EndEpisode,
    Episode,
    EpisodeDetail,
    EpisodeList,
    Event,
    ForkEpisode,
    Health,
    TaskInfo,
    WorldInfo,
    WorldList,
)
from simia.sim.world import World
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ._body import MAX_BODY, read_body
from .drain import Drain, DrainGate
from .episodes import EpisodeService
from .errors import ApiError, BadRequest, http_error
from .mcp import EpisodeGate, McpEndpoints, WorldGate
from .metrics import Metrics
from .openapi import openapi_document
from .settings import ServerSettings
from .ui import PUBLIC_PATHS, Viewer, cookie_token

__all__ = ["SimiaApp", "tune_gc", "viewer_app"]

log = logging.getLogger("simia.server")
MAX_JSON_BODY = MAX_BODY
RETRY_AFTER_S = 5
"""The Retry-After (seconds) of a 503 for a database that cannot be written or a server that is draining."""
M = TypeVar("M", bound=BaseModel)


def _host_allowed(value: str | None, patterns: list[str]) -> bool:
    if not value:
        return False
    return any(value == p or (p.endswith(":*") and value.startswith(p[:-1])) for p in patterns)


class Guard:
    """Outermost middleware: Host/Origin checks (DNS rebinding), then the bearer token -> principal."""

    def __init__(self, app: ASGIApp, settings: ServerSettings) -> None:
        self.app = app
        self.settings = settings
        self.hosts = settings.hosts()
        self.origins = settings.origins()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _guard_headers(scope["headers"])
        if not _host_allowed(headers.get("host"), self.hosts):
            await _error(
                421,
                "misdirected_request",
                "Host header not allowed (DNS-rebinding protection); "
                "start the server with --allowed-host for this name",
            )(scope, receive, send)
            return
        origin = headers.get("origin")
        if origin and not _host_allowed(origin, self.origins):
            await _error(
                403, "forbidden_origin", "Origin not allowed (DNS-rebinding protection); add it with --allowed-origin"
            )(scope, receive, send)
            return
        principal = ""
        path: str = scope["path"]
        if self.settings.requires_token and path != "/healthz" and not path.startswith(PUBLIC_PATHS):
            auth = headers.get("authorization", "")
            token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            presented = token.encode("latin-1")  # the header's own bytes
            viewer = path == "/ui" or path.startswith("/ui/")
            if not token and viewer:  # a browser on the viewer: its token is in the login cookie (UTF-8)
                presented = (cookie_token(headers.get("cookie", "")) or "").encode()
            found = self.settings.principal_for(presented) if presented else None
            if found is None and viewer:
                await RedirectResponse(f"/ui/login?next={quote(path, safe='/')}", status_code=303)(scope, receive, send)
                return
            if found is None:
                message = "missing bearer token" if not token else "unknown bearer token"
                response = _error(
                    401,
                    "unauthorized",
                    f"{message}; send 'Authorization: Bearer <token>' with a token given to simia serve --token",
                )
                response.headers["WWW-Authenticate"] = 'Bearer realm="simia"'
                await response(scope, receive, send)
                return
            principal = found
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


_GUARD_HEADERS = {b"host", b"origin", b"authorization", b"cookie"}


def _guard_headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The headers the guard reads (ASGI servers send names in lower case)."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in raw if k.lower() in _GUARD_HEADERS}


class EpisodeMcpShortcut:
    """Sends `/episodes/{id}/mcp` requests straight to the episode gate, as the router's Mount would.

    Every tool call takes this path; skipping the router's walk over the API routes and
    Starlette's outer middleware keeps simia's share of a call small. Anything else
    (and any deployment under a root path) goes through the full app.
    """

    def __init__(self, gate: ASGIApp, app: ASGIApp) -> None:
        self.gate = gate
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] == "http" and not scope.get("root_path") and path.endswith("/mcp"):
            match = _EPISODE_MCP.fullmatch(path)
            if match is not None:
                scope["path_params"] = {"episode_id": match[1]}
                scope["app_root_path"] = ""
                scope["root_path"] = path[: -len("/mcp")]
                await self.gate(scope, receive, send)
                return
        await self.app(scope, receive, send)


_EPISODE_MCP = re.compile(r"/episodes/([^/]+)/mcp")


class ViewerSplit:
    """Sends `/ui` and everything under it to the viewer's own app (HTML pages, not part of the JSON API or its
    OpenAPI document), and the rest, lifespan included, to the API."""

    def __init__(self, viewer: ASGIApp, api: ASGIApp) -> None:
        self.viewer = viewer
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] == "http" and (path == "/ui" or path.startswith("/ui/")):
            await self.viewer(scope, receive, send)
            return
        await self.api(scope, receive, send)


def tune_gc() -> None:
    """Keep the cyclic garbage collector off a tool call's path.

    Everything alive once the server is up (modules, worlds, schemas, the ASGI stack) lives as
    long as the server: frozen, it is no longer walked by every full collection. Collections
    then run every 10,000 net allocations instead of 700. Measured under the overhead bench:
    collections cost ~120 us of a ~750 us call before, ~50 us with the freeze alone, ~0 with both.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


async def _parse(request: Request, model: type[M]) -> M:
    """The request body as `model`; an empty body is `{}`. Any problem is a 400 that names the field (a body
    over the limit a 413). Parsing is strict: a JSON value of the wrong type (`"12"` or `true` for an integer)
    is refused, never converted."""
    raw = await read_body(request, MAX_JSON_BODY)
    try:
        return model.model_validate_json(raw if raw.strip() else b"{}", strict=True)
    except ValidationError as exc:
        raise BadRequest(_validation_message(exc)) from None


def _validation_message(exc: ValidationError) -> str:
    """One line per problem: where, what (pydantic's own words), and for unknown fields the allowed ones."""
    problems = []
    for error in exc.errors(include_url=False)[:5]:
        where = ".".join(str(part) for part in error["loc"]) or "body"
        if error["type"] == "json_invalid":
            problems.append(f"request body is not valid JSON: {error['msg']}")
        elif error["type"] in ("model_type", "model_attributes_type") and not error["loc"]:
            problems.append("request body must be a JSON object")
        elif error["type"] == "extra_forbidden":
            allowed = ", ".join(_FIELDS.get(exc.title, ()))
            problems.append(f"unknown field {where!r}" + (f"; allowed: {allowed}" if allowed else ""))
        elif error["type"] == "missing":
            problems.append(f"missing field {where!r}")
        elif error["type"] in _EXPECTED:
            problems.append(f"field {where!r} must be {_EXPECTED[error['type']]}, got {_json_type(error['input'])}")
        elif error["type"] == "value_error":  # a model's own check: its message names the field
            reason = str(error.get("ctx", {}).get("error", error["msg"]))
            problems.append(reason if not error["loc"] else f"field {where!r}: {reason}")
        elif error["type"] == "finite_number":
            problems.append(f"field {where!r} must be a finite number (JSON has no NaN or Infinity)")
        else:
            problems.append(f"field {where!r}: {error['msg']}")
    return "; ".join(problems)


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_parsing_size": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
}


def _json_type(value: Any) -> str:
    """The JSON name of a value's type, as the client sent it."""
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string")):
        if isinstance(value, kind):
            return name
    return {dict: "object", list: "array", type(None): "null"}.get(type(value), type(value).__name__)


_FIELDS = {m.__name__: tuple(m.model_fields) for m in (CreateEpisode, ForkEpisode, EndEpisode)}
_LIST_FILTERS = ("world", "status", "task")


class SimiaApp:
    """The server: worlds + simulator + store -> a Starlette app (`.app`)."""

    def __init__(
        self,
        worlds: dict[str, World],
        simulator: Simulator,
        store: Store,
        settings: ServerSettings | None = None,
        judge: Judge | None = None,
    ) -> None:
        self.settings = settings or ServerSettings()
        self.metrics = Metrics()
        failures = getattr(simulator.backend, "failures", None)  # a Backend subclass that skipped Backend.__init__
        if isinstance(failures, Counter):
            self.metrics.backend_failures = failures
        self._openapi: dict[str, Any] | None = None
        self.store = store
        self.service = EpisodeService(worlds, simulator, store, self.settings, self.metrics, judge)
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=self.settings.hosts(),
            allowed_origins=self.settings.origins(),
        )
        self.mcp = McpEndpoints(
            self.service, security, max_sessions=self.settings.max_sessions, idle_timeout=self.settings.idle_timeout
        )
        episode_gate = EpisodeGate(self.mcp.episode_app, self.service)
        routes = [
            Route("/healthz", self.healthz),
            Route("/metrics", self.metrics_endpoint),
            Route("/openapi.json", self.openapi),
            Route("/v1/worlds", self.list_worlds),
            Route("/v1/episodes", self.list_episodes, methods=["GET"]),
            Route("/v1/episodes", self.create_episode, methods=["POST"]),
            Route("/v1/episodes/{episode_id}", self.get_episode),
            Route("/v1/episodes/{episode_id}/fork", self.fork_episode, methods=["POST"]),
            Route("/v1/episodes/{episode_id}/end", self.end_episode, methods=["POST"]),
            Mount("/episodes/{episode_id}", app=episode_gate),
            Mount("/worlds/{world}", app=WorldGate(self.mcp.world_app, self.mcp)),
        ]
        inner = Starlette(
            routes=routes,
            lifespan=self._lifespan,
            exception_handlers={
                ApiError: self._api_error,
                StateError: self._state_error,
                StoreUnavailable: self._store_unavailable,
                HTTPException: http_error,
                Exception: self._internal_error,
            },
        )
        self.starlette = inner
        viewer = Viewer(store, worlds, scoped=True, principal_for=self.settings.principal_for)
        self.viewer = Starlette(routes=viewer.routes())
        self.drain = Drain(RETRY_AFTER_S)
        """Refuses new requests once started, and tracks those in flight (`simia serve` starts it on SIGTERM)."""
        self.app: ASGIApp = DrainGate(
            Guard(EpisodeMcpShortcut(episode_gate, ViewerSplit(self.viewer, inner)), self.settings), self.drain
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.metrics.live = await self.store.count_live()
        sweeper = asyncio.create_task(self._sweep())
        async with self.mcp.episode_server.session_manager.run(), self.mcp.world_server.session_manager.run():
            if self.settings.tune_gc:
                tune_gc()
            try:
                yield
            finally:
                sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeper

    async def _sweep(self) -> None:
        interval = max(1.0, min(60.0, self.settings.idle_timeout / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                abandoned = await self.service.sweep_idle()
            except StoreUnavailable as exc:
                log.warning("idle sweep not stored (the next one retries): %s", exc)
                continue
            except Exception:
                log.exception("idle sweep failed")
                continue
            if abandoned:
                log.info("marked %d idle episode(s) abandoned", len(abandoned))
                self.mcp.forget(set(abandoned))

    async def _api_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return JSONResponse(exc.body(), status_code=exc.status)

    async def _state_error(self, request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": {"code": "invalid_state", "message": str(exc)}}, status_code=400)

    async def _store_unavailable(self, request: Request, exc: Exception) -> Response:
        """The database is down or refused the request's write (disk full, read-only): 503, retry later."""
        log.warning("database unavailable: %s %s: %s", request.method, request.url.path, exc)
        message = "the database is unavailable (down, or its disk full or read-only); retry shortly"
        response = _error(503, "database_unavailable", message)
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
        return response

    async def _internal_error(self, request: Request, exc: Exception) -> Response:
        """A bug, not bad input: still the API's error shape (the traceback goes to the server log)."""
        return _error(500, "internal_error", "internal server error; the server log has the details")

    def _base_url(self, request: Request) -> str:
        return (self.settings.public_url or str(request.base_url)).rstrip("/")

    def _episode(self, request: Request, record: Any, model: type[E]) -> E:
        """A stored episode as one of the wire models (`Episode` and its extensions)."""
        fields = {**record.summary(), "mcp_url": f"{self._base_url(request)}/episodes/{record.id}/mcp"}
        if issubclass(model, EndedEpisode):
            fields["verdict"] = record.verdict
        return model.model_validate(fields)

    async def healthz(self, request: Request) -> Response:
        return _json(Health(status="ok", worlds=len(self.service.worlds)))

    async def metrics_endpoint(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4")

    async def openapi(self, request: Request) -> Response:
        if self._openapi is None:
            self._openapi = openapi_document(requires_token=self.settings.requires_token)
        return JSONResponse({**self._openapi, "servers": [{"url": self._base_url(request)}]})

    async def list_worlds(self, request: Request) -> Response:
        base = self._base_url(request)
        worlds = [
            WorldInfo(
                name=w.name,
                title=w.title,
                description=w.description,
                version=w.version,
                hash=w.content_hash,
                policy=w.policy,
                tools=[t.mcp_dict() for t in w.tools],
                tasks=[TaskInfo(id=t.id, instruction=t.instruction, user_hidden=t.user_hidden) for t in w.tasks],
                mcp_url=f"{base}/worlds/{w.name}/mcp",
            )
            for w in self.service.worlds.values()
        ]
        return _json(WorldList(worlds=worlds))

    async def create_episode(self, request: Request) -> Response:
        body = await _parse(request, CreateEpisode)
        episode = await self.service.create(
            body.world,
            task=body.task,
            seed=body.seed,
            principal=request.state.principal,
            perturbation=body.perturbation,
        )
        return _json(self._episode(request, episode, Episode), status=201)

    async def list_episodes(self, request: Request) -> Response:
        q = request.query_params
        for name in q:
            if name not in _LIST_FILTERS:
                raise BadRequest(f"unknown query parameter {name!r}; filters: {', '.join(_LIST_FILTERS)}")
            if len(q.getlist(name)) > 1:
                raise BadRequest(f"query parameter {name!r} is given {len(q.getlist(name))} times; give it once")
        status = q.get("status")
        if status is not None and status not in {"active", "ended", "abandoned"}:
            raise BadRequest(f"status must be active, ended or abandoned, got {status!r}")
        episodes = await self.store.list_episodes(
            world=q.get("world"), status=status, task=q.get("task"), principal=request.state.principal
        )
        return _json(EpisodeList(episodes=[self._episode(request, e, Episode) for e in episodes]))

    async def get_episode(self, request: Request) -> Response:
        episode = await self.service.get(request.path_params["episode_id"], request.state.principal)
        events = await self.store.events(episode.id)
        detail = self._episode(request, episode, EpisodeDetail)
        detail.state, detail.initial_state = episode.state, episode.initial_state
        detail.events = [Event.model_validate(e.public()) for e in events]
        detail.transcript, detail.tokens = episode.transcript, episode.tokens
        return _json(detail)

    async def fork_episode(self, request: Request) -> Response:
        body = await _parse(request, ForkEpisode)
        episode = await self.service.fork(
            request.path_params["episode_id"], step=body.step, principal=request.state.principal
        )
        return _json(self._episode(request, episode, Episode), status=201)

    async def end_episode(self, request: Request) -> Response:
        body = await _parse(request, EndEpisode)
        tokens = body.tokens.model_dump(exclude_none=True) if body.tokens is not None else None
        try:
            episode = await self.service.end(
                request.path_params["episode_id"], request.state.principal, body.transcript, tokens
            )
        except (StoreUnavailable, ApiError):
            raise  # infrastructure: answered 503 by `_store_unavailable`; an API error keeps its own status
        except SimiaError as exc:
            raise BadRequest(str(exc)) from None
        return _json(self._episode(request, episode, EndedEpisode))


E = TypeVar("E", bound=Episode)


def viewer_app(store: Store, worlds: dict[str, World], settings: ServerSettings) -> ASGIApp:
    """The viewer alone over `store` (`simia view`): `/ui` and `/healthz`, behind the same guard as `SimiaApp`.

    Every principal's episodes are shown (the database's owner looks at their file); nothing is simulated
    and nothing is written.
    """

    async def healthz(request: Request) -> Response:
        return _json(Health(status="ok", worlds=len(worlds)))

    viewer = Viewer(store, worlds, scoped=False, principal_for=settings.principal_for)
    inner = Starlette(
        routes=[Route("/healthz", healthz), *viewer.routes()],
        exception_handlers={HTTPException: http_error},
    )
    return Guard(inner, settings)


def _json(model: BaseModel, status: int = 200) -> Response:
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")
