"""`simia serve` on the UNSAFE store: the durability test's control server (test code only).

Run as `python tests/server/unsafe_serve.py <simia serve arguments>` (HTTP transport).
It parses the arguments with simia's own parser and composes the server exactly as
`simia serve` does, except that the store acknowledges calls before committing them.
"""

from __future__ import annotations

import logging
import os
import sys

import uvicorn
from simia.cli import build_parser
from simia.server.app import build_app
from simia.server.episodes import judge_callable
from simia.server.settings import ServerSettings
from simia.sim.backends import resolve_backend
from simia.sim.judge import Judge
from simia.sim.loader import default_worlds_dir, load_worlds
from simia.sim.simulator import Simulator
from unsafe_store import UnsafeStore


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(["serve", *argv])
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    worlds = dict(load_worlds(args.worlds_dir or [default_worlds_dir()]).worlds)
    if args.world:
        worlds = {name: worlds[name] for name in args.world}
    backend = resolve_backend(
        args.backend, base_url=args.base_url, env=os.environ, max_concurrency=args.backend_concurrency
    )
    settings = ServerSettings(
        host=args.host,
        port=args.port,
        tokens=tuple(args.token or ()),
        allowed_hosts=tuple(args.allowed_host or ()),
        allowed_origins=tuple(args.allowed_origin or ()),
        max_argument_bytes=args.max_argument_bytes,
        max_calls_per_episode=args.max_calls,
        max_sim_tokens_per_episode=args.max_sim_tokens,
        idle_timeout=args.idle_timeout,
        max_live_episodes=args.max_live_episodes,
        public_url=args.public_url,
        tune_gc=True,
    )
    store = UnsafeStore(args.db, synchronous=args.synchronous)
    simulator = Simulator(backend, cache=store, max_argument_bytes=settings.max_argument_bytes)
    judge_backend = (
        backend
        if not args.judge_backend
        else resolve_backend(args.judge_backend, base_url=args.base_url, env=os.environ)
    )
    app = build_app(worlds, simulator, store, settings, judge=judge_callable(Judge(judge_backend)))
    print(f"UNSAFE control server (acknowledges before committing) on http://{args.host}:{args.port}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=5)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
