"""The ASGI app: the HTTP API's handlers and both MCP endpoints, behind the guard and routing middlewares
(middleware.py), with metrics, draining and the lifespan that sweeps idle episodes.

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
    /episodes/{id}/user/mcp             MCP, the user's own tools in that episode (a world with user_tools)
    /worlds/{name}/mcp                  MCP, each handshake session opens a new episode
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from mcp.server.transport_security import TransportSecuritySettings
from simia.sim.engine import Simulator
from simia.sim.errors import SimiaError, StateError, StoreUnavailable
from simia.sim.judging import Judge
from simia.sim.storage import Store, unmatched_filter
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
from simia.sim.world import World, apply_patches
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .drain import Drain, DrainGate
from .episodes import EpisodeService
from .errors import ApiError, BadRequest, NotFound, http_error
from .mcp import EpisodeGate, McpEndpoints, WorldGate
from .metrics import Metrics
from .middleware import EpisodeMcpShortcut, Guard, ViewerSplit
from .nemo_gym import NemoGym
from .openapi import openapi_document
from .openenv import OpenEnv
from .requests import no_query, parse_body
from .responses import error_response, json_response
from .runtime import tune_gc
from .settings import ServerSettings
from .step_rewards import StepRewards
from .ui import Viewer

__all__ = ["SimiaApp"]

log = logging.getLogger("simia.server")
RETRY_AFTER_S = 5
"""The Retry-After (seconds) of a 503 for a database that cannot be written or a server that is draining."""
E = TypeVar("E", bound=Episode)
_LIST_FILTERS = ("world", "status", "task", "limit", "offset")
LIST_LIMIT = 1000
"""The most episodes one `GET /v1/episodes` answers (and its default `limit`)."""


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
        self.rewards = StepRewards(self.service)
        """The step rewards of the episodes' calls: one tracker per episode, shared by MCP, OpenEnv and ORS."""
        self.openenv = OpenEnv(self.service, self.settings, self.rewards)
        self.mcp = McpEndpoints(
            self.service,
            security,
            max_sessions=self.settings.max_sessions,
            idle_timeout=self.settings.idle_timeout,
            rewards=self.rewards,
        )
        episode_gate = EpisodeGate(self.mcp.episode_app, self.service)
        routes = [
            Route("/healthz", self.healthz),
            Route("/metrics", self.metrics_endpoint),
            Route("/openapi.json", self.openapi),
            Route("/v1/worlds", self.list_worlds),
            Route("/v1/episodes", self.episodes, methods=["GET", "POST"]),  # one route: a 405 names both
            Route("/v1/episodes/{episode_id}", self.get_episode),
            Route("/v1/episodes/{episode_id}/fork", self.fork_episode, methods=["POST"]),
            Route("/v1/episodes/{episode_id}/end", self.end_episode, methods=["POST"]),
            Mount("/episodes/{episode_id}/user", app=EpisodeGate(self.mcp.user_app, self.service)),
            Mount("/episodes/{episode_id}", app=episode_gate),
            Mount("/worlds/{world}", app=WorldGate(self.mcp.world_app, self.mcp)),
            Mount("/nemo-gym/{world}", app=NemoGym(self.service).routes),
            Mount("/openenv/{world}", app=self.openenv.routes),
        ]
        inner = Starlette(
            routes=routes,
            lifespan=self._lifespan,
            exception_handlers={
                ApiError: self._api_error,
                StateError: self._state_error,
                StoreUnavailable: self._store_unavailable,
                HTTPException: http_error,
                ClientDisconnect: self._client_gone,
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
        await self.service.start()
        sweeper = asyncio.create_task(self._sweep())
        async with (
            self.mcp.episode_server.session_manager.run(),
            self.mcp.world_server.session_manager.run(),
            self.mcp.user_server.session_manager.run(),
        ):
            if self.settings.tune_gc:
                tune_gc()
            try:
                yield
            finally:
                sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeper
                await self.service.close()  # the real servers' sessions (processes, for command servers)

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
                await self.openenv.abandoned(set(abandoned))  # their idle WebSockets close
                for episode_id in abandoned:
                    self.rewards.forget(episode_id)

    async def _api_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        retry = getattr(exc, "retry_after", None)
        return JSONResponse(exc.body(), status_code=exc.status, headers={"Retry-After": str(retry)} if retry else None)

    async def _state_error(self, request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": {"code": "invalid_state", "message": str(exc)}}, status_code=400)

    async def _store_unavailable(self, request: Request, exc: Exception) -> Response:
        """The database is down or refused the request's write (disk full, read-only): 503, retry later."""
        log.warning("database unavailable: %s %s: %s", request.method, request.url.path, exc)
        message = "the database is unavailable (down, or its disk full or read-only); retry shortly"
        response = error_response(503, "database_unavailable", message)
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
        return response

    async def _client_gone(self, request: Request, exc: Exception) -> Response:
        """The client hung up before its body arrived: a normal end of a request, not a failure of the server (one
        INFO line; nobody reads the answer)."""
        log.info("%s %s: the client disconnected before sending its whole body", request.method, request.url.path)
        return error_response(400, "client_disconnected", "the request body was not received whole")

    async def _internal_error(self, request: Request, exc: Exception) -> Response:
        """A bug, not bad input: still the API's error shape (the traceback goes to the server log)."""
        return error_response(500, "internal_error", "internal server error; the server log has the details")

    def _base_url(self, request: Request) -> str:
        return (self.settings.public_url or str(request.base_url)).rstrip("/")

    def _episode(self, request: Request, record: Any, model: type[E]) -> E:
        """A stored episode as one of the wire models (`Episode` and its extensions)."""
        url = f"{self._base_url(request)}/episodes/{record.id}"
        fields = {**record.summary(), "mcp_url": f"{url}/mcp"}
        if self.service.worlds.get(record.world) is not None and self.service.worlds[record.world].user_tools:
            fields["user_mcp_url"] = f"{url}/user/mcp"
        if issubclass(model, EndedEpisode):
            fields["verdict"] = record.verdict
        return model.model_validate(fields)

    async def healthz(self, request: Request) -> Response:
        return json_response(Health(status="ok", worlds=len(self.service.worlds)))

    async def metrics_endpoint(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4")

    async def openapi(self, request: Request) -> Response:
        if self._openapi is None:
            self._openapi = openapi_document(requires_token=self.settings.requires_token)
        return JSONResponse({**self._openapi, "servers": [{"url": self._base_url(request)}]})

    async def list_worlds(self, request: Request) -> Response:
        no_query(request)
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
                tasks=[TaskInfo.of(t) for t in w.tasks],
                mcp_url=f"{base}/worlds/{w.name}/mcp",
            )
            for w in self.service.worlds.values()
        ]
        return json_response(WorldList(worlds=worlds))

    async def create_episode(self, request: Request) -> Response:
        body = await parse_body(request, CreateEpisode)
        episode = await self.service.create(
            body.world,
            task=body.task,
            seed=body.seed,
            principal=request.state.principal,
            perturbation=body.perturbation,
        )
        self.rewards.opened(episode)  # its calls' step rewards need no read
        return json_response(self._episode(request, episode, Episode), status=201)

    async def episodes(self, request: Request) -> Response:
        """`/v1/episodes`: GET lists them, POST creates one."""
        if request.method == "POST":
            return await self.create_episode(request)
        return await self.list_episodes(request)

    async def list_episodes(self, request: Request) -> Response:
        q = request.query_params
        for name in q:
            if name not in _LIST_FILTERS:
                raise BadRequest(f"unknown query parameter {name!r}; it takes: {', '.join(_LIST_FILTERS)}")
            if len(q.getlist(name)) > 1:
                raise BadRequest(f"query parameter {name!r} is given {len(q.getlist(name))} times; give it once")
        status = q.get("status")
        if status is not None and status not in {"active", "ended", "abandoned"}:
            raise BadRequest(f"status must be active, ended or abandoned, got {status!r}")
        limit = _count(q, "limit", LIST_LIMIT, 1, LIST_LIMIT)
        offset = _count(q, "offset", 0, 0, 10**9)
        world, task, principal = q.get("world"), q.get("task"), request.state.principal
        found = await self.store.list_episodes(
            world=world,
            status=status,
            task=task,
            principal=principal,
            limit=limit + 1,
            offset=offset,
            newest_first=True,
        )
        episodes, more = found[:limit], len(found) > limit
        if not found and not offset and (world is not None or task is not None):
            served = {name: [t.id for t in w.tasks] for name, w in self.service.worlds.items()}
            why = unmatched_filter(await self.store.task_stats(principal=principal), world, task, served)
            if why is not None:
                raise NotFound(f"{why} (served or with episodes here; GET /v1/worlds lists the served ones)")
        listed = [self._episode(request, e, Episode) for e in episodes]
        return json_response(EpisodeList(episodes=listed, more=more))

    async def get_episode(self, request: Request) -> Response:
        no_query(request)
        episode = await self.service.get(request.path_params["episode_id"], request.state.principal)
        events = await self.store.events(episode.id)
        detail = self._episode(request, episode, EpisodeDetail)
        detail.initial_state = await self.store.state_at(episode.id, 0)
        detail.state = apply_patches(detail.initial_state, [e.state_patch for e in events])  # the events just read
        detail.events = [Event.model_validate(e.public()) for e in events]
        detail.transcript, detail.tokens = episode.transcript, episode.tokens
        return json_response(detail)

    async def fork_episode(self, request: Request) -> Response:
        body = await parse_body(request, ForkEpisode)
        episode = await self.service.fork(
            request.path_params["episode_id"], step=body.step, principal=request.state.principal
        )
        self.rewards.opened(episode)
        return json_response(self._episode(request, episode, Episode), status=201)

    async def end_episode(self, request: Request) -> Response:
        body = await parse_body(request, EndEpisode)
        tokens = body.tokens.model_dump(exclude_none=True) if body.tokens is not None else None
        try:
            episode = await self.service.end(
                request.path_params["episode_id"], request.state.principal, body.transcript, tokens
            )
        except (StoreUnavailable, ApiError):
            raise  # infrastructure: answered 503 by `_store_unavailable`; an API error keeps its own status
        except SimiaError as exc:
            raise BadRequest(str(exc)) from None
        self.rewards.forget(episode.id)
        return json_response(self._episode(request, episode, EndedEpisode))


def _count(query: Any, name: str, default: int, low: int, high: int | None) -> int:
    """The integer query parameter `name` (`default` when absent), between `low` and `high`; `BadRequest` says the
    range otherwise."""
    text = query.get(name)
    if text is None:
        return default
    value = int(text) if text.isascii() and text.isdigit() else None
    if value is None or value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"{low} or more"
        raise BadRequest(f"{name} must be an integer {bound}, got {text!r}")
    return value
