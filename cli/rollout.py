"""`simia rollout`: run agents on a world's tasks against a server (or one served in process)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from simia.clients.api import ServerUnreachable, SimiaApiError, SimiaClient
from simia.clients.curriculum import Curriculum, plan, read_history
from simia.clients.rollout import RolloutConfig, Summary, rollout, select_tasks
from simia.sim.backends import Backend
from simia.sim.wire import TaskInfo, WorldInfo
from simia.sim.world import PERSONAS, World, unknown_persona

from ._common import (
    SEED_LIMIT,
    CliError,
    add_model_flags,
    add_worlds_dir,
    backend,
    bearer_token,
    http_url,
    in_process_server,
    load_world_set,
    one_world,
    open_db,
    positive,
    seed,
    whole,
    writable_dir,
)

__all__ = ["register"]

MAX_EPISODES = 100_000
"""Episodes one run may plan: every run is planned up front, so a huge `--n` would fill the memory first."""


def _tasks(args: argparse.Namespace, world: WorldInfo) -> list[TaskInfo]:
    """The tasks `--tasks` names, checked with `--n` and `--seed` against what one run can do."""
    try:
        tasks = select_tasks(world, args.tasks)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    except RecursionError:
        raise CliError(f"--tasks {args.tasks!r}: a line's JSON is nested too deeply to read") from None
    if not tasks:
        raise CliError(f"world {world.name!r} has no tasks to roll out")
    planned = len(tasks) * args.n
    if planned > MAX_EPISODES:
        raise CliError(
            f"--n {args.n} x {len(tasks)} task(s) is {planned} episodes; one run does at most {MAX_EPISODES} "
            "(lower --n or pick fewer --tasks)"
        )
    if args.seed is not None and args.seed + (planned - 1) * 1000 + args.retries > SEED_LIMIT:
        raise CliError(
            f"--seed {args.seed} is too large: run i uses seed + 1000 x i (+ its retry), and seeds stop at 2**62; "
            "use a smaller --seed"
        )
    return tasks


def _info(world: World) -> WorldInfo:
    """What a server would answer about `world`, for checking `--tasks` before one is started."""
    return WorldInfo(name=world.name, tasks=[TaskInfo.of(t) for t in world.tasks])


def _create(out: Path) -> Path:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot create --out folder {str(out)!r}: {exc.strerror}") from None
    return out


def _history_db(args: argparse.Namespace, out: Path) -> str | None:
    """The database `--curriculum` reads: the one it names, or in process the rollout's own (None: no curriculum)."""
    if args.curriculum is None:
        return None
    if args.curriculum:
        if "://" not in args.curriculum and not Path(args.curriculum).is_file():
            raise CliError(
                f"--curriculum {args.curriculum!r}: no database there; pass the file `simia serve --db` wrote "
                "(or its postgresql:// URL)"
            )
        return str(args.curriculum)
    if args.server:
        raise CliError(
            "--curriculum with --server reads the server's recorded episodes: pass its database, "
            "--curriculum PATH|URL (what `simia serve --db` writes)"
        )
    return str(out / "simia.db")


async def _curriculum(db: str, world: str, tasks: list[TaskInfo], groups: int) -> Curriculum:
    store = open_db(db)
    try:
        return plan([t.id for t in tasks], await read_history(store, world), groups)
    finally:
        await store.close()


async def _run(
    args: argparse.Namespace, server: str, agent: Backend, user: Backend | None, out: Path, history: str | None
) -> Summary:
    """Ask the server for the world (a world that exists only there works), then roll out (the tasks a
    curriculum picks from `history`, when given)."""
    async with SimiaClient(server, token=args.token) as api:
        try:
            world = await api.world(args.world)
        except ServerUnreachable as exc:
            raise CliError(f"{exc}; start it with `simia serve` or check --server") from None
        except SimiaApiError as exc:
            raise CliError(exc.message if exc.code == "not_found" else str(exc)) from None
    tasks = _tasks(args, world)
    attempts = None
    if history is not None:
        curriculum = await _curriculum(history, world.name, tasks, len(tasks))
        print(f"curriculum from {history}: {len(tasks)} group(s) of {args.n}\n{curriculum.table()}\n", flush=True)
        (out / "curriculum.json").write_text(json.dumps(curriculum.as_json(), indent=1), encoding="utf-8")
        attempts = curriculum.attempts(args.n)
    config = RolloutConfig(
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
        attempts=attempts,
        personas=args.personas,
    )
    return await rollout(config, agent, user)


def _rollout(args: argparse.Namespace) -> int:
    out = writable_dir(args.out, "--out")
    history = _history_db(args, out)
    agent = backend(args.agent, args, max_concurrency=args.concurrency)
    user = backend(args.user, args, max_concurrency=args.concurrency)

    async def run() -> Summary:
        if args.server:
            return await _run(args, args.server, agent, user, out, history)
        world = one_world(load_world_set(args), args.world)
        _tasks(args, _info(world))  # before the server writes its database
        sim = backend(args.sim_backend, args)
        async with in_process_server({world.name: world}, sim, _create(out) / "simia.db", sim) as url:
            return await _run(args, url, agent, user, out, history)

    try:
        summary = asyncio.run(run())
    except KeyboardInterrupt:  # before the runs started
        print(f"\ninterrupted: finished runs are kept in {out / 'results.jsonl'}", file=sys.stderr)
        return 130
    print(summary.table())
    print(summary.cost_line())
    print(f"results: {out / 'results.jsonl'} (appended, every run)  summary: {out / 'summary.json'} (this run)")
    if summary.interrupted:  # Ctrl-C: `rollout` stopped the runs and kept what finished
        print(f"interrupted: {len(summary.results)} finished run(s) are kept", file=sys.stderr)
        return 130
    if not summary.succeeded:
        failed = summary.results[-1].error if summary.results else "nothing ran"
        print(f"error: no episode was judged ({failed})", file=sys.stderr)
        return 1
    return 0


def _personas(text: str) -> list[str]:
    """argparse type of `--persona` and `--personas`: persona names, comma-separated, each one that exists."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"name at least one persona: {', '.join(PERSONAS)}")
    problem = next((unknown_persona(name) for name in names if unknown_persona(name)), "")
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return names


def _persona(text: str) -> list[str]:
    """argparse type of `--persona`: one persona that exists."""
    names = _personas(text)
    if len(names) > 1:
        raise argparse.ArgumentTypeError(f"{text!r} names {len(names)} personas: to draw one per episode, --personas")
    return names


def register(sub: Any) -> None:
    p = sub.add_parser("rollout", help="run agents on a world's tasks and collect judged episodes")
    p.add_argument("--server", type=http_url, metavar="URL", help="a running simia serve (default: serve in process)")
    p.add_argument("--world", required=True, help="world to roll out in")
    p.add_argument("--tasks", "--task", default="all", metavar="all|ID|FILE", help="tasks to run (default: all)")
    p.add_argument("--agent", metavar="SPEC", help="agent model (backend SPEC; default: local or a keyed provider)")
    p.add_argument("--user", metavar="SPEC", help="user-simulator model (backend SPEC)")
    p.add_argument("--sim-backend", metavar="SPEC", help="simulator model when serving in process")
    add_model_flags(p)
    p.add_argument("--n", type=positive, default=1, help="episodes per task (default 1)")
    p.add_argument("--concurrency", type=positive, default=4, help="episodes in flight (default 4)")
    p.add_argument("--max-turns", type=positive, default=10, help="agent model calls per episode (default 10)")
    p.add_argument("--retries", type=whole(0, 100), default=2, help="fresh-episode retries after an infra failure (2)")
    p.add_argument("--seed", type=seed, help="base seed for reproducible simulations")
    p.add_argument(
        "--curriculum",
        nargs="?",
        const="",
        metavar="DB",
        help="run one group of --n episodes per task, shared out by the tasks' recorded pass rates (most where it "
        "is near one half); DB: the database to read them from, the server's --db (in process: --out's simia.db)",
    )
    personas = p.add_mutually_exclusive_group()
    personas.add_argument(
        "--persona",
        type=_persona,
        dest="personas",
        metavar="NAME",
        help="the user simulator's persona in every episode: cooperative, terse, confused, impatient or adversarial "
        "(default: each task's own, cooperative where it names none)",
    )
    personas.add_argument(
        "--personas",
        type=_personas,
        metavar="A,B,...",
        help="personas to draw one from per episode (seeded by --seed, so a run replays)",
    )
    p.add_argument("--token", type=bearer_token, help="bearer token for --server")
    p.add_argument("--out", default="rollouts", metavar="DIR", help="results folder (default: rollouts)")
    add_worlds_dir(p)
    p.set_defaults(func=_rollout)
