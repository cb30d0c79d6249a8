"""`simia serve`: worlds as MCP endpoints with the HTTP API (or one episode over stdio)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import socket
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn
from simia.clients.prompt import agent_system_prompt
from simia.server import ServerSettings, SimiaApp, build_server
from simia.server.ors import OrsApp
from simia.server.settings import parse_named_token
from simia.server.slow_clients import timed_h11
from simia.server.stdio import serve_stdio
from simia.sim import __version__
from simia.sim.backends import Backend
from simia.sim.errors import SimiaError
from simia.sim.judging import Judge
from simia.sim.storage import EpisodeWorlds, Store, open_store, redact_url
from simia.sim.world import World

from ._common import (
    CliError,
    add_model_flags,
    add_worlds_dir,
    backend,
    default_db,
    http_url,
    load_world_set,
    one_world,
    open_db,
    positive,
    seed,
)

__all__ = ["DrainingServer", "compose", "register"]

log = logging.getLogger("simia.server")


def simia_version() -> str:
    return __version__


def compose(args: argparse.Namespace, open_store: Callable[[argparse.Namespace], Store]) -> tuple[SimiaApp, Backend]:
    """The app `simia serve ARGS` serves, and its simulator backend; every flag is checked before `open_store`
    opens the database, so bad input writes nothing."""
    replaying = (args.backend or "").startswith("replay:")  # checked first: its database holds the worlds served
    sim = backend(args.backend, args, max_concurrency=args.backend_concurrency) if replaying else None
    worlds = replayed_worlds(args.backend.removeprefix("replay:"), args) if replaying else load_world_set(args)
    if args.world:
        worlds = {name: one_world(worlds, name) for name in args.world}
    if not worlds:
        if args.worlds_dir and not replaying:  # its worlds were all invalid (each named above)
            folders = " ".join(str(d) for d in args.worlds_dir)
            raise CliError(f"no valid worlds to serve in {folders}: fix them (see `simia validate {folders}`)")
        raise CliError("no valid worlds to serve; pass --worlds-dir DIR (a folder of world folders)")
    if args.transport == "stdio":
        if len(worlds) != 1:
            raise CliError(
                f"--transport stdio serves one world: add --world NAME (loaded: {', '.join(sorted(worlds))})"
            )
        world = next(iter(worlds.values()))
        if args.task is not None and world.task(args.task) is None:
            ids = ", ".join(t.id for t in world.tasks) or "(this world has no tasks)"
            raise CliError(f"unknown task {args.task!r} in world {world.name!r}; tasks: {ids}")
    if sim is None:
        sim = backend(args.backend, args, max_concurrency=args.backend_concurrency)
    judge = Judge(backend(args.judge_backend, args) if args.judge_backend else sim, process=args.process_judge)
    try:
        settings = ServerSettings(
            host=args.host,
            port=args.port,
            tokens=tuple(args.token or ()),
            named_tokens=tuple(args.token_for or ()),
            allowed_hosts=tuple(args.allowed_host or ()),
            allowed_origins=tuple(args.allowed_origin or ()),
            max_argument_bytes=args.max_argument_bytes,
            max_calls_per_episode=args.max_calls,
            max_sim_tokens_per_episode=args.max_sim_tokens,
            idle_timeout=args.idle_timeout,
            max_live_episodes=args.max_live_episodes,
            max_sessions_per_principal=args.max_sessions_per_principal,
            max_live_episodes_per_principal=args.max_live_episodes_per_principal,
            max_real_sessions=args.max_real_sessions,
            max_failed_logins=args.max_failed_logins,
            max_transcript_bytes=args.max_transcript_bytes,
            ws_idle_timeout=args.ws_idle_timeout,
            header_timeout=args.header_timeout,
            body_timeout=args.body_timeout,
            public_url=args.public_url,
            ors_port=args.ors_port,
            tune_gc=True,
        )
    except ValueError as exc:  # a token no request could match, or one secret for two principals
        raise CliError(str(exc)) from None
    if args.transport == "http":
        _check_listen(args.host, args.port)
        if args.ors_port is not None:
            if args.ors_port == args.port:
                raise CliError(f"--ors-port {args.ors_port} is the --port too: give ORS a port of its own")
            _check_listen(args.host, args.ors_port)
    elif args.ors_port is not None:
        raise CliError("--ors-port serves over HTTP: leave it out with --transport stdio")
    return build_server(worlds, sim, open_store(args), settings, judge=judge), sim


def replayed_worlds(db: str, args: argparse.Namespace) -> dict[str, World]:
    """The worlds `--backend replay:DB` serves: each world as DB's newest episodes of it ran it, stored there, so a
    recording replays with no world folder (its answers are keyed by the world's hash). A `--worlds-dir` world
    that differs from the stored one is reported on stderr and the stored one served, as `simia export` does; a
    folder's world that no episode ran is served as it is."""
    folders = load_world_set(args) if args.worlds_dir else None
    target, shown = db.removeprefix("sqlite:///"), redact_url(db) if "://" in db else db

    async def read() -> tuple[dict[str, World], list[str]]:
        store = open_store(target, read_only=True)
        try:
            found = EpisodeWorlds(store, folders)
            return await found.latest(), found.notes()
        finally:
            await store.close()

    try:
        worlds, notes = asyncio.run(read())
    except (SimiaError, sqlite3.Error) as exc:
        raise CliError(f"replay:{shown}: cannot read its worlds ({exc}); run `simia db migrate --db {shown}`") from None
    for note in notes:
        print(note, file=sys.stderr)
    if not worlds:
        raise CliError(f"replay:{shown} holds no worlds and no episodes; pass --worlds-dir DIR with the recorded ones")
    return worlds


def _check_listen(host: str, port: int) -> None:
    """Refuse, before anything is written, an address this machine cannot listen on (uvicorn would find out
    only after the database is open, and exit with a log line)."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else "not a host name"
        raise CliError(f"--host {host!r}: {reason}; give an address of this machine, e.g. 127.0.0.1") from None
    for family, kind, proto, _, address in addresses:
        try:
            probe = socket.socket(family, kind, proto)
        except OSError:  # a family this machine lacks (IPv6): asyncio skips it too
            continue
        with probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's create_server does
            try:
                probe.bind(address)
            except OSError as exc:
                raise CliError(
                    f"cannot listen on {host}:{port}: {exc.strerror}; pick another --port or --host"
                ) from None


def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    app, sim = compose(args, lambda a: open_db(a.db, synchronous=a.synchronous))
    worlds = app.service.worlds
    if args.transport == "stdio":
        return _stdio(app, next(iter(worlds)), args)
    timed = timed_h11(app.settings.header_timeout, app.settings.body_timeout)  # slow clients are cut off
    config = uvicorn.Config(app, host=args.host, port=args.port, **_UVICORN, http=timed)
    sockets, port = None, args.port
    if args.port == 0:  # listening now: the banner names the port the system picked, and a client that read it
        sockets = [config.bind_socket()]  # there waits in the backlog until uvicorn accepts
        sockets[0].listen(config.backlog)
        port = sockets[0].getsockname()[1]
    base = args.public_url or f"http://{args.host}:{port}"
    print(f"simia {simia_version()} serving {len(worlds)} world(s) with backend {sim.spec}")
    print(f"  database: {redact_url(args.db) if '://' in args.db else Path(args.db).resolve()}")
    for name, world in worlds.items():
        print(f"  {name:<16} {len(world.tools):>3} tools  {len(world.tasks):>3} tasks  {base}/worlds/{name}/mcp")
    print(f'  episodes: POST {base}/v1/episodes {{"world": ...}} -> mcp_url {base}/episodes/{{id}}/mcp')
    print(
        "  a world URL opens a new episode for each MCP session: a client that reconnects for every call "
        "(LlamaIndex's BasicMCPClient) starts over each time; give it an episode's mcp_url"
    )
    auth = "bearer token required" if app.settings.requires_token else "none (local only)"
    ors = None
    if args.ors_port is not None:
        print(f"  ORS (Open Reward Standard): http://{args.host}:{args.ors_port} (every world is an environment)")
        ors_app = OrsApp(app.service, app.settings, app.drain, system_prompt=agent_system_prompt, rewards=app.rewards)
        ors_config = uvicorn.Config(ors_app, host=args.host, port=args.ors_port, **_UVICORN, lifespan="off", http=timed)
        ors = Listener(ors_config)
    print(f"  auth: {auth}; metrics: {base}/metrics", flush=True)
    DrainingServer(config, app, args.drain_timeout, ors).run(sockets)
    return 0


_UVICORN: dict[str, Any] = {"log_level": "warning", "timeout_graceful_shutdown": 1}


class Listener(uvicorn.Server):
    """A second listener of the process (`--ors-port`): the main server takes the signals, starts it before it
    listens itself, and stops it when it stops."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class DrainingServer(uvicorn.Server):
    """uvicorn, with a graceful first SIGTERM or Ctrl-C: the app drains (new requests get 503, those in flight
    finish, for at most `drain_timeout` seconds), then the server stops listening and the process exits 0.
    A second signal stops it at once (uvicorn's own handling)."""

    def __init__(
        self, config: uvicorn.Config, app: SimiaApp, drain_timeout: float, side: Listener | None = None
    ) -> None:
        super().__init__(config)
        self.simia = app
        self.drain_timeout = drain_timeout
        self.side = side
        self._side_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drainer: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start the side listener, if any, then this one: once the main port answers, both do."""
        if self.side is not None:
            self._side_task = asyncio.create_task(self.side.serve())
            while not self.side.started:
                if self._side_task.done():  # it could not listen (its error is logged): exit as uvicorn does
                    self._side_task.result()
                    raise SystemExit(1)
                await asyncio.sleep(0.01)
        await super().startup(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Stop the side listener (its calls in flight finish), then the main one."""
        if self.side is not None and self._side_task is not None:
            self.side.should_exit = True
            with contextlib.suppress(SystemExit):
                await self._side_task
        await super().shutdown(sockets)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """Serve until stopped, then close the store (its last group commit included)."""
        self._loop = asyncio.get_running_loop()
        try:
            await super().serve(sockets)
        finally:
            await self.simia.store.close()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.simia.drain.draining or self._loop is None:
            super().handle_exit(sig, frame)
            return
        self.simia.drain.start()
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self._drainer = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        drained = await self.simia.drain.wait(self.drain_timeout)
        if not drained:
            log.warning(
                "%d request(s) still running after --drain-timeout %.0f s: stopping anyway",
                self.simia.drain.in_flight,
                self.drain_timeout,
            )
        self.should_exit = True


def _stdio(app: SimiaApp, world: str, args: argparse.Namespace) -> int:
    async def run() -> None:
        try:
            await serve_stdio(app, world, task=args.task, seed=args.seed)
        finally:
            await app.store.close()

    asyncio.run(run())
    return 0


def _named_token(text: str) -> tuple[str, str]:
    """argparse type: `NAME=SECRET`, split at the first `=`."""
    try:
        return parse_named_token(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve worlds as MCP endpoints with an HTTP API")
    add_worlds_dir(p)
    p.add_argument("--world", action="append", metavar="NAME", help="serve only these worlds (repeatable)")
    p.add_argument(
        "--backend",
        metavar="SPEC",
        help="simulator model: local, openai:MODEL, anthropic:MODEL, openai-compatible:MODEL, "
        "scripted:FILE, replay:DB (default: local, or openai/anthropic when their key is set)",
    )
    add_model_flags(p)
    p.add_argument(
        "--backend-concurrency",
        type=positive,
        default=64,
        metavar="N",
        help="cap on simultaneous model requests (vLLM and llama.cpp queue without bound; default 64)",
    )
    p.add_argument(
        "--db",
        default=default_db(),
        metavar="PATH|URL",
        help="SQLite file, or postgresql://USER@HOST:PORT/DB for several replicas "
        "(default: $SIMIA_DB_URL, else simia.db)",
    )
    p.add_argument(
        "--synchronous",
        choices=["FULL", "NORMAL"],
        default="FULL",
        help="FULL survives power loss (default); NORMAL survives process crashes only",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument(
        "--port", type=_listen_port, default=8765, help="port (default: 8765; 0: a free one, named in the banner)"
    )
    p.add_argument(
        "--token",
        action="append",
        metavar="SECRET",
        help="require this bearer token, taken verbatim, '=' included (repeatable)",
    )
    p.add_argument(
        "--token-for",
        action="append",
        type=_named_token,
        metavar="NAME=SECRET",
        help="require a bearer token that names its principal: NAME (letters, digits, _ . -) ends at the "
        "first '=', the secret is the rest, '=' included (repeatable; a NAME may have several)",
    )
    p.add_argument(
        "--transport",
        choices=["http", "stdio"],
        default="http",
        help="http (default) or stdio (one episode per process, for desktop clients)",
    )
    p.add_argument("--task", metavar="ID", help="stdio only: the task of the episode")
    p.add_argument("--seed", type=seed, help="stdio only: the seed of the episode")
    p.add_argument(
        "--allowed-host",
        action="append",
        type=_nonempty,
        metavar="HOST[:PORT|:*]",
        help="Host header values to accept (DNS-rebinding protection; default: local names)",
    )
    p.add_argument(
        "--allowed-origin", action="append", type=_nonempty, metavar="ORIGIN", help="Origin header values to accept"
    )
    p.add_argument("--public-url", type=http_url, metavar="URL", help="base URL to put in mcp_url (behind a proxy)")
    p.add_argument(
        "--ors-port",
        type=_port,
        metavar="PORT",
        help="also serve the worlds over the Open Reward Standard (ORS) at the root of this port (same host, auth "
        "and database; for openreward clients and TRL's OpenRewardSpec)",
    )
    p.add_argument("--max-argument-bytes", type=positive, default=32_768, help="refuse larger tool arguments (32768)")
    p.add_argument("--max-calls", type=positive, default=500, help="tool calls per episode (500)")
    p.add_argument("--max-sim-tokens", type=positive, default=2_000_000, help="simulator tokens per episode (2000000)")
    p.add_argument(
        "--idle-timeout",
        type=_seconds,
        default=1800.0,
        help="seconds before an idle episode is marked abandoned (1800)",
    )
    p.add_argument("--max-live-episodes", type=positive, default=10_000, help="cap on active episodes (10000)")
    p.add_argument(
        "--max-live-episodes-per-principal",
        type=positive,
        default=5_000,
        help="cap on one token's active episodes, so that one token cannot take the server's; over it, 429 (5000)",
    )
    p.add_argument(
        "--max-sessions-per-principal",
        type=positive,
        default=2_500,
        help="cap on one token's ORS and OpenEnv sessions; over it, its own idle sessions make room, else 429 (2500)",
    )
    p.add_argument(
        "--max-failed-logins",
        type=positive,
        default=5,
        help="wrong bearer tokens one client address may send in 60 s; each further one is a 429 with Retry-After "
        "(a correct token is never slowed) (5)",
    )
    p.add_argument(
        "--max-transcript-bytes",
        type=positive,
        default=1_000_000,
        help="refuse (413) a posted transcript larger than this, as JSON, before the judge reads it (1000000)",
    )
    p.add_argument(
        "--ws-idle-timeout",
        type=_seconds,
        default=600.0,
        help="close an OpenEnv WebSocket silent this many seconds; one whose episode went idle closes with it (600)",
    )
    p.add_argument(
        "--header-timeout",
        type=_seconds,
        default=10.0,
        help="seconds a client may take to send a request's headers, on every listener; then it is disconnected (10)",
    )
    p.add_argument(
        "--body-timeout",
        type=_seconds,
        default=30.0,
        help="seconds a client may take to send a request's body after its headers; then it is disconnected (30)",
    )
    p.add_argument(
        "--max-real-sessions",
        type=positive,
        default=64,
        help="cap on open sessions with worlds' real servers, one per episode calling a tool routed real (64)",
    )
    p.add_argument(
        "--drain-timeout",
        type=_seconds,
        default=30.0,
        help="on SIGTERM, seconds to let calls in flight finish while new ones get 503; then exit 0 (30)",
    )
    p.add_argument("--judge-backend", metavar="SPEC", help="model of the judge (default: the --backend model)")
    p.add_argument(
        "--process-judge",
        action="store_true",
        help="also score every agent step useful, neutral or harmful (one more judge call per episode; the verdict's "
        "`process`)",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=_serve)


def _port(text: str) -> int:
    value = positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, got {value}")
    return value


def _listen_port(text: str) -> int:
    """argparse type of `--port`: a port, or 0 for one the system picks (tests and scripts read it off the banner)."""
    return 0 if text.strip() == "0" else _port(text)


def _nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("cannot be empty (an unset shell variable?)")
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value
