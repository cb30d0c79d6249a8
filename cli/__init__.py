"""The `simia` command line, the composition root: the only package that imports every layer.

Each subcommand parses flags, calls one library function and prints its result;
environment variables are read here and nowhere else.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simia.sim.loader import default_worlds_dir, load_worlds

__all__ = ["build_parser", "main"]


def _cmd_validate(args: argparse.Namespace) -> int:
    report = load_worlds(args.paths)
    for name, world in report.worlds.items():
        print(f"ok    {name}  ({world.source}: {len(world.tools)} tools, {len(world.tasks)} tasks)")
    problems = 0
    for error in report.errors:
        print(f"FAIL  {error.world}" + (f"  ({error.source})" if error.source else ""), file=sys.stderr)
        for issue in error.issues:
            print(f"  - {issue}", file=sys.stderr)
            problems += 1
    if not report.worlds and not report.errors:
        print("no worlds found (a world is a folder with world.yaml)", file=sys.stderr)
        return 1
    if problems:
        print(f"{problems} problem(s) in {len(report.errors)} world(s)", file=sys.stderr)
        return 1
    return 0


def _cmd_worlds(args: argparse.Namespace) -> int:
    dirs = args.worlds_dir or [default_worlds_dir()]
    report = load_worlds(dirs)
    rows = [("NAME", "TITLE", "TOOLS", "TASKS")]
    rows += [(w.name, w.title, str(len(w.tools)), str(len(w.tasks))) for w in report.worlds.values()]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    for error in report.errors:
        print(f"skipped invalid world {error.world!r}: run `simia validate` for details", file=sys.stderr)
    return 0


def _load_for_serve(args: argparse.Namespace) -> dict[str, Any]:
    report = load_worlds(args.worlds_dir or [default_worlds_dir()])
    for error in report.errors:
        print(
            f"warning: skipped invalid world {error.world!r} ({error.source}); run `simia validate` for details",
            file=sys.stderr,
        )
    worlds: dict[str, Any] = dict(report.worlds)
    if args.world:
        missing = [w for w in args.world if w not in worlds]
        if missing:
            raise SystemExit(f"error: unknown world(s) {', '.join(missing)}; loaded: {', '.join(sorted(worlds))}")
        worlds = {name: worlds[name] for name in args.world}
    if not worlds:
        raise SystemExit("error: no valid worlds to serve; pass --worlds-dir DIR (a folder of world folders)")
    return worlds


def _cmd_serve(args: argparse.Namespace) -> int:
    from simia.server.settings import ServerSettings
    from simia.sim.backends import resolve_backend
    from simia.sim.errors import BackendConfigError
    from simia.sim.simulator import Simulator
    from simia.sim.store import open_store

    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    worlds = _load_for_serve(args)
    try:
        backend = resolve_backend(
            args.backend, base_url=args.base_url, env=os.environ, max_concurrency=args.backend_concurrency
        )
    except BackendConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
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
    store = open_store(args.db, synchronous=args.synchronous)
    simulator = Simulator(backend, cache=store, max_argument_bytes=settings.max_argument_bytes)
    if args.transport == "stdio":
        return _serve_stdio(args, worlds, simulator, store, settings)
    import uvicorn
    from simia.server.app import build_app

    app = build_app(worlds, simulator, store, settings, judge=_judge_for(args, backend))
    base = args.public_url or f"http://{args.host}:{args.port}"
    print(f"simia {_version()} serving {len(worlds)} world(s) with backend {backend.spec}")
    print(f"  database: {Path(args.db).resolve()}")
    for name, world in worlds.items():
        print(f"  {name:<16} {len(world.tools):>3} tools  {len(world.tasks):>3} tasks  {base}/worlds/{name}/mcp")
    print(f'  episodes: POST {base}/v1/episodes {{"world": ...}} -> mcp_url {base}/episodes/{{id}}/mcp')
    print(
        f"  auth: {'bearer token required' if settings.tokens else 'none (local only)'}; metrics: {base}/metrics",
        flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=5)
    return 0


def _judge_for(args: argparse.Namespace, backend: Any) -> Any:
    from simia.server.episodes import judge_callable
    from simia.sim.backends import resolve_backend
    from simia.sim.judge import Judge

    judge_backend = (
        backend
        if not args.judge_backend
        else resolve_backend(args.judge_backend, base_url=args.base_url, env=os.environ)
    )
    return judge_callable(Judge(judge_backend))


def _cmd_judge(args: argparse.Namespace) -> int:
    import asyncio
    import json as _json

    from simia.sim.backends import resolve_backend
    from simia.sim.errors import BackendConfigError
    from simia.sim.judge import EpisodeView, Judge
    from simia.sim.store import open_store

    try:
        backend = (
            resolve_backend(args.backend, base_url=args.base_url, env=os.environ) if args.backend != "none" else None
        )
    except BackendConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    judge = Judge(backend)
    worlds = load_worlds(args.worlds_dir or [default_worlds_dir()]).worlds
    if args.adversarial:
        from simia.sim.adversarial import run_adversarial

        if "mock" not in worlds:
            raise SystemExit("error: the adversarial set runs on the bundled mock world; pass --worlds-dir with it")
        report = asyncio.run(run_adversarial(judge, worlds["mock"]))
        print(report.render(backend.spec if backend else "rules only"))
        return 0
    if not args.episodes:
        raise SystemExit("error: give EPISODE_ID... to re-judge (from --db), or --adversarial")

    async def run() -> int:
        store = open_store(args.db)
        failures = 0
        try:
            for episode_id in args.episodes:
                episode = await store.get_episode(episode_id)
                if episode is None:
                    print(f"{episode_id}: no such episode in {args.db}", file=sys.stderr)
                    failures += 1
                    continue
                world = worlds.get(episode.world)
                if world is None:
                    print(f"{episode_id}: world {episode.world!r} is not loaded (--worlds-dir)", file=sys.stderr)
                    failures += 1
                    continue
                events = await store.events(episode_id)
                task = world.task(episode.task) if episode.task else None
                verdict = await judge.judge(world, task, EpisodeView.of(episode, events, episode.transcript))
                await store.set_status(episode_id, episode.status, verdict=verdict)
                print(_json.dumps({"id": episode_id, **{k: verdict[k] for k in ("reward", "status", "reasons")}}))
        finally:
            await store.close()
        return 1 if failures else 0

    return asyncio.run(run())


def _serve_stdio(args: argparse.Namespace, worlds: dict[str, Any], simulator: Any, store: Any, settings: Any) -> int:
    import asyncio

    from simia.server.stdio import serve_stdio

    if len(worlds) != 1:
        raise SystemExit(
            f"error: --transport stdio serves one world: add --world NAME (loaded: {', '.join(sorted(worlds))})"
        )
    world = next(iter(worlds.values()))

    async def run() -> None:
        try:
            await serve_stdio(world, simulator, store, settings, task=args.task, seed=args.seed)
        finally:
            await store.close()

    asyncio.run(run())
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("simia")
    except PackageNotFoundError:
        return "dev"


def _cmd_rollout(args: argparse.Namespace) -> int:
    import asyncio

    from simia.clients.rollout import RolloutConfig, in_process_server, rollout, select_tasks
    from simia.sim.backends import resolve_backend
    from simia.sim.errors import BackendConfigError

    worlds = load_worlds(args.worlds_dir or [default_worlds_dir()]).worlds
    world = worlds.get(args.world)
    if world is None:
        raise SystemExit(f"error: unknown world {args.world!r}; loaded: {', '.join(sorted(worlds))}")
    try:
        tasks = select_tasks(world, args.tasks)
        agent = resolve_backend(args.agent, base_url=args.base_url, env=os.environ, max_concurrency=args.concurrency)
        user = resolve_backend(args.user, base_url=args.base_url, env=os.environ, max_concurrency=args.concurrency)
        sim = None if args.server else resolve_backend(args.sim_backend, base_url=args.base_url, env=os.environ)
    except (BackendConfigError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    out = Path(args.out)

    def config(server: str) -> RolloutConfig:
        return RolloutConfig(
            server=server,
            world=world,
            tasks=tasks,
            n=args.n,
            concurrency=args.concurrency,
            max_turns=args.max_turns,
            out=out,
            retries=args.retries,
            token=args.token,
            seed=args.seed,
        )

    async def run() -> Any:
        if sim is None:
            return await rollout(config(args.server), agent, user)
        out.mkdir(parents=True, exist_ok=True)
        async with in_process_server({world.name: world}, sim, out / "simia.db", sim) as url:
            return await rollout(config(url), agent, user)

    try:
        summary = asyncio.run(run())
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished runs are kept in {out / 'results.jsonl'}", file=sys.stderr)
        return 130
    print(summary.table())
    print(f"results: {out / 'results.jsonl'}  summary: {out / 'summary.json'}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    import asyncio

    from simia.clients.demo import run_demo
    from simia.sim.backends.local import LocalBackend

    worlds = load_worlds(args.worlds_dir or [default_worlds_dir()]).worlds
    if "retail" not in worlds:
        raise SystemExit("error: the demo runs the bundled retail world; it is missing from --worlds-dir")
    sim, agent, user, judge = (LocalBackend(slot=role) for role in ("sim", "agent", "user", "judge"))
    result = asyncio.run(
        run_demo(
            worlds["retail"],
            args.task,
            sim=sim,
            agent=agent,
            user=user,
            judge=judge,
            out_dir=Path(args.out),
            max_turns=args.max_turns,
        )
    )
    return 0 if result["episode_id"] else 1


def _cmd_export(args: argparse.Namespace) -> int:
    import asyncio

    from simia.training.export import export

    worlds = load_worlds(args.worlds_dir or [default_worlds_dir()]).worlds
    if not Path(args.db).is_file():
        raise SystemExit(f"error: no database at {args.db!r}; pass --db PATH (the file simia serve --db wrote)")
    report = asyncio.run(
        export(
            args.db,
            args.format,
            args.out,
            worlds,
            world=args.world,
            task=args.task,
            min_reward=args.min_reward,
            status=args.status,
            since=args.since,
        )
    )
    print(report.render())
    return 0


def _cmd_synth(args: argparse.Namespace) -> int:
    import asyncio

    from simia.sim.backends import resolve_backend
    from simia.sim.errors import BackendConfigError
    from simia.training.synth import SynthConfig, load_seeds, synthesize, synthesize_via_server

    worlds = load_worlds(args.worlds_dir or [default_worlds_dir()]).worlds
    world = worlds.get(args.world)
    if world is None:
        raise SystemExit(f"error: unknown world {args.world!r}; loaded: {', '.join(sorted(worlds))}")
    config = SynthConfig(
        n=args.n,
        out=Path(args.out),
        concurrency=args.concurrency,
        temperature=args.temperature,
        prefilter=not args.no_prefilter,
        dedup_threshold=args.dedup_threshold,
    )
    try:
        backend = resolve_backend(
            args.backend, base_url=args.base_url, env=os.environ, max_concurrency=args.concurrency
        )
    except BackendConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.via_server:
        report = asyncio.run(
            synthesize_via_server(world, args.via_server, backend, backend, config, min_reward=args.min_reward)
        )
    else:
        seeds = load_seeds(world, args.seeds)
        if not seeds:
            raise SystemExit(f"error: no seeds: {world.name!r} has no examples/; pass --seeds FILE.jsonl")
        report = asyncio.run(synthesize(world, seeds, backend, config))
    print(report.render())
    print(f"records: {config.out / 'synth.jsonl'}  report: {config.out / 'synth_report.json'}")
    return 0


def _worlds_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--worlds-dir",
        action="append",
        type=Path,
        metavar="DIR",
        help="folder of worlds (repeatable; default: ./tool_specs or the bundled worlds)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simia", description="Simulated MCP tool environments for agent training.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="validate world folders; non-zero exit with file and field on error")
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="a world folder or a folder of worlds")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("worlds", help="list worlds and their tools")
    _worlds_dir(p)
    p.set_defaults(func=_cmd_worlds)

    p = sub.add_parser("serve", help="serve worlds as MCP endpoints with an HTTP API")
    _worlds_dir(p)
    p.add_argument("--world", action="append", metavar="NAME", help="serve only these worlds (repeatable)")
    p.add_argument(
        "--backend",
        metavar="SPEC",
        help="simulator model: local, openai:MODEL, anthropic:MODEL, openai-compatible:MODEL, "
        "scripted:FILE, replay:DB (default: local, or openai/anthropic when their key is set)",
    )
    p.add_argument("--base-url", metavar="URL", help="server URL for openai-compatible (vLLM, SGLang, Ollama, ...)")
    p.add_argument(
        "--backend-concurrency",
        type=int,
        default=64,
        metavar="N",
        help="cap on simultaneous model requests (vLLM and llama.cpp queue without bound; default 64)",
    )
    p.add_argument("--db", default="simia.db", metavar="PATH", help="SQLite database (default: simia.db)")
    p.add_argument(
        "--synchronous",
        choices=["FULL", "NORMAL"],
        default="FULL",
        help="FULL survives power loss (default); NORMAL survives process crashes only",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default: 8765)")
    p.add_argument(
        "--token",
        action="append",
        metavar="TOKEN",
        help="require this bearer token (repeatable; NAME=SECRET names the principal)",
    )
    p.add_argument(
        "--transport",
        choices=["http", "stdio"],
        default="http",
        help="http (default) or stdio (one episode per process, for desktop clients)",
    )
    p.add_argument("--task", metavar="ID", help="stdio only: the task of the episode")
    p.add_argument("--seed", type=int, help="stdio only: the seed of the episode")
    p.add_argument(
        "--allowed-host",
        action="append",
        metavar="HOST[:PORT|:*]",
        help="Host header values to accept (DNS-rebinding protection; default: local names)",
    )
    p.add_argument("--allowed-origin", action="append", metavar="ORIGIN", help="Origin header values to accept")
    p.add_argument("--public-url", metavar="URL", help="base URL to put in mcp_url (behind a proxy)")
    p.add_argument("--max-argument-bytes", type=int, default=32_768, help="refuse larger tool arguments (32768)")
    p.add_argument("--max-calls", type=int, default=500, help="tool calls per episode (500)")
    p.add_argument("--max-sim-tokens", type=int, default=2_000_000, help="simulator tokens per episode (2000000)")
    p.add_argument(
        "--idle-timeout", type=float, default=1800.0, help="seconds before an idle episode is marked abandoned (1800)"
    )
    p.add_argument("--max-live-episodes", type=int, default=10_000, help="cap on active episodes (10000)")
    p.add_argument("--judge-backend", metavar="SPEC", help="model of the judge (default: the --backend model)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("judge", help="re-judge stored episodes, or run the adversarial judge set")
    p.add_argument("episodes", nargs="*", metavar="EPISODE_ID")
    p.add_argument(
        "--adversarial",
        action="store_true",
        help="run the adversarial transcript set and print the judge's false-positive rate",
    )
    p.add_argument(
        "--backend",
        metavar="SPEC",
        help="judge model (default: local, or openai/anthropic when their key is set); 'none': rules only",
    )
    p.add_argument("--base-url", metavar="URL", help="server URL for openai-compatible")
    p.add_argument("--db", default="simia.db", metavar="PATH", help="database of the episodes (default: simia.db)")
    _worlds_dir(p)
    p.set_defaults(func=_cmd_judge)

    p = sub.add_parser("rollout", help="run agents on a world's tasks and collect judged episodes")
    p.add_argument("--server", metavar="URL", help="a running simia serve (default: serve in process)")
    p.add_argument("--world", required=True, help="world to roll out in")
    p.add_argument("--tasks", "--task", default="all", metavar="all|ID|FILE", help="tasks to run (default: all)")
    p.add_argument("--agent", metavar="SPEC", help="agent model (backend SPEC; default: local or a keyed provider)")
    p.add_argument("--user", metavar="SPEC", help="user-simulator model (backend SPEC)")
    p.add_argument("--sim-backend", metavar="SPEC", help="simulator model when serving in process")
    p.add_argument("--base-url", metavar="URL", help="server URL for openai-compatible backends")
    p.add_argument("--n", type=int, default=1, help="episodes per task (default 1)")
    p.add_argument("--concurrency", type=int, default=4, help="episodes in flight (default 4)")
    p.add_argument("--max-turns", type=int, default=10, help="agent model calls per episode (default 10)")
    p.add_argument("--retries", type=int, default=2, help="fresh-episode retries after an infra failure (2)")
    p.add_argument("--seed", type=int, help="base seed for reproducible simulations")
    p.add_argument("--token", help="bearer token for --server")
    p.add_argument("--out", default="rollouts", metavar="DIR", help="results folder (default: rollouts)")
    _worlds_dir(p)
    p.set_defaults(func=_cmd_rollout)

    p = sub.add_parser("export", help="export logged episodes for SFT and RL")
    p.add_argument("--db", default="simia.db", metavar="PATH", help="database of the episodes (default: simia.db)")
    p.add_argument("--format", required=True, choices=["openai", "hf", "sharegpt", "hermes", "rl"])
    p.add_argument("--out", required=True, metavar="PATH", help="output file (JSONL), or folder / .parquet for hf")
    p.add_argument("--world", help="only this world")
    p.add_argument("--task", help="only this task")
    p.add_argument("--min-reward", type=float, help="only episodes with at least this reward")
    p.add_argument("--status", choices=["active", "ended", "abandoned"], help="only episodes with this status")
    p.add_argument("--since", metavar="WHEN", help="only episodes created since (ISO date or epoch seconds)")
    _worlds_dir(p)
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser("synth", help="Simia-SFT: amplify seed trajectories into many (or collect via rollouts)")
    p.add_argument("--world", required=True)
    p.add_argument("--seeds", metavar="FILE", help='JSONL of {"messages": [...]} (default: the world\'s examples/)')
    p.add_argument("--n", type=int, default=4, help="new trajectories per seed (or rollouts per task) (4)")
    p.add_argument("--backend", metavar="SPEC", help="the generating model (backend SPEC)")
    p.add_argument("--base-url", metavar="URL")
    p.add_argument("--out", default="synth", metavar="DIR", help="output folder (default: synth)")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--no-prefilter", action="store_true", help="skip the LLM pre-filter of seeds")
    p.add_argument("--dedup-threshold", type=float, default=0.9, help="near-duplicate Jaccard threshold (0.9)")
    p.add_argument("--via-server", metavar="URL", help="produce trajectories by rollouts against this simia server")
    p.add_argument("--min-reward", type=float, default=1.0, help="--via-server: keep episodes with this reward (1)")
    _worlds_dir(p)
    p.set_defaults(func=_cmd_synth)

    p = sub.add_parser("demo", help="offline end-to-end run on the embedded model")
    p.add_argument("--task", default="cancel_by_mistake", help="retail task to run (default: cancel_by_mistake)")
    p.add_argument("--max-turns", type=int, default=3, help="agent model calls (default 3)")
    p.add_argument("--out", default="simia-demo", metavar="DIR", help="output folder (default: simia-demo)")
    _worlds_dir(p)
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
