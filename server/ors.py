"""The Open Reward Standard (ORS, openrewardstandard.io) over simia's episodes, at the root of its own listener
(`simia serve --ors-port PORT`: the `openreward` client joins absolute paths onto the host, so ORS cannot live
under a prefix of the main port).

Every world is an environment; its tasks, by their `split` (default `train`), are the splits and the tasks; a
session is an episode of the task (created on the session's first tool call, so a session only probed for its
tools stores nothing); a tool call is an episode call (the same validation, committed before it is answered),
whose answer's `reward` is the call's shaped reward (`StepRewards`: the progress its state change made on the
task's checks; None for a task without checks); the terminal tool, hidden from the tool list as ORS does, ends
the episode: the judge's verdict gives the answer's `reward` (`Verdict.training_reward()`, None when masked) and
`finished`. `score_group` judges the episodes of a group. Same process, store, auth (`Authorization: Bearer`, or
the `X-API-Key` the `openreward` client sends) and drain as the main listener.

Routes (as the `openreward` package's reference server defines them; session routes need `X-Session-ID`, and a
path without its `{env}` segment means the environment the `X-Deployment` header names, or the only one):

    GET  /health, /version, /list_environments          POST /ping
    GET  /{env}/tools, /{env}/splits                    POST /{env}/tasks, /num_tasks, /task, /task_range
    POST /create_session (SSE), /create, /delete, /delete_session
    GET  /{env}/task_tools, /{env}/prompt, /{env}/messages
    POST /{env}/call (SSE: RunToolOutput), /{env}/score_group (SSE: ScoreGroupOutput)

A task spec (what `/tasks` lists and `/create` takes) is `{"id", "instruction", "user_hidden"?}`, and `/create` also
takes `seed`, `perturbation` (simia's fault injection), `group` (the sessions of one group key fork the first
one's episode at its start: a GRPO group) and `fork` + `step` (fork a given episode). A call is retry-safe: a
resent `/call` with the `task_id` the first answer streamed (the `openreward` client resends it after a broken
stream), or with the same `Idempotency-Key` header, answers the committed result instead of calling again.
The wire's shapes (bodies, answers, the SSE stream) are in `_ors_wire.py`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from simia.sim import __version__
from simia.sim.engine import INTERNAL_TEXT
from simia.sim.errors import SimiaError, StoreUnavailable
from simia.sim.wire import META_EPISODE
from simia.sim.world import Task, World, openai_tool_call
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ._ors_wire import (
    CreateSession,
    ScoreGroup,
    SplitQuery,
    TaskAt,
    TaskRange,
    TaskSpec,
    ToolCall,
    answer_stream,
    infra,
    masked_why,
    openai_transcript,
    parse,
    problems,
    refused,
    request_key,
    sse,
    sse_event,
    success,
    text_block,
    tool_output,
    verdict_json,
    verdict_output,
)
from .drain import Drain, DrainGate
from .episodes import EpisodeService
from .errors import ApiError, BadRequest, Conflict, NotFound
from .mcp import DATABASE_TEXT
from .middleware import Guard
from .sessions import SessionBook, TooManySessions
from .settings import ServerSettings
from .step_rewards import StepRewards

__all__ = ["TERMINAL_ARG", "OrsApp", "TaskSpec", "terminal_tool_name"]

log = logging.getLogger("simia.ors")
TERMINAL_ARG = "message"
"""The one argument of the terminal tool: the assistant's final message (ORS's harness passes it)."""
KEPT_CALLS = 32
"""How many of a session's latest calls a resent `/call` (same `task_id` or `Idempotency-Key`) is matched against in
memory; older ones are matched by the episode's retry window (`EpisodeService.call`'s `request_key`)."""
SPLIT_TYPES = ("train", "validation", "test")
BLOCK_TYPES = ["text", "image", "reasoning", "tool_call", "tool_result"]
"""What `/messages` and `score_group` candidates may carry (images and reasoning are accepted, and not judged)."""


def terminal_tool_name(world: World) -> str:
    """The name of `world`'s terminal tool: `end_episode`, or `simia_end_episode` where the world has its own
    `end_episode`."""
    names = {t.name for t in world.tools}
    return "end_episode" if "end_episode" not in names else "simia_end_episode"


@dataclass
class _Job:
    """One `/call` of a session: what was called, and its answer (a RunToolOutput as JSON) once it is done."""

    name: str
    arguments: dict[str, Any]
    task: asyncio.Task[str]


@dataclass
class _Session:
    """An ORS session: whose it is, what it was created from, and its episode once the first call opened it."""

    principal: str
    world: str | None = None
    task: str | None = None
    spec: TaskSpec | None = None
    episode_id: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    jobs: OrderedDict[str, _Job] = field(default_factory=OrderedDict)


class _ApiKeyAsBearer:
    """The `openreward` client sends its key as `X-API-Key`: read it as the bearer token when no `Authorization`
    header is there, so the guard behind it checks the key exactly as it checks the main listener's tokens."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers: list[tuple[bytes, bytes]] = scope["headers"]
            names = {k.lower() for k, _ in headers}
            keys = [v.strip() for k, v in headers if k.lower() == b"x-api-key"]
            if any(keys) and b"authorization" not in names:  # two keys become two tokens, which the guard refuses
                scope = {**scope, "headers": [*headers, *((b"authorization", b"Bearer " + key) for key in keys)]}
        await self.app(scope, receive, send)


class OrsApp:
    """The ORS listener's ASGI app over an `EpisodeService` (`.app`, or call it).

    Args:
        service: the episodes (the main listener's: the same store, limits and judge).
        settings: the same auth (tokens, hosts, origins) as the main listener; `max_sessions` caps the sessions
            kept in memory (the oldest are forgotten first).
        drain: the main listener's drain, so a SIGTERM drains both.
        system_prompt: the agent's system prompt under a world's policy (`/messages` serves it before the task's
            instruction); None serves the instruction alone.
    """

    def __init__(
        self,
        service: EpisodeService,
        settings: ServerSettings,
        drain: Drain,
        *,
        system_prompt: Callable[[str], str] | None = None,
        rewards: StepRewards | None = None,
    ) -> None:
        self.service = service
        self.settings = settings
        self.system_prompt = system_prompt
        self.rewards = rewards if rewards is not None else StepRewards(service)  # the app's: one per episode
        self.sessions: SessionBook[_Session] = SessionBook(
            "ORS sessions",
            total=settings.max_sessions,
            per_principal=settings.max_sessions_per_principal,
            flag="--max-sessions-per-principal",
            idle=lambda session: session.episode_id is None,  # never made a call: nothing in progress
        )
        self.groups: OrderedDict[tuple[str, str, str | None, int | None, str], str] = OrderedDict()
        routes = [
            Route("/health", self.health),
            Route("/version", self.version),
            Route("/list_environments", self.list_environments),
            Route("/ping", self.ping, methods=["POST"]),
            Route("/create_session", self.create_session, methods=["POST"]),
            Route("/create", self.create, methods=["POST"]),
            Route("/delete", self.delete, methods=["POST"]),
            Route("/delete_session", self.delete_session, methods=["POST"]),
        ]
        per_env: list[tuple[str, Callable[[Request], Awaitable[Response]], str]] = [
            ("tools", self.tools, "GET"),
            ("splits", self.splits, "GET"),
            ("tasks", self.tasks, "POST"),
            ("num_tasks", self.num_tasks, "POST"),
            ("task", self.task, "POST"),
            ("task_range", self.task_range, "POST"),
            ("task_tools", self.task_tools, "GET"),
            ("prompt", self.prompt, "GET"),
            ("messages", self.messages, "GET"),
            ("call", self.call, "POST"),
            ("score_group", self.score_group, "POST"),
        ]
        for suffix, handler, method in per_env:
            routes += [
                Route(f"/{suffix}", handler, methods=[method]),
                Route(f"/{{env}}/{suffix}", handler, methods=[method]),
            ]
        self.starlette = Starlette(
            routes=routes,
            exception_handlers={ApiError: self._api_error, HTTPException: self._http_error, Exception: self._bug},
        )
        self.app: ASGIApp = DrainGate(_ApiKeyAsBearer(Guard(self.starlette, settings)), drain)
        self._running: set[asyncio.Task[str]] = set()  # the jobs that run on after their client went away

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)

    def _start(self, work: Awaitable[str]) -> asyncio.Task[str]:
        """Run `work` as a job that outlives its request (a resend finds its answer), holding it until done."""
        job: asyncio.Task[str] = asyncio.ensure_future(work)
        self._running.add(job)
        job.add_done_callback(self._done)
        return job

    def _done(self, job: asyncio.Task[str]) -> None:
        self._running.discard(job)
        if not job.cancelled():
            job.exception()  # retrieved here too: a stream whose client went away never reads it

    @staticmethod
    def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        body = {"detail": message, "error": {"code": code, "message": message}}
        return JSONResponse(body, status_code=status, headers=headers)

    async def _api_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        retry = {"Retry-After": str(exc.retry_after)} if isinstance(exc, TooManySessions) else None
        return self._error(exc.status, exc.code, exc.message, retry)

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return self._error(404, "not_found", f"no ORS route {request.url.path!r}")
        return self._error(exc.status_code, "method_not_allowed", f"{request.method} is not allowed on this route")

    async def _bug(self, request: Request, exc: Exception) -> Response:
        if isinstance(exc, StoreUnavailable):
            message = "the database is unavailable (down, or its disk full or read-only); retry shortly"
            return self._error(503, "database_unavailable", message, {"Retry-After": "5"})
        log.exception("ORS request failed: %s %s", request.method, request.url.path)
        return self._error(500, "internal_error", "internal server error; the server log has the details")

    def _world(self, request: Request, name: str | None = None) -> World:
        """The environment a request is about: `name` (a `/create` body's), the path's `{env}`, else the one the
        `X-Deployment` header names, else the only one served."""
        worlds = self.service.worlds
        by_lower = {w.lower(): w for w in worlds}
        known = ", ".join(sorted(worlds))
        wanted = name or request.path_params.get("env")
        if wanted is not None:
            found = by_lower.get(wanted.lower())
            if found is None:
                raise NotFound(f"unknown environment {wanted!r}; environments: {known}")
            return worlds[found]
        deployment = (request.headers.get("x-deployment") or "").rsplit("/", 1)[-1].lower()
        if deployment in by_lower:
            return worlds[by_lower[deployment]]
        if len(worlds) == 1:
            return next(iter(worlds.values()))
        raise NotFound(
            f"which environment? this server serves {known}: name one in the path (/{{env}}/...) or as the client's "
            "environment (client.environments.get(NAME), OpenRewardSpec(URL, env_name=NAME))"
        )

    @staticmethod
    def _splits(world: World) -> list[str]:
        names = {t.split for t in world.tasks}
        return [s for s in SPLIT_TYPES if s in names] + sorted(names - set(SPLIT_TYPES))

    def _split_tasks(self, world: World, split: str) -> list[Task]:
        if split not in self._splits(world):
            splits = ", ".join(self._splits(world)) or "(none: the world has no tasks)"
            raise BadRequest(f"Invalid split {split!r} of environment {world.name!r}; splits: {splits}")
        return [t for t in world.tasks if t.split == split]

    @staticmethod
    def _spec(task: Task) -> dict[str, Any]:
        spec: dict[str, Any] = {"id": task.id, "instruction": task.instruction}
        if task.user_hidden is not None:
            spec["user_hidden"] = task.user_hidden
        return spec

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": __version__, "build_sha": None, "server": "simia"})

    async def list_environments(self, request: Request) -> Response:
        return JSONResponse(list(self.service.worlds))

    async def tools(self, request: Request) -> Response:
        return JSONResponse(self._tool_list(self._world(request)))

    def _tool_list(self, world: World) -> dict[str, Any]:
        return {
            "tools": [
                {"name": t.name, "description": t.description or t.title or "", "input_schema": t.input_schema}
                for t in world.tools
            ],
            "terminal_tool": {
                "name": terminal_tool_name(world),
                "arg": TERMINAL_ARG,
                "description": "End the episode with the assistant's final message; the judge scores it.",
            },
            "supports_score_group": True,
            "message_block_types": BLOCK_TYPES,
        }

    async def splits(self, request: Request) -> Response:
        world = self._world(request)
        return JSONResponse([{"name": s, "type": s if s in SPLIT_TYPES else "validation"} for s in self._splits(world)])

    async def tasks(self, request: Request) -> Response:
        world = self._world(request)
        body = await parse(request, SplitQuery)
        tasks = [self._spec(t) for t in self._split_tasks(world, body.split)]
        return JSONResponse({"tasks": tasks, "env_name": world.name})

    async def num_tasks(self, request: Request) -> Response:
        world = self._world(request)
        body = await parse(request, SplitQuery)
        return JSONResponse({"num_tasks": len(self._split_tasks(world, body.split))})

    async def task(self, request: Request) -> Response:
        world = self._world(request)
        body = await parse(request, TaskAt)
        return JSONResponse({"task": self._spec(self._task_at(world, body.split, body.index)), "env_name": world.name})

    def _task_at(self, world: World, split: str, index: int) -> Task:
        tasks = self._split_tasks(world, split)
        if not -len(tasks) <= index < len(tasks):
            raise BadRequest(f"Invalid index {index}: split {split!r} has {len(tasks)} task(s)")
        return tasks[index]

    async def task_range(self, request: Request) -> Response:
        world = self._world(request)
        body = await parse(request, TaskRange)
        tasks = self._split_tasks(world, body.split)[slice(body.start, body.stop)]
        return JSONResponse({"tasks": [self._spec(t) for t in tasks], "env_name": world.name})

    def _session(self, request: Request, *, created: bool = True) -> tuple[str, _Session]:
        """The request's session (`X-Session-ID`), if it is the principal's; `created`: it must have had `/create`."""
        sid = (request.headers.get("x-session-id") or "").strip()
        if not sid:
            raise BadRequest("X-Session-ID header is required; open a session with POST /create_session")
        session = self.sessions.get(sid)
        if session is None or session.principal != request.state.principal:
            raise NotFound(f"no session {sid[:16]!r}; open one with POST /create_session")
        if created and session.world is None:
            raise NotFound("Active environment not found: POST /create with the session's task first")
        if created and "env" in request.path_params:
            world = self._world(request)
            if world.name != session.world:
                raise BadRequest(f"session {sid[:16]!r} is of environment {session.world!r}, not {world.name!r}")
        return sid, session

    async def create_session(self, request: Request) -> Response:
        sid = secrets.token_urlsafe(24)
        principal = request.state.principal
        self.sessions.add(sid, principal, _Session(principal=principal))

        async def events() -> AsyncIterator[str]:
            yield sse_event("task_id", sid)
            yield sse_event("end", "")

        return sse(events())

    async def create(self, request: Request) -> Response:
        """Bind a session to its environment and task (the episode itself opens with the first call)."""
        sid, session = self._session(request, created=False)
        body = await parse(request, CreateSession)
        if session.world is not None:
            raise BadRequest("Session already exists: it was created before; open another with POST /create_session")
        if body.toolset_name is not None:
            raise BadRequest("simia environments have no built-in toolsets: leave toolset_name out")
        world = self._world(request, body.env_name)
        if body.task_spec is None:
            assert body.split is not None and body.index is not None
            spec = TaskSpec(id=self._task_at(world, body.split, body.index).id)
        else:
            try:
                spec = TaskSpec.model_validate(body.task_spec, strict=True)  # "7" or true is no seed
            except ValidationError as exc:
                raise BadRequest(f"task_spec: {problems(exc)}") from None
        task = spec.id
        if spec.fork is not None:
            parent = await self.service.get(spec.fork, session.principal)
            if parent.world != world.name:
                raise BadRequest(f"episode {spec.fork!r} is of world {parent.world!r}, not {world.name!r}")
            if spec.step is not None and spec.step > parent.seq:
                raise BadRequest(f"step must be between 0 and {parent.seq} (the episode's last step), got {spec.step}")
            task = parent.task
        if task is None or world.task(task) is None:
            ids = ", ".join(t.id for t in world.tasks) or "(this world has no tasks)"
            raise BadRequest(f"unknown task {task!r} in environment {world.name!r}; tasks: {ids}")
        session.world, session.task, session.spec = world.name, task, spec
        return JSONResponse({"sid": sid})

    async def delete(self, request: Request) -> Response:
        """End the session's episode (judged, as closing a world URL's MCP session does) and forget the session."""
        sid = (request.headers.get("x-session-id") or "").strip()
        session = self.sessions.get(sid)
        if session is not None and session.principal == request.state.principal:
            async with session.lock:
                if session.episode_id is not None:
                    episode = await self.service.get(session.episode_id, session.principal)
                    if episode.status == "active":
                        await self.service.end(
                            episode.id, session.principal, transcript_of=lambda: self._transcript(session, None)
                        )
                    self.rewards.forget(episode.id)
                self.sessions.pop(sid)
        return JSONResponse({"sid": sid})

    async def delete_session(self, request: Request) -> Response:
        sid = (request.headers.get("x-session-id") or "").strip()
        session = self.sessions.get(sid)
        if session is not None and session.principal == request.state.principal and session.episode_id is None:
            self.sessions.pop(sid)  # a session with an episode is ended by /delete, which comes first
        return JSONResponse({"sid": sid})

    async def ping(self, request: Request) -> Response:
        self._session(request, created=False)
        return JSONResponse({"status": "ok"})

    async def task_tools(self, request: Request) -> Response:
        _, session = self._session(request)
        return JSONResponse(self._tool_list(self.service.world(str(session.world))))

    def _prompt_messages(self, session: _Session) -> list[dict[str, Any]]:
        """The task's prompt as ORS messages: the agent's system prompt under the world's policy (when the server
        has one), then the instruction as the user turn."""
        world = self.service.world(str(session.world))
        task = world.task(str(session.task))
        assert task is not None  # checked by /create; worlds do not change while serving
        messages = []
        if self.system_prompt is not None:
            messages.append({"role": "system", "blocks": [text_block(self.system_prompt(world.policy))]})
        messages.append({"role": "user", "blocks": [text_block(task.instruction)]})
        return messages

    async def messages(self, request: Request) -> Response:
        _, session = self._session(request)
        return JSONResponse(self._prompt_messages(session))

    async def prompt(self, request: Request) -> Response:
        """The messages flattened to blocks, as ORS flattens a conversation for `/prompt` (a `[role]` header before
        each message's blocks; a lone user message is its blocks)."""
        _, session = self._session(request)
        messages = self._prompt_messages(session)
        if len(messages) == 1:
            return JSONResponse(messages[0]["blocks"])
        blocks = []
        for message in messages:
            blocks += [{**text_block(f"[{message['role']}]"), "detail": {"role": message["role"]}}, *message["blocks"]]
        return JSONResponse(blocks)

    async def _episode(self, session: _Session) -> str:
        """The session's episode, opened on first use: created with the task and seed, or forked (a `fork`, or
        the first episode of the session's group)."""
        if session.episode_id is not None:
            return session.episode_id
        spec, world, principal = session.spec, str(session.world), session.principal
        assert spec is not None
        if spec.fork is not None:
            episode = await self.service.fork(spec.fork, step=spec.step, principal=principal)
        else:
            key = (principal, world, spec.id, spec.seed, spec.group or "")
            base = self.groups.get(key) if spec.group is not None else None
            if base is not None:
                episode = await self.service.fork(base, step=0, principal=principal)
            else:
                episode = await self.service.create(
                    world, task=spec.id, seed=spec.seed, principal=principal, perturbation=spec.perturbation
                )
                if spec.group is not None:
                    self.groups[key] = episode.id
                    while len(self.groups) > self.settings.max_sessions:
                        self.groups.popitem(last=False)
        self.rewards.opened(episode)
        session.episode_id = episode.id
        return episode.id

    async def _transcript(self, session: _Session, final: str | None) -> list[dict[str, Any]]:
        """The session as an OpenAI transcript, for the judge: its prompt, the calls the server executed with the
        results it returned, and the assistant's final message."""
        transcript = []
        for message in self._prompt_messages(session):
            transcript.append({"role": message["role"], "content": message["blocks"][0]["text"]})
        assert session.episode_id is not None
        for event in await self.service.store.events(session.episode_id):
            if not event.counts_as_call:
                continue
            call_id = f"call_{event.seq}"
            transcript.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [openai_tool_call(call_id, event.tool, event.arguments)],
                }
            )
            transcript.append({"role": "tool", "tool_call_id": call_id, "content": event.text})
        if final is not None:
            transcript.append({"role": "assistant", "content": final})
        return transcript

    async def call(self, request: Request) -> Response:
        sid, session = self._session(request)
        body = await parse(request, ToolCall)
        task_id = body.task_id or request.headers.get("idempotency-key") or secrets.token_hex(16)
        job = session.jobs.get(task_id)
        if job is not None and (job.name, job.arguments) != (body.name, body.input):
            raise BadRequest(f"task_id / Idempotency-Key {task_id[:32]!r} was used for another call; use a new one")
        if job is None:
            key = request_key(session.principal, sid, task_id, body.name, body.input)
            runner = self._start(self._run_call(session, body.name, body.input, key))
            job = session.jobs[task_id] = _Job(body.name, body.input, runner)
            while len(session.jobs) > KEPT_CALLS:
                session.jobs.popitem(last=False)
        return sse(answer_stream(task_id, job.task))

    async def _run_call(self, session: _Session, name: str, arguments: dict[str, Any], key: str) -> str:
        """One call as a RunToolOutput (JSON). The boundary: every failure is an answer, never an exception."""
        world = self.service.world(str(session.world))
        try:
            if name == terminal_tool_name(world):
                return await self._finish(session, arguments)
            async with session.lock:
                episode_id = await self._episode(session)
            event = await self.service.call(episode_id, session.principal, name, arguments, request_key=key)
        except Conflict:
            return refused("episode_finished", f"{name!r} was not run: the episode has ended (its verdict is given)")
        except ApiError as exc:
            return infra(exc.message, exc.code, session.episode_id)
        except StoreUnavailable as exc:
            log.warning("ORS call failed: episode=%s tool=%s: %s", session.episode_id, name, exc)
            return infra(DATABASE_TEXT, "database_unavailable", session.episode_id)
        except Exception:
            log.exception("ORS call failed: episode=%s tool=%s", session.episode_id, name)
            return infra(INTERNAL_TEXT, "internal_error", session.episode_id)
        try:  # every event is folded, refused ones too: the next call's reward then needs no read
            step = await self.rewards.step(episode_id, event)
        except StoreUnavailable as exc:  # the call stands, committed: only its reward could not be read
            log.warning("ORS call reward unread: episode=%s seq=%d: %s", episode_id, event.seq, exc)
            step = None
        if event.error_code == "unknown_tool":
            tools = ", ".join(t.name for t in world.tools)
            return refused("not_found", f"{name[:64]!r} is not a valid tool; tools: {tools}")
        if event.error_code == "invalid_arguments":
            return refused("input_validation", f"Tool input validation error: {event.text}")
        return success(tool_output(event, episode_id, step))

    async def _finish(self, session: _Session, arguments: dict[str, Any]) -> str:
        """The terminal tool: end the episode with the session's transcript, once; a repeat answers the verdict
        given the first time."""
        message = arguments.get(TERMINAL_ARG, "")
        if set(arguments) - {TERMINAL_ARG} or not isinstance(message, str):
            return refused(
                "input_validation", f"Tool input validation error: the terminal tool takes one string, {TERMINAL_ARG!r}"
            )
        async with session.lock:
            episode_id = await self._episode(session)
            episode = await self.service.get(episode_id, session.principal)
            if episode.status == "active" or episode.verdict is None:
                try:  # the transcript is read under the episode's lock: every call acknowledged before is in it
                    episode = await self.service.end(
                        episode_id, session.principal, transcript_of=lambda: self._transcript(session, message)
                    )
                except (StoreUnavailable, ApiError) as exc:
                    text = DATABASE_TEXT if isinstance(exc, StoreUnavailable) else exc.message
                    return success(
                        {
                            "blocks": [text_block(f"The episode could not be ended: {text}")],
                            "metadata": {META_EPISODE: episode_id},
                            "reward": None,
                            "finished": False,
                        }
                    )
                except SimiaError as exc:
                    return refused("input_validation", str(exc))
        self.rewards.forget(episode_id)
        return success(verdict_output(episode))

    async def score_group(self, request: Request) -> Response:
        """Judge a group's rollouts: each candidate names its session (`{"sid": ...}`) or episode
        (`{"episode_id": ...}`) in its metadata; an active one is ended with the candidate's messages as its
        transcript. A masked verdict fails the group (ORS: never a fabricated 0)."""
        _, session = self._session(request)
        body = await parse(request, ScoreGroup)
        targets: list[tuple[str, list[dict[str, Any]]]] = []
        for i, candidate in enumerate(body.candidates):
            meta = candidate.metadata or {}
            episode_id = meta.get("episode_id")
            sid = meta.get("sid")
            if isinstance(sid, str) and episode_id is None:
                other = self.sessions.get(sid)
                if other is None or other.principal != session.principal:
                    raise NotFound(f"candidate {i}: no session {sid[:16]!r}")
                async with other.lock:
                    episode_id = await self._episode(other) if other.world is not None else None
            if not isinstance(episode_id, str):
                raise BadRequest(
                    f"candidate {i} names no rollout: put its session id (metadata {{'sid': session.sid}}) or "
                    "its episode id (metadata {'episode_id': ...}) in its metadata"
                )
            episode = await self.service.get(episode_id, session.principal)
            if episode.world != session.world:
                raise BadRequest(f"candidate {i}: episode {episode_id!r} is of world {episode.world!r}")
            targets.append((episode_id, openai_transcript(candidate.messages)))
        task_id = body.task_id or secrets.token_hex(16)
        return sse(answer_stream(task_id, self._start(self._score(session.principal, targets))))

    async def _score(self, principal: str, targets: list[tuple[str, list[dict[str, Any]]]]) -> str:
        scores = []
        for i, (episode_id, transcript) in enumerate(targets):
            episode = await self.service.get(episode_id, principal)
            if episode.status == "active" or episode.verdict is None:
                episode = await self.service.end(
                    episode_id, principal, transcript if episode.status == "active" else None
                )
            verdict = episode.verdict
            reward = verdict.training_reward() if verdict is not None else None
            if reward is None:
                why = masked_why(verdict)
                raise SimiaError(f"candidate {i} (episode {episode_id}) has no usable reward: {why}")
            scores.append({"reward": reward, "metadata": {META_EPISODE: episode_id, "verdict": verdict_json(verdict)}})
        return json.dumps({"scores": scores})
